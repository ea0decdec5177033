"""duel.py: the entry point of :mod:`nvldb_pl.serve.terminal`, whose docstring (and ``python scripts/duel.py --help``) says how it is
used."""

import sys

from nvldb_pl.serve.terminal import *  # noqa: F401,F403  (the script's names, for code that loads it)
from nvldb_pl.serve.terminal import main

if __name__ == "__main__":
    sys.exit(main())
