"""The one registry of learners (``--model Name``, the live API) and of method names (reports,
sweeps): a method is a learner plus the model arguments that make it, e.g. NLDB-TS-CSYM is NVLDB
with ``strategy=ts_csym, variance_aware=false``.

Beside the names here, a method may be the import path of a researcher's own class
(:func:`method_spec`): a :class:`~nvldb_pl.learners.base.DuelingLearner` subclass (that learner with its own
defaults) or a :class:`~nvldb_pl.maths.selection.SelectionRule` subclass (NVLDB with that rule)."""

from __future__ import annotations

import inspect

from ..maths.checks import import_class
from ..maths.selection import STRATEGIES, SelectionRule
from .base import DuelingLearner, learner_name
from .settings import merged
from .gp import PairwiseGPLearner
from .linear import CoLSTIM, MaxInP
from .ndb import NDB
from .nvldb import NVLDB
from .random_pair import RandomPair
from .vacdb import VACDB

LEARNERS = {cls.__name__: cls for cls in (NVLDB, NDB, CoLSTIM, VACDB, MaxInP, RandomPair, PairwiseGPLearner)}


def init_args(cls: type) -> set[str]:
    """The argument names a learner class's constructor takes; where it passes ``**kwargs`` on (a subclass that
    changes a few defaults), also those of the classes it passes them to, up its MRO."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        names |= {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} - {"self"}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return names


# name -> (learner, model arguments). NVLDB's and NLDB's six rules, and the baselines.
METHODS: dict[str, tuple[str, dict]] = {
    **{f"NVLDB-{s.upper().replace('_', '-')}": ("NVLDB", {"strategy": s}) for s in STRATEGIES},
    **{f"NLDB-{s.upper().replace('_', '-')}": ("NVLDB", {"strategy": s, "variance_aware": False}) for s in STRATEGIES},
    "NDB-UCB": ("NDB", {"strategy": "ucb_asym"}),
    "NDB-TS": ("NDB", {"strategy": "ts_asym"}),
    "CoLSTIM": ("CoLSTIM", {}),
    "VACDB": ("VACDB", {}),
    "MaxInP": ("MaxInP", {}),
    "Random": ("RandomPair", {}),
    "PairwiseGP": ("PairwiseGPLearner", {}),  # the gp extra; short horizons only (refused past its max_rounds)
}

# The strict reading of the equations, where the defaults follow the practice of the public code the paper's
# experiments build on (configs/literal/): "<method>-literal". NVLDB's loss also as eq. (total_loss) writes it: no
# prior toward the initial weights (the default's w_reg 0.1).
LITERAL = {"network": {"parametrization": "ntk", "bias": False}, "distinct_arms": False}
LITERAL_OF = {"NVLDB": {**LITERAL, "w_reg": 0.0}, "NDB": LITERAL}
LITERAL_SUFFIX = "-literal"
LITERAL_LEARNERS = ("NVLDB-", "NLDB-", "NDB-")  # the methods whose defaults differ from the literal reading
METHODS.update(
    {
        name + LITERAL_SUFFIX: (learner, merged(model, LITERAL_OF[learner]))
        for name, (learner, model) in list(METHODS.items())
        if learner in LITERAL_OF
    }
)

# The default grid (issue "baselines"): six NVLDB rules, NLDB-UCB-ASYM, and every baseline.
DEFAULT_METHODS = [
    m
    for m in METHODS
    if (not m.startswith("NLDB-") or m == "NLDB-UCB-ASYM") and not m.endswith(LITERAL_SUFFIX) and m != "PairwiseGP"
]


def learner_class(name: str, field: str = "model") -> type:
    """The learner ``name``: one of :data:`LEARNERS`, or the import path of a DuelingLearner subclass."""
    if name in LEARNERS:
        return LEARNERS[name]
    if "." not in str(name):
        raise ValueError(
            f"{field}: unknown learner {name!r}; choose one of {list(LEARNERS)} or give the import path "
            f"of a nvldb_pl.learners.base.DuelingLearner subclass"
        )
    return import_class(name, DuelingLearner, field, "a nvldb_pl.learners.base.DuelingLearner subclass")


def method_spec(name: str, field: str = "--methods") -> tuple[str, dict]:
    """(learner, model arguments) of the method ``name``: a name of :data:`METHODS`, the import path of a
    DuelingLearner subclass (``(path, {})``), or of a SelectionRule subclass (``("NVLDB", {"strategy": path})``)."""
    if name in METHODS:
        return METHODS[name]
    if "." in str(name):
        cls = import_class(name, object, field, "a class")
        if isinstance(cls, type) and issubclass(cls, DuelingLearner):
            return name, {}
        if isinstance(cls, type) and issubclass(cls, SelectionRule):
            return "NVLDB", {"strategy": name}
        raise ValueError(
            f"{field}: {name!r} is neither a nvldb_pl.learners.base.DuelingLearner nor a "
            f"nvldb_pl.maths.selection.SelectionRule subclass"
        )
    raise ValueError(
        f"{field}: unknown {[name]}; choose from {list(METHODS)}, or give the import path of a "
        f"DuelingLearner or SelectionRule subclass"
    )


def learner_path(cls: type) -> str:
    """The name a learner class is saved under: its :data:`LEARNERS` name, else its import path."""
    return next((k for k, v in LEARNERS.items() if v is cls), learner_name(cls))
