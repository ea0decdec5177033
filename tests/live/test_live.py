"""The ask/tell API (nvldb_pl.live): the same learner code as the Lightning loop, late answers,
save/load, checkpoints of fit runs, bad input."""

import os

import numpy as np
import pytest
import torch

from nvldb_pl.environments.stream import RoundStream
from nvldb_pl.loop.data import BanditDataModule
from nvldb_pl.live import DuelingBandit
from nvldb_pl.loop.run import run_experiment
from tests.helpers.gpu_saved import as_saved_by_a_graphed_cuda_run

T = 24
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _stream(data):
    dm = BanditDataModule(**data)
    return dm, RoundStream(dm.spec, 0, dm.dataset)


@pytest.mark.parametrize(
    "learner,model",
    [
        # w_reg 0: the deep self-duel test stays silent in these 24 rounds (at the default 0.1 it fires on seed 3,
        # and a live bandit never plays a self-duel: the two would part there by design)
        ("NVLDB", {"strategy": "ucb_asym", "w_reg": 0.0}),
        ("NVLDB", {"strategy": "ts_csym", "variance_aware": False, "episode": 3, "gram_mode": "incremental"}),
        ("NDB", {"strategy": "ts_asym", "network": {"width": 8}}),
        ("CoLSTIM", {}),
    ],
)
def test_live_bandit_answered_at_once_is_the_loop(learner, model):
    """Fed a fit run's contexts, TS noise and answers, a live bandit makes the same selections
    and ends in the same state, bit for bit (it runs the learner's own select/observe/update)."""
    data = {"task": "cos", "rounds": T, "num_seeds": 1, "seed": 3}
    _, fitted = run_experiment(data, dict(model), learner=learner)
    bandit = DuelingBandit.create(learner, dim=5, horizon=T, seed=3, standardize=False, **model)  # as the loop
    dm, stream = _stream(data)
    for batch in stream:
        x = batch["contexts"][0].numpy()
        i, j = bandit.select(x, noise=batch["noise"])
        du = batch["utilities"][0, i] - batch["utilities"][0, j]
        o = int(batch["uniform"][0] < dm.preference_prob(du))
        bandit.observe(x, i, j, o)
    live = bandit.learner
    assert torch.equal(live.hist_xt, fitted.hist_xt)  # every selected pair, in order
    assert torch.equal(live.hist_o, fitted.hist_o)
    for name, value in fitted.state_dict().items():
        if name.startswith(("net.", "V", "Vinv", "theta", "Sigma")):
            assert torch.equal(live.state_dict()[name], value), name


