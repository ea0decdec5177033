"""sweep.py: the entry point of :mod:`nvldb_pl.experiments.sweep` (its docstring, and ``--help``, say how it is used).

Usage, for example:

    python scripts/sweep.py --rounds 500 --seeds 8 --tasks cos square --out results/probe/probe.jsonl \
    python scripts/sweep.py --summarize results/probe/probe.jsonl --baseline '{"parametrization": "ntk"}'
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nvldb_pl.experiments.sweep import *  # noqa: E402,F401,F403  (the script's names, for code that loads it)
from nvldb_pl.experiments.sweep import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
