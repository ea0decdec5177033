"""Entry point: ``python scripts/main.py fit --config configs/cos.yaml``."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nvldb_pl.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