def _unit_rows(rng, k, d):
    x = rng.normal(size=(k, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_select_changes_nothing_and_late_answers_in_any_order():
    """Three pairs shown before any answer, answered in reverse order: each duel is recorded with
    its own contexts and outcome, and the incremental Gram matrix is lam I + sum dphi dphi^T /
    zeta^2 with dphi at each answer's time (fixed network: a direct per-duel sum)."""
    rng = np.random.default_rng(0)
    b = DuelingBandit.create(
        "NVLDB",
        dim=4,
        horizon=2,
        seed=5,
        gram_mode="incremental",
        train_network=False,
        refit_theta=False,
        lam=0.5,
        strategy="ts_asym",
        standardize=False,  # the history holds the contexts as given
    )
    before = {k: v.clone() for k, v in b.learner.state_dict().items()}
    shown = []
    for _ in range(3):
        x = _unit_rows(rng, 6, 4)
        shown.append((x, *b.select(x)))
    for k, v in b.learner.state_dict().items():
        assert torch.equal(v, before[k]), k
    answers = [1, 0, 1]
    for (x, i, j), o in reversed(list(zip(shown, answers))):
        b.observe(x, i, j, o)
    L = b.learner
    assert L.t == 3 and L.hist_o.shape[-1] >= 3  # the history grew past its horizon of 2
    V = 0.5 * torch.eye(4, dtype=torch.float64)
    net = L.net
    for n, ((x, i, j), o) in enumerate(reversed(list(zip(shown, answers)))):
        xi, xj = (torch.tensor(x[k], dtype=torch.float32).view(1, 1, 4) for k in (i, j))
        assert torch.equal(L.hist_xt[0, :, 2 * n], xi.view(4)) and torch.equal(L.hist_xt[0, :, 2 * n + 1], xj.view(4))
        assert L.hist_o[0, n] == o
        dphi = (net.features(xi) - net.features(xj)).detach().view(4).double()
        df = float(dphi @ net.theta[0].detach().double())
        s = 1 / (1 + np.exp(-df))
        zeta = max(np.sqrt(s * (1 - s)), L.hparams.epsilon)  # eq. (wi)
        V += torch.outer(dphi, dphi) / zeta**2
    assert torch.allclose(L.V[0], V, rtol=1e-5)  # phi is float32: batch shape changes its rounding


def test_save_and_load_go_on_identically(tmp_path):
    rng = np.random.default_rng(1)
    a = DuelingBandit.create("NVLDB", dim=5, horizon=8, seed=2, strategy="ts_osym", network={"width": 16})
    for _ in range(10):
        x = _unit_rows(rng, 5, 5)
        i, j = a.select(x)
        a.observe(x, i, j, int(rng.random() < 0.5))
    path = str(tmp_path / "bandit.pt")
    a.save(path)
    b = DuelingBandit.from_checkpoint(path)
    assert b.num_observed == 10
    for _ in range(8):
        x, o = _unit_rows(rng, 5, 5), int(rng.random() < 0.5)
        pa, pb = a.select(x), b.select(x)  # Thompson draws continue from the saved generator
        assert pa == pb
        a.observe(x, *pa, o)
        b.observe(x, *pb, o)
    for k, v in a.learner.state_dict().items():
        assert torch.equal(v, b.learner.state_dict()[k]), k


def test_from_a_fit_checkpoint_takes_one_seed(tmp_path):
    """A fit run's last.ckpt (3 seeds): the live bandit is seed 1 of it, and selects as it would."""
    from nvldb_pl.cli import run_cli

    root = str(tmp_path / "run")
    assert (
        run_cli(
            [
                "fit",
                "--config",
                "configs/cos.yaml",
                "--data.rounds",
                "12",
                "--data.num_seeds",
                "3",
                "--trainer.default_root_dir",
                root,
                "--trainer.enable_progress_bar",
                "false",
                "--model.network.width",
                "8",
            ]
        )
        == 0
    )
    ckpt = os.path.join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    bandit = DuelingBandit.from_checkpoint(ckpt, seed_index=1)
    state = torch.load(ckpt, weights_only=False)["state_dict"]
    assert torch.equal(bandit.learner.net.theta[0], state["net.theta"][1])
    assert torch.equal(bandit.learner.V[0], state["V"][1])
    assert bandit.num_observed == 12 and bandit.learner.seed_ids == [1]
    x = _unit_rows(np.random.default_rng(2), 5, 5)
    from nvldb_pl.learners.nvldb import NVLDB

    hp = torch.load(ckpt, weights_only=False)["hyper_parameters"]
    m3 = NVLDB(**{k: v for k, v in hp.items() if not k.startswith("_")})
    m3.load_state_dict(state)
    noise = torch.randn(3, 5, 5, dtype=torch.float64)
    a1, a2 = m3.select(torch.tensor(x, dtype=torch.float32).expand(3, 5, 5), noise, 13)
    assert bandit.select(x, noise=noise[1:2]) == (int(a1[1]), int(a2[1]))
    # the same file as a graphed CUDA run saves it, read on this machine without a GPU: Adam as a CPU bandit
    # sets it, and learning goes on as from the CPU file, bit for bit
    gpu_ckpt = str(tmp_path / "gpu.ckpt")
    as_saved_by_a_graphed_cuda_run(ckpt, gpu_ckpt)
    moved = DuelingBandit.from_checkpoint(gpu_ckpt, seed_index=1)
    group = moved.learner.optimizer().param_groups[0]
    assert group["foreach"] and not group["fused"] and not group["capturable"]
    x2 = _unit_rows(np.random.default_rng(3), 5, 5)
    bandit.observe(x2, 0, 1, 1)  # learning goes on past the run's horizon
    assert bandit.num_observed == 13
    moved.observe(x2, 0, 1, 1)
    for k, v in bandit.learner.state_dict().items():
        assert torch.equal(v, moved.learner.state_dict()[k]), k


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda b: b.select(np.zeros((1, 5))), "contexts: expected a [K, d]"),
        (lambda b: b.select(np.zeros((3, 4))), "d = 5"),
        (lambda b: b.select(np.array([[0.0] * 5, [np.nan] + [0.0] * 4])), "item(s) [1]"),
        (lambda b: b.observe(np.eye(5), 0, 5, 1), "j: must be an item index in [0, 5)"),
        (lambda b: b.observe(np.eye(5), 0, 1, 2), "outcome: must be 1"),
        (lambda b: b.observe(np.eye(5), 0, 1, 0.5), "outcome"),
        (lambda b: b.observe(np.eye(5), 0, True, 1), "j: must be an item index"),
        (lambda b: b.observe(np.eye(5), torch.tensor(1.0), 1, 1), "i: must be an item index"),
        (lambda b: b.observe(np.eye(5), torch.tensor([0, 1]), 1, 1), "i: must be an item index"),
        (lambda b: b.scores(np.zeros((0, 5))), "K >= 1 item and d = 5"),
        (
            lambda b: DuelingBandit.create("NVLDB", dim=5, seed=-1),
            "seed: must be an integer between 0 and 4294967295 (the seeds numpy takes), got -1",
        ),
        (
            lambda b: DuelingBandit.from_config(os.path.join(ROOT, "configs", "live.yaml"), dim=5, seed=-1),
            "seed: must be an integer between 0 and 4294967295",
        ),
        (lambda b: DuelingBandit.from_config({"seed_everything": -4}, dim=5), "config: seed_everything: must be an"),
        (lambda b: DuelingBandit.from_config({"seed_everything": True}, dim=5), "seed_everything: true (a random seed"),
        (lambda b: DuelingBandit.create("NVLDB", dim=5, beta=float("inf")), "model.beta: must be a finite number > 0"),
    ],
)
def test_bad_calls_name_the_argument(call, message):
    b = DuelingBandit.create("NVLDB", dim=5, horizon=10)
    with pytest.raises(ValueError) as err:
        call(b)
    assert message in str(err.value)
    assert b.num_observed == 0


