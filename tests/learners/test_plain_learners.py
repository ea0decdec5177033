"""Learners as plain torch algorithms: their settings collected as Lightning collects a module's, their steps driven
with or without Lightning, and the one adapter keeping a checkpoint's layout."""

import dataclasses

import lightning.pytorch as pl
import pytest
import torch

from nvldb_pl.learners.base import DuelingLearner, Execution
from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.learners.registry import LEARNERS
from nvldb_pl.environments.regret import split_state
from nvldb_pl.loop.module import LearnerModule


class _Base(DuelingLearner):
    def __init__(
        self, dim: int = 5, arms: int = 5, rounds: int = 10, num_seeds: int = 2, link: str = "logistic", c=1.0
    ):
        super().__init__(dim, arms, rounds, num_seeds, link)
        c = c * 2  # a value changed before it is saved: saved as changed (Lightning reads the frame's locals)
        self.save_hyperparameters()


class _Sub(_Base):
    def __init__(self, width: int = 3, **kwargs):
        super().__init__(**kwargs)


class _LitBase(pl.LightningModule):
    def __init__(
        self, dim: int = 5, arms: int = 5, rounds: int = 10, num_seeds: int = 2, link: str = "logistic", c=1.0
    ):
        super().__init__()
        c = c * 2
        self.save_hyperparameters()


class _LitSub(_LitBase):
    def __init__(self, width: int = 3, **kwargs):
        super().__init__(**kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"c": 0.5, "rounds": 7}])
def test_save_hyperparameters_collects_what_lightnings_collects(kwargs):
    """The plain learner's own save_hyperparameters against Lightning's on the same constructors: a subclass with
    **kwargs, a value changed before saving."""
    assert dict(_Base(**kwargs).hparams) == dict(_LitBase(**kwargs).hparams)
    assert dict(_Sub(width=4, **kwargs).hparams) == dict(_LitSub(width=4, **kwargs).hparams)
    assert _Sub(width=4, **kwargs).hparams.width == 4 and _Base(**kwargs).hparams.c == 2 * kwargs.get("c", 1.0)


def test_a_learner_is_no_lightning_module_and_the_adapter_is():
    m = NVLDB(dim=5, arms=4, rounds=5, num_seeds=2, network={"width": 4})
    assert not isinstance(m, pl.LightningModule) and isinstance(m, torch.nn.Module)
    module = LearnerModule(m)
    assert module.learner is m and dict(module.hparams) == dict(m.hparams)


def test_the_adapters_state_is_the_learners_keys_beside_the_regret_and_loads_back():
    """A checkpoint's layout as when each learner was its own LightningModule: the learner's keys unprefixed, the
    metric's under regret.; a load puts each part where it belongs."""
    m = NVLDB(dim=5, arms=4, rounds=5, num_seeds=2, network={"width": 4})
    m.init_parameters(3, [0, 1])
    module = LearnerModule(m)
    state = module.state_dict()
    learner, regret = split_state(state)
    assert set(learner) == set(m.state_dict()) and set(regret) == {"seed_ids", "cum_avg", "cum_weak", "rounds"}
    assert "net.theta" in state and "regret.cum_avg" in state and not any(k.startswith("learner.") for k in state)
    other = LearnerModule(NVLDB(dim=5, arms=4, rounds=5, num_seeds=2, network={"width": 4}))
    changed = {**state, "regret.cum_avg": torch.tensor([1.5, 2.5], dtype=torch.float64)}
    other.load_state_dict(changed)
    assert torch.equal(other.learner.net.theta, m.net.theta) and other.regret.cum_avg.tolist() == [1.5, 2.5]
    with pytest.raises(RuntimeError, match="net.theta"):
        other.load_state_dict({k: v for k, v in state.items() if k != "net.theta"})


def test_an_older_live_saves_regret_keys_are_dropped_by_the_learner():
    """Migration 11: a learner's state held the regret metric before; loading such a state into a learner drops
    it, strict load and all."""
    m = NVLDB(dim=5, arms=4, rounds=5, num_seeds=2, network={"width": 4})
    old = {**m.state_dict(), "regret.cum_avg": torch.zeros(2, dtype=torch.float64), "regret.rounds": torch.tensor(0)}
    NVLDB(dim=5, arms=4, rounds=5, num_seeds=2, network={"width": 4}).load_state_dict(old)


def test_the_plain_execution_steps_the_optimizer_it_is_given():
    """Outside a Trainer the learner's steps are plain torch: backprop is loss.backward(), the step its optimizer's."""
    m = NVLDB(dim=5, arms=4, rounds=5, num_seeds=1, network={"width": 4})
    assert m.optimizer() is None and m.execution.scaler is None
    opt = torch.optim.SGD(m.net.parameters(), lr=1.0)
    m.execute_with(Execution(optimizer=opt))
    before = m.net.theta.detach().clone()
    m.backprop(m.net.theta.sum())
    m.optimizer().step()
    assert torch.equal(m.net.theta.detach(), before - 1.0)


def test_nvldbs_typed_settings_hold_every_argument_with_its_value_in_force_and_are_frozen():
    """NVLDBSettings: a field for each of NVLDB's arguments (a new argument cannot be left out of it), the values
    the learner saved (derived defaults filled in), read-only."""
    import dataclasses
    import inspect

    from nvldb_pl.learners.nvldb_settings import NVLDBSettings

    args = set(inspect.signature(NVLDB.__init__).parameters) - {"self"}
    assert {f.name for f in dataclasses.fields(NVLDBSettings)} == args
    m = NVLDB(dim=5, arms=4, rounds=5, num_seeds=2, network={"width": 4}, oracle_variance=True)
    s = m.settings
    assert isinstance(s, NVLDBSettings) and {k: _saved(getattr(s, k)) for k in args} == dict(m.hparams)
    assert s.epsilon == pytest.approx(5**-0.5) and s.beta == 1.0 and s.self_duel.test == "deep_diag"
    assert s.variance_mode == "oracle" == m.variance_mode and s.p == 5 and not s.own_test
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.lr = 1.0


def _saved(value):
    """A setting as the learner saves it: a nested one (a dataclass) as its mapping."""
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_every_built_in_learner_reads_typed_frozen_settings_holding_each_argument_in_force(name):
    """Each learner of the registry keeps its settings typed and frozen (``self.settings``, extending the data's
    linked fields): a field for each of its arguments, with the value it saved (a default derived from others filled
    in: the linear baselines' beta, VACDB's layers), read-only; NDB's old name ``rule`` is saved as ``strategy``."""
    import dataclasses
    import importlib.util

    from nvldb_pl.learners.registry import init_args
    from nvldb_pl.learners.settings import LinkedSettings

    if name == "PairwiseGPLearner" and importlib.util.find_spec("botorch") is None:
        pytest.skip("botorch is not installed (the gp extra)")
    cls = LEARNERS[name]
    small = {"network": {"width": 4}} if name in ("NVLDB", "NDB") else {}
    m = cls(dim=3, arms=3, rounds=9, num_seeds=2, **small)
    s, args = m.settings, init_args(cls)
    assert dataclasses.is_dataclass(s) and isinstance(s, LinkedSettings)
    assert args <= {f.name for f in dataclasses.fields(s)}
    assert {k: _saved(getattr(s, k)) for k in args} == {k: m.hparams[k] for k in args}
    assert None not in [getattr(s, k) for k in ("beta", "layers") if k in args]  # derived defaults in force
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.dim = 4
