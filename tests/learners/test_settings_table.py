"""Every argument of every learner in the registry takes effect or is refused: a table of settings x conditions,
checked against the learners' signatures so that a new argument cannot be left out.

Each entry says what giving the argument a value other than its default does, on a tiny run (cos, T=16, 2 seeds):
``changes`` (the run's learner state or regret differ from the run without it), ``speed`` (how it runs, not what: the
same regret to 1e-9), or ``guard`` (a bound the run is refused beyond). ``needs``: the settings under which it takes
effect; without them it is refused in one line naming it (``model.<arg>``). ``refused_under``: other settings under
which it would change nothing, and is refused naming it. A nested setting's fields have rows of their own
(``self_duel.test``). The data's own fields (dim, arms, rounds, num_seeds, link)
come from ``data.*`` and are not the learner's to give."""

import dataclasses
import inspect
from dataclasses import dataclass, field

import pytest
import torch

from nvldb_pl.learners.registry import LEARNERS, init_args
from nvldb_pl.learners.settings import merged
from nvldb_pl.loop.run import run_experiment
from nvldb_pl.maths.checks import LINKED_FROM_DATA

DATA = {"task": "cos", "rounds": 16, "num_seeds": 2, "seed": 0}
SMALL = {"NVLDB": {"network": {"width": 8}}, "NDB": {"network": {"width": 8}}}  # (smaller networks: a tiny run)


@dataclass(frozen=True)
class Setting:
    value: object
    kind: str = "changes"  # changes / speed / guard
    needs: dict = field(default_factory=dict)
    refused_under: dict = field(default_factory=dict)
    rounds: int = 16  # a setting that acts once a run has gone far enough (VACDB's upper layers) gets a longer one


TABLE = {
    "NVLDB": {
        "network.activation": Setting("gelu"),
        "beta": Setting(3.0),
        "network.bias": Setting(False),
        "network.depth": Setting(2),
        "distinct_arms": Setting(False),
        "episode": Setting(2),
        "epsilon": Setting(0.2, refused_under={"variance_aware": False}),
        "feature_dim": Setting(3),
        "grad_steps": Setting(3),
        "gram_mode": Setting("incremental"),
        "network.init": Setting("torch"),
        "lam": Setting(2.0),
        "lr": Setting(0.01),
        "network.module": Setting("tests.extensions.networks.LayerNormMLP"),
        "oracle_variance": Setting(True, refused_under={"variance_aware": False}),
        "network.parametrization": Setting("ntk"),
        "refit_iterations": Setting(1, refused_under={"refit_theta": False}),
        "refit_theta": Setting(False),
        "compute.backward": Setting("autograd", "speed"),
        "compute.history_pass": Setting("masked", "speed"),
        "sampler.size": Setting(4),
        "sampler.weighting": Setting("recency", needs={"sampler.size": 4}),
        "self_duel.escape_rate": Setting(0.5, needs={"self_duel.test": "escape"}),
        "self_duel.second_arm": Setting("deep", refused_under={"self_duel.test": "escape"}),
        "self_duel.test": Setting("escape"),
        "self_duel.width": Setting(3.0, refused_under={"self_duel.test": "escape"}),
        "strategy": Setting("ts_asym"),
        "train_network": Setting(False),
        "variance_aware": Setting(False),
        "w_reg": Setting(0.5),
        "network.width": Setting(4),
    },
    "NDB": {
        "network.activation": Setting("gelu"),
        "network.bias": Setting(False),
        "network.depth": Setting(2),
        "network.init": Setting("torch"),
        "network.module": Setting("tests.extensions.networks.LayerNormMLP"),
        "network.parametrization": Setting("ntk"),
        "network.width": Setting(4),
        "beta": Setting(3.0),
        "distinct_arms": Setting(False, rounds=60),  # (its rule first pairs an arm with itself near round 50)
        "grad_steps": Setting(3),
        "gram": Setting("diag"),
        "lam": Setting(2.0),
        "lr": Setting(0.01),
        "strategy": Setting("ts_asym"),
    },
    "CoLSTIM": {"beta": Setting(3.0), "lam": Setting(2.0), "refit_iterations": Setting(1)},
    "MaxInP": {"beta": Setting(0.1), "lam": Setting(0.1), "refit_iterations": Setting(1)},
    # VACDB explores in its first layer until its widths shrink: beta and the layers act from about round 100 on
    "VACDB": {
        "beta": Setting(3.0, rounds=200),
        "lam": Setting(2.0),
        "layers": Setting(1, rounds=200),
        "refit_iterations": Setting(1),
    },
    "RandomPair": {},
    "PairwiseGPLearner": {"beta": Setting(3.0), "refit_every": Setting(2), "max_rounds": Setting(8, "guard")},
}

