"""Entry point: ``python scripts/main.py fit --config configs/cos.yaml``.

A configuration or data error (ValueError, FileNotFoundError) or a numerical failure
(FloatingPointError) ends the run with one clear line on stderr and exit status 2.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nvldb_pl.cli import main  # noqa: E402

if __name__ == "__main__":
    try:
        main()
    except (ValueError, FileNotFoundError, FloatingPointError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