def test_indices_and_outcomes_from_torch_and_numpy_are_the_python_ones():
    """An index from ``torch.argmax`` or ``np.argmax`` and an outcome tensor learn exactly what the
    Python ints do; ``scores`` takes a single item."""
    x = np.eye(5)
    plain, typed = (DuelingBandit.create("NVLDB", dim=5, horizon=10, seed=1) for _ in range(2))
    plain.observe(x, 3, 1, 1)
    typed.observe(x, torch.argmax(torch.tensor([0, 0, 0, 9, 0])), np.argmax([0, 9, 0]), torch.tensor(1.0))
    plain.observe(x, 0, 2, 0)
    typed.observe(x, np.int64(0), torch.tensor([2]), np.bool_(False))
    for k, v in plain.learner.state_dict().items():
        assert torch.equal(v, typed.learner.state_dict()[k]), k
    assert typed.scores(x[:1]).shape == (1,)
    assert np.isclose(typed.scores(x[:1])[0], typed.scores(x)[0], rtol=1e-6)


def test_bad_configs_and_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="VACDB cannot be used live"):
        DuelingBandit.create("VACDB")
    with pytest.raises(ValueError, match="oracle_variance"):
        DuelingBandit.create("NVLDB", oracle_variance=True)
    with pytest.raises(ValueError, match="unknown learner 'Nope'"):
        DuelingBandit.create("Nope")
    with pytest.raises(ValueError, match=r"no argument\(s\) \['stratgy'\]"):
        DuelingBandit.from_config({"model": {"stratgy": "ucb_asym"}})
    with pytest.raises(ValueError, match="model.strategy"):
        DuelingBandit.from_config({"model": {"strategy": "nope"}})
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        DuelingBandit.from_config(str(tmp_path / "missing.yaml"))
    # a misspelt section or data field was left out without a word (dim 5 in place of 10)
    with pytest.raises(ValueError, match=r"config: no section\(s\) \['modle'\]"):
        DuelingBandit.from_config({"modle": {"network": {"width": 8}}})
    with pytest.raises(ValueError, match=r"config: data has no argument\(s\) \['dims'\]; it takes \[.*'dim'"):
        DuelingBandit.from_config({"data": {"dims": 10}})
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00data")
    with pytest.raises(ValueError, match="config: .*binary.yaml is not a UTF-8 text file"):
        DuelingBandit.from_config(str(binary))
    binary.unlink()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="bad.pt: not a readable checkpoint"):
        DuelingBandit.from_checkpoint(str(bad))
    b = DuelingBandit.create("NVLDB", dim=5, horizon=10)
    good = tmp_path / "good.pt"
    b.save(str(good))
    size = good.stat().st_size
    with pytest.raises(FileNotFoundError, match="does not exist"):
        b.save(str(tmp_path / "no" / "such" / "x.pt"))
    with pytest.raises(ValueError, match="seed_index"):
        DuelingBandit.from_checkpoint(str(good), seed_index=1)
    for index in (True, 0.0, "0"):  # an IndexError, a TypeError: not one saying which argument
        with pytest.raises(ValueError, match=r"seed_index: .*good.pt holds 1 seed\(s\) \(indices 0 to 0\), got "):
            DuelingBandit.from_checkpoint(str(good), seed_index=index)
    assert good.stat().st_size == size and DuelingBandit.from_checkpoint(str(good)).num_observed == 0
    assert sorted(os.listdir(tmp_path)) == ["bad.pt", "good.pt"]  # no temporary file left behind
    # a save of another version of the package (its learner kept another buffer): torch's traceback before
    older = torch.load(str(good), weights_only=False)
    older["state_dict"].pop("first_bad_context")
    torch.save(older, str(tmp_path / "older.pt"))
    with pytest.raises(
        ValueError,
        match=r"older.pt's state is not the one this code's learner keeps \(it lacks "
        r"\['first_bad_context'\]\): it was saved by another version of nvldb_pl",
    ):
        DuelingBandit.from_checkpoint(str(tmp_path / "older.pt"))


