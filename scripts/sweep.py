"""sweep.py: the entry point of :mod:`nvldb_pl.experiments.sweep`, whose docstring (and ``python scripts/sweep.py --help``) says how it is
used."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nvldb_pl.experiments.sweep import *  # noqa: E402,F401,F403  (the script's names, for code that loads it)
from nvldb_pl.experiments.sweep import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
