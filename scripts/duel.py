"""duel.py: the entry point of :mod:`nvldb_pl.serve.terminal`, "A or B?" in a terminal (its docstring, and
``--help``, say how it is used).

Usage, for example:

    python scripts/duel.py                          # interactive: answer 1 or 2 (q or Ctrl-C stops)
    python scripts/duel.py --answers answers.txt    # answers from a file, one per line: 1, 2 or q
    python scripts/duel.py --simulate               # a simulated person with a hidden taste
    python scripts/duel.py --questions 30 --save me.pt   # ... and keep the learner (answers also in me.pt.answers)
    python scripts/duel.py --load me.pt             # go on from a saved learner
    python scripts/duel.py --catalog train --simulate --objective rank   # trips of real data, a person fitted to them
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nvldb_pl.serve.terminal import *  # noqa: E402,F401,F403  (the script's names, for code that loads it)
from nvldb_pl.serve.terminal import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
