"""No host synchronisation inside a round (issue 17), checked on CPU.

On CUDA, reading a device tensor on the host (``.item()``, ``.tolist()``, ``bool(t)``, ``int(t)``,
``.cpu()``, ``torch.unique``, ``nonzero``...) waits for every queued kernel, and so does making a
tensor from host data (``torch.tensor``: a blocking copy); a round that does either cannot run
ahead of the GPU (nor be captured in a CUDA graph). Here every such call made from the package's
own code while a round runs (from the loop's ``on_train_batch_start`` to the end of its
``on_train_batch_end``, the every-N-rounds flush excepted) is recorded, with
:func:`nvldb_pl.machinery.host.reads_without_sync` answering False as on an accelerator.
"""

import os
import sys

import pytest
import torch

import nvldb_pl
from nvldb_pl.machinery import host
from nvldb_pl.loop.callbacks import DuelingLoop
from nvldb_pl.learners.registry import METHODS
from nvldb_pl.loop.run import run_experiment

PACKAGE = os.path.dirname(nvldb_pl.__file__)
TENSOR_READS = ("item", "tolist", "numpy", "cpu", "nonzero", "unique", "__bool__", "__int__", "__float__", "__index__")


@pytest.fixture
def host_reads(monkeypatch):
    """The package's host reads of tensors during rounds, as a list of 'file:line (what)'."""
    found, state = [], {"in_round": False}

    def recording(name, original, on_device_only=False):
        """``original``, recording a call from the package's code in a round (``on_device_only``: one given a
        device; without one torch.tensor makes a host tensor, no copy)."""

        def wrapper(*args, **kwargs):
            caller = sys._getframe(1)
            if on_device_only and kwargs.get("device") is None:
                return original(*args, **kwargs)
            if state["in_round"] and caller.f_code.co_filename.startswith(PACKAGE):
                found.append(f"{os.path.relpath(caller.f_code.co_filename, PACKAGE)}:{caller.f_lineno} ({name})")
            return original(*args, **kwargs)

        return wrapper

    for name in TENSOR_READS:
        monkeypatch.setattr(torch.Tensor, name, recording(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch, "unique", recording("torch.unique", torch.unique))
    monkeypatch.setattr(torch, "nonzero", recording("torch.nonzero", torch.nonzero))
    for name in ("tensor", "as_tensor"):  # a tensor from host data on a device: on CUDA a blocking host-to-device copy
        monkeypatch.setattr(torch, name, recording(f"torch.{name}", getattr(torch, name), on_device_only=True))
    monkeypatch.setattr(host, "reads_without_sync", lambda x: False)  # as on an accelerator
    monkeypatch.setattr("nvldb_pl.learners.vacdb.reads_without_sync", lambda x: False)

    def spanning(hook, on_entry, on_exit):
        def wrapper(self, *args, **kwargs):
            state["in_round"] = on_entry
            try:
                return hook(self, *args, **kwargs)
            finally:
                state["in_round"] = on_exit

        return wrapper

    monkeypatch.setattr(DuelingLoop, "on_train_batch_start", spanning(DuelingLoop.on_train_batch_start, True, True))
    monkeypatch.setattr(DuelingLoop, "on_train_batch_end", spanning(DuelingLoop.on_train_batch_end, True, False))
    flush = DuelingLoop.flush  # every log_every_n_rounds rounds, by design: reads the curves on the host

    def flush_outside_round(self, *args, **kwargs):
        was, state["in_round"] = state["in_round"], False
        try:
            return flush(self, *args, **kwargs)
        finally:
            state["in_round"] = was

    monkeypatch.setattr(DuelingLoop, "flush", flush_outside_round)
    return found


SMALL = {"network": {"width": 8}, "grad_steps": 2}
CASES = [
    ("NVLDB-UCB-ASYM", {}),
    ("NVLDB-TS-CSYM", {"gram_mode": "incremental", "episode": 2}),
    ("NVLDB-UCB-OSYM", {"sampler": {"size": 8}, "compute": {"history_pass": "masked"}}),
    ("NVLDB-TS-OSYM", {"sampler": {"size": 8, "weighting": "recency"}, "compute": {"backward": "autograd"}}),
    ("NLDB-UCB-CSYM-literal", {"compute": {"history_pass": "full"}}),
    ("NLDB-TS-ASYM", {"compute": {"history_pass": "graphed"}}),
    ("NDB-UCB", {}),
    ("NDB-TS", {}),
    ("CoLSTIM", None),
    ("VACDB", None),
    ("MaxInP", None),
    ("Random", None),
]


@pytest.mark.parametrize("method,extra", CASES, ids=[c[0] for c in CASES])
def test_a_round_reads_no_tensor_on_the_host(host_reads, method, extra):
    learner, model = METHODS[method]
    model = {**model, **SMALL, **extra} if extra is not None else dict(model)
    summary, _ = run_experiment(
        {"task": "cos", "rounds": 16, "num_seeds": 3}, model, learner=learner, log_every_n_rounds=10
    )
    assert summary["rounds"] == 16
    assert host_reads == [], f"{method}: host reads inside a round: {sorted(set(host_reads))}"


def test_the_progress_bar_value_is_logged_as_a_host_tensor(monkeypatch):
    """Lightning reads every progress-bar value on the host after every batch (its logger connector's
    on_batch_end), outside the package's hooks. A float given to ``self.log`` is put on the module's device,
    so on CUDA that read waited for the device every round; a host tensor is read without a wait."""
    from lightning.pytorch import LightningModule

    logged, log = [], LightningModule.log

    def recording_log(self, name, value, *args, **kwargs):
        logged.append((name, value))
        return log(self, name, value, *args, **kwargs)

    monkeypatch.setattr(LightningModule, "log", recording_log)
    run_experiment({"task": "cos", "rounds": 25, "num_seeds": 2}, SMALL, log_every_n_rounds=10)
    assert [name for name, _ in logged] == ["R/t"] * 3  # at rounds 10, 20 and 25
    assert all(torch.is_tensor(v) and v.device.type == "cpu" for _, v in logged), logged


def test_the_recorder_sees_a_host_read_inside_a_round(host_reads, monkeypatch):
    """The check above could fail: with host reads allowed (as in host memory), VACDB's read of the
    round's layers (``layer_of.tolist()``, once a round) is caught, and only that."""
    monkeypatch.setattr("nvldb_pl.learners.vacdb.reads_without_sync", lambda x: True)
    run_experiment({"task": "cos", "rounds": 6, "num_seeds": 2}, {}, learner="VACDB", log_every_n_rounds=10)
    assert len(host_reads) == 6 and {r.split(" ")[0].split(":")[0] for r in host_reads} == {
        os.path.join("learners", "vacdb.py")
    }
    assert all(r.endswith("(tolist)") for r in host_reads)


def test_vacdb_refits_the_same_per_seed_whether_or_not_it_may_read_the_layers(monkeypatch):
    """VACDB skips, in host memory, the layers no seed stored into; on an accelerator it refits every
    layer and keeps, per seed, only the one its duel went to: the same result bit for bit."""
    data = {"task": "square", "rounds": 60, "num_seeds": 3}
    _, skipping = run_experiment(data, {}, learner="VACDB")
    monkeypatch.setattr("nvldb_pl.learners.vacdb.reads_without_sync", lambda x: False)
    _, all_layers = run_experiment(data, {}, learner="VACDB")
    assert torch.equal(skipping.theta, all_layers.theta)
    assert torch.equal(skipping.hist_xt, all_layers.hist_xt)
    assert int((skipping.hist_layer > 0).sum()) > 0  # some duels were stored in layers, so refits ran


def test_the_step_sizes_made_on_the_device_are_the_listed_ones():
    from nvldb_pl.maths.objective import STEP_SIZES, _step_sizes

    assert _step_sizes(torch.device("cpu")).tolist() == list(STEP_SIZES)


def test_the_host_mirrors_of_the_seed_buffers_follow_load_and_take_seeds():
    """_sample_rows draws from (base seed, seed id) read on the host: those copies must follow the
    buffers through a checkpoint load and take_seeds, or a resumed bounded run would draw other rows."""
    from nvldb_pl.learners.nvldb import NVLDB

    trained = NVLDB(dim=3, arms=3, rounds=10, num_seeds=2, network={"width": 4})
    trained.init_parameters(7, [3, 4])
    fresh = NVLDB(dim=3, arms=3, rounds=10, num_seeds=2, network={"width": 4})
    assert (fresh._base_seed, fresh.seed_ids) == (0, [0, 1])
    fresh.load_state_dict(trained.state_dict())
    assert (fresh._base_seed, fresh.seed_ids) == (7, [3, 4])
    fresh.take_seeds([1])
    assert fresh.seed_ids == [4] and fresh.seed_id.tolist() == [4]
