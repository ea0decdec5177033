"""pair.py: the entry point of :mod:`nvldb_pl.experiments.pair` (its docstring, and ``--help``, say how it is used).

Usage, for example:

    python scripts/pair.py --task square --first NVLDB-UCB-ASYM results/paper/width/m1000 --second NVLDB-UCB-ASYM results/paper/width/m32
    python scripts/pair.py --task square --rounds 10000 2000 --at 2000 --first NVLDB-UCB-ASYM results/paper/width10k/m500 --second NVLDB-UCB-ASYM results/paper/width/m500
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nvldb_pl.experiments.pair import *  # noqa: E402,F401,F403  (the script's names, for code that loads it)
from nvldb_pl.experiments.pair import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
