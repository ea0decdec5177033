"""sweep.py: the entry point of :mod:`nvldb_pl.experiments.sweep`, whose docstring (and ``python scripts/sweep.py --help``) says how it is
used."""

import sys

from nvldb_pl.experiments.sweep import *  # noqa: F401,F403  (the script's names, for code that loads it)
from nvldb_pl.experiments.sweep import main

if __name__ == "__main__":
    sys.exit(main())
