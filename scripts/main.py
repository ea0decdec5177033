"""Entry point: ``python scripts/main.py fit --config configs/cos.yaml``.

A configuration or data error (ValueError, FileNotFoundError) or a numerical failure
(FloatingPointError) ends the run with one clear line on stderr and exit status 2
(:func:`nvldb_pl.cli.run_cli`).
"""

import sys

from nvldb_pl.cli import run_cli

if __name__ == "__main__":
    sys.exit(run_cli())
