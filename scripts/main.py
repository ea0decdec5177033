"""Entry point: ``python scripts/main.py fit --config configs/cos.yaml``.

A configuration or data error (ValueError, FileNotFoundError) or a numerical failure
(FloatingPointError) ends the run with one clear line on stderr and exit status 2
(:func:`nvldb_pl.cli.run_cli`).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nvldb_pl.cli import run_cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(run_cli())
