"""Where a class of one's own is found: the folder the command runs in.

A config may name a module of one's own (``model.network: my_net.Net``, a ``class_path``, ``--set network=...``);
the package's commands (``nvldb``, ``nvldb-reproduce``, ``python scripts/main.py``, ...) look for it in the folder
they run from, as ``python -m`` does, after the installed packages (a file there named as one of them does not
shadow it). The library itself (:mod:`nvldb_pl.live`, :func:`nvldb_pl.loop.run.run_experiment`) leaves
``sys.path`` as the caller has it.
"""

from __future__ import annotations

import os
import sys


def find_own_modules_here() -> None:
    """Append the working folder to ``sys.path`` (once; nothing where it or ``""`` is there already)."""
    here = os.getcwd()
    if "" in sys.path or any(os.path.abspath(p) == here for p in sys.path if p):
        return
    sys.path.append(here)