ROWS = [(name, arg) for name in TABLE for arg in sorted(TABLE[name])]


def test_the_table_covers_every_argument_of_every_learner_in_the_registry():
    """A learner or an argument added without its row here fails this test."""
    assert set(TABLE) == set(LEARNERS)
    for name, cls in LEARNERS.items():
        assert set(TABLE[name]) == _settings(cls), name


def _settings(cls) -> set:
    """The learner's arguments, a nested one (a dataclass) by its fields: ``self_duel.test``."""
    params = inspect.signature(cls.__init__).parameters
    out = set()
    for arg in init_args(cls) - set(LINKED_FROM_DATA):
        default = params[arg].default if arg in params else None
        nested = dataclasses.is_dataclass(default) and not isinstance(default, type)
        out |= {f"{arg}.{f.name}" for f in dataclasses.fields(default)} if nested else {arg}
    return out


def _run(name: str, model: dict, rounds: int = DATA["rounds"]) -> tuple:
    if name == "PairwiseGPLearner":
        pytest.importorskip("botorch")
    model = merged(SMALL.get(name, {}), model)
    summary, module = run_experiment({**DATA, "rounds": rounds}, model, learner=name)
    return [s["cum_avg_regret"] for s in summary["seeds"]], module.state_dict(), dict(module.hparams)


def _differ(a: tuple, b: tuple) -> bool:
    (ra, sa, _), (rb, sb, _) = a, b
    if ra != rb or sa.keys() != sb.keys():
        return True
    return any(not (x.shape == sb[k].shape and torch.equal(x, sb[k])) for k, x in sa.items() if torch.is_tensor(x))


@pytest.mark.parametrize("name,arg", ROWS, ids=[f"{n}.{a}" for n, a in ROWS])
def test_every_setting_takes_effect_or_is_refused_naming_it(name, arg):
    s = TABLE[name][arg]
    given = {**s.needs, arg: s.value}
    if s.kind == "guard":  # a bound: a run past it is refused naming it, one within it runs
        with pytest.raises(ValueError, match=f"model.{arg}|{arg}"):
            _run(name, given)
        _run(name, {**s.needs, arg: DATA["rounds"]})
        return
    base, run = _run(name, dict(s.needs), s.rounds), _run(name, given, s.rounds)
    outer, _, inner = arg.partition(".")
    saved = base[2].get(outer, {}).get(inner) if inner else base[2].get(arg)
    if outer in base[2]:  # (NDB's rule is its strategy's old name: not held under its own)
        assert saved != s.value, f"the table's {name}.{arg}={s.value!r} is the default: it tests nothing"
    if s.kind == "speed":  # how it runs, not what: the same run
        assert torch.allclose(torch.tensor(base[0]), torch.tensor(run[0]), rtol=1e-9, atol=1e-9), (base[0], run[0])
    else:
        assert _differ(base, run), f"{name}.{arg}={s.value!r} ran as the run without it"
    for other, value in s.needs.items():  # without what it needs: refused, naming it
        without = {k: v for k, v in given.items() if k != other}
        with pytest.raises(ValueError, match=f"model.{arg}"):
            _run(name, without, s.rounds)
    if s.refused_under:
        with pytest.raises(ValueError, match=f"model.{arg}"):
            _run(name, {**given, **s.refused_under}, s.rounds)
