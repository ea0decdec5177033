"""serve.py: the entry point of :mod:`nvldb_pl.serve.command` (installed as ``nvldb-serve``), whose docstring (and
``python scripts/serve.py --help``) says how it is used."""

import sys

from nvldb_pl.serve.command import *  # noqa: F401,F403  (the script's names, for code that loads it)
from nvldb_pl.serve.command import main

if __name__ == "__main__":
    sys.exit(main())
