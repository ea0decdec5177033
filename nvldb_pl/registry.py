"""The one registry of learners (``--model Name``, the live API) and of method names (reports,
sweeps): a method is a learner plus the model arguments that make it, e.g. NLDB-TS-CSYM is NVLDB
with ``strategy=ts_csym, variance_aware=false``."""
from __future__ import annotations

import inspect

from . import baselines
from .module import LITERAL, NVLDB
from .selection import STRATEGIES

LEARNERS = {"NVLDB": NVLDB, **{name: getattr(baselines, name) for name in
                               ("NDB", "CoLSTIM", "VACDB", "MaxInP", "RandomPair")}}


def init_args(cls: type) -> set[str]:
    """The argument names a learner class's constructor takes."""
    return set(inspect.signature(cls.__init__).parameters) - {"self"}


# name -> (learner, model arguments). NVLDB's and NLDB's six rules, and the baselines.
METHODS: dict[str, tuple[str, dict]] = {
    **{f"NVLDB-{s.upper().replace('_', '-')}": ("NVLDB", {"strategy": s}) for s in STRATEGIES},
    **{f"NLDB-{s.upper().replace('_', '-')}": ("NVLDB", {"strategy": s, "variance_aware": False}) for s in STRATEGIES},
    "NDB-UCB": ("NDB", {"rule": "ucb"}),
    "NDB-TS": ("NDB", {"rule": "ts"}),
    "CoLSTIM": ("CoLSTIM", {}),
    "VACDB": ("VACDB", {}),
    "MaxInP": ("MaxInP", {}),
    "Random": ("RandomPair", {}),
}

# The strict reading of the equations (see LITERAL in nvldb_pl/module.py): "<method>-literal".
LITERAL_SUFFIX = "-literal"
LITERAL_LEARNERS = ("NVLDB-", "NLDB-", "NDB-")  # the methods whose defaults differ from the literal reading
METHODS.update({name + LITERAL_SUFFIX: (learner, {**model, **LITERAL})
                for name, (learner, model) in list(METHODS.items()) if learner in ("NVLDB", "NDB")})

# The default grid (issue "baselines"): six NVLDB rules, NLDB-UCB-ASYM, and every baseline.
DEFAULT_METHODS = [m for m in METHODS if (not m.startswith("NLDB-") or m == "NLDB-UCB-ASYM")
                   and not m.endswith(LITERAL_SUFFIX)]