def test_from_config_reads_every_shipped_config_and_a_run_s_own(tmp_path):
    """Every section a fit config or a run's config.yaml has is accepted (what live use does not need is left out)."""
    import glob

    import yaml

    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "**", "*.yaml"), recursive=True)):
        if (
            yaml.safe_load(open(path))["model"].get("distinct_arms") is False
        ):  # configs/literal/: a rule that self-duels
            with pytest.raises(
                ValueError, match="model.distinct_arms: false lets the rule pick an item against itself"
            ):
                DuelingBandit.from_config(path)
            continue
        assert DuelingBandit.from_config(path).learner.hparams.dim == yaml.safe_load(open(path))["data"]["dim"], path
    run = {
        "seed_everything": 0,
        "trainer": {},
        "model": {"class_path": "nvldb_pl.learners.nvldb.NVLDB", "init_args": {"network": {"width": 8}}},
        "data": {
            "task": "cos",
            "dim": 3,
            "arms": 5,
            "rounds": 50,
            "num_seeds": 2,
            "first_seed_id": 0,
            "seed": None,
            "link": "logistic",
            "preference": None,
            "data_dir": None,
            "data_file": None,
            "sampling": "per_seed",
        },
        "loop": {},
        "checkpoint": {},
        "ckpt_path": None,
        "optimizer": None,
        "lr_scheduler": None,
        "weights_only": None,
    }
    assert DuelingBandit.from_config(run).learner.hparams.network["width"] == 8


def test_from_config_reads_numbers_as_the_fit_cli_does(tmp_path):
    """`lr: 1e-3` is a string to YAML 1.1 (PyYAML's safe_load) and was refused as one; the fit CLI reads it as 0.001."""
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  lr: 1e-2\n  beta: 5e-1\ndata:\n  dim: 3\n")
    hp = DuelingBandit.from_config(str(path)).learner.hparams
    assert hp.lr == 0.01 and hp.beta == 0.5 and hp.dim == 3


def test_from_config_reads_the_shipped_live_config():
    b = DuelingBandit.from_config("configs/live.yaml")
    hp = b.learner.hparams
    assert (hp.dim, hp.strategy, hp.distinct_arms) == (5, "ucb_asym", True)
    i, j = b.select(_unit_rows(np.random.default_rng(0), 4, 5))
    assert i != j
