"""The GPU paths (skipped where torch sees no CUDA GPU; run on the device machine with
``python -m pytest -q tests/machinery/test_cuda.py``): a float32 GPU run plays the CPU run's pairs, its
gradient and its update without training are the CPU's up to float rounding,
bf16-mixed keeps the Gram matrix, refit and selection in float32/float64, 16-mixed warns, a round
never makes the host wait for the GPU, the CUDA-graphed Adam steps equal the eager ones, a run
goes on on the other device (CPU to GPU, GPU to CPU), and ``trainer.deterministic`` runs."""

import math

import pytest
import torch

from nvldb_pl.learners.base import Execution
from nvldb_pl.loop.run import run_experiment

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DATA = {"task": "cos", "rounds": 25, "num_seeds": 3, "seed": 2}
MODEL = {"network": {"width": 16}, "grad_steps": 5}
SAME_PASS = {
    "compute": {"history_pass": "chunked"}
}  # CPU against GPU: one pass on both (auto picks graphed on CUDA only)


@pytest.mark.parametrize("strategy", ["ucb_asym", "ts_csym"])
def test_float32_gpu_run_plays_the_cpu_runs_pairs(strategy):
    # matmuls in float32 (TF32 off, torch's default): the same pairs every round, the same regret. V is
    # not compared here: Adam's step has the same size whatever the gradient's, so last-bit differences
    # of tiny gradient entries become whole steps (measured at b996d6f: V 2-3% apart after 25 rounds);
    # the two tests below compare what that does not touch.
    assert not torch.backends.cuda.matmul.allow_tf32
    model = {**MODEL, **SAME_PASS, "strategy": strategy}
    s_cpu, m_cpu = run_experiment(DATA, model, accelerator="cpu")
    s_gpu, m_gpu = run_experiment(DATA, model, accelerator="gpu")
    assert s_cpu["device"] == "cpu" and s_gpu["device"].startswith("cuda: ")
    for a, b in zip(s_cpu["seeds"], s_gpu["seeds"]):
        assert a["seed"] == b["seed"]
        assert b["cum_avg_regret"] == pytest.approx(a["cum_avg_regret"], rel=1e-5, abs=1e-6)
    assert torch.equal(m_gpu.history().cpu(), m_cpu.history())  # the same arm pairs were played every round


def test_float32_gpu_run_without_adam_steps_is_the_cpu_run():
    """Features, the theta refit, V and selection without the network's training: only kernel
    rounding separates the devices, so V and theta agree closely (a wrong GPU kernel would not)."""
    model = {**MODEL, **SAME_PASS, "grad_steps": 0}
    _, m_cpu = run_experiment(DATA, model, accelerator="cpu")
    _, m_gpu = run_experiment(DATA, model, accelerator="gpu")
    assert torch.equal(m_gpu.history().cpu(), m_cpu.history())
    torch.testing.assert_close(m_gpu.V.cpu(), m_cpu.V, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m_gpu.net.theta.cpu(), m_cpu.net.theta, rtol=1e-4, atol=1e-6)


def test_the_default_history_pass_on_cuda_is_the_graphed_one():
    """history_pass=auto (the default) captures the update in CUDA graphs on a GPU (measured on an
    H200: 7x the chunked pass's rounds/s), one per 256-round bucket."""
    _, m = run_experiment({**DATA, "rounds": 260}, MODEL, accelerator="gpu")
    assert m.hparams.compute["history_pass"] == "auto" and m.execution.steps.captures == 2


NETWORKS = {
    "relu": {},
    "gelu": {"network": {"activation": "gelu"}, "w_reg": 0.1},
}  # the built-in MLP, ReLU and GELU with a prior


@pytest.mark.parametrize("network", list(NETWORKS))
@pytest.mark.parametrize("history_pass", ["chunked", "full", "graphed"])
def test_float32_gpu_gradient_is_the_cpu_gradient(history_pass, network):
    """One Adam step's gradient of eq. (total_loss) on the same parameters and history: the GPU's
    equals the CPU's to float32 rounding, relative to each tensor's norm."""
    from nvldb_pl.learners.nvldb import NVLDB

    t, T = 300, 400
    grads = []
    for device in ("cpu", "cuda"):
        m = NVLDB(
            dim=4,
            arms=3,
            rounds=T,
            num_seeds=3,
            network={"width": 16},
            grad_steps=1,
            compute={"history_pass": history_pass},
            **NETWORKS[network],
        )
        m.init_parameters(7, [0, 1, 2])
        g = torch.Generator().manual_seed(5)
        m.hist_xt[:, :, : 2 * t] = torch.randn(3, 4, 2 * t, generator=g)
        m.hist_o[:, :t] = (torch.rand(3, t, generator=g) < 0.5).float()
        m._t = t
        m.rounds_done.fill_(t)
        m = m.to(device)
        m.execute_with(
            Execution(optimizer=torch.optim.SGD(m.net.parameters(), lr=0.0))
        )  # keep the parameters; read .grad
        m._adam_steps(t)
        grads.append([p.grad.detach().cpu().double() for p in m.net.param_list()])
    for a, b in zip(*grads):
        assert float((a - b).norm() / a.norm()) < 1e-5


def test_bf16_mixed_on_gpu_keeps_gram_refit_and_selection_in_full_precision():
    data = {**DATA, "task": "square", "rounds": 12, "num_seeds": 2}
    s32, m32 = run_experiment(data, MODEL, precision="32-true", accelerator="gpu")
    s16, m16 = run_experiment(data, MODEL, precision="bf16-mixed", accelerator="gpu")
    assert m16.V.dtype == torch.float64 and m16.net.theta.dtype == torch.float32
    assert m16.net.weights[0].dtype == torch.float32  # master weights
    assert torch.isfinite(m16.V).all() and torch.isfinite(m16.net.theta).all()
    assert torch.equal(m16.history()[:, 0], m32.history()[:, 0])  # round 1: before any training
    w16, w32 = m16.net.weights[1].cpu(), m32.net.weights[1].cpu()
    assert not torch.equal(w16, w32)  # the network did run in bfloat16
    assert float((w16 - w32).norm() / w32.norm()) < 0.2


def test_16_mixed_on_gpu_warns_that_one_scaler_couples_the_seeds():
    """... and runs the default pass un-graphed (the scaler's inf check reads the host); graphed is refused."""
    with pytest.warns(UserWarning, match="one GradScaler serves all stacked seeds"):
        s, m = run_experiment({**DATA, "rounds": 8}, MODEL, precision="16-mixed", accelerator="gpu", quiet=False)
    assert s["rounds"] == 8 and all(math.isfinite(x["cum_avg_regret"]) for x in s["seeds"])  # it ran to the end
    assert m.execution.steps.captures == 0
    with pytest.raises(ValueError, match="model.compute.history_pass: graphed cannot run under 16-mixed"):
        run_experiment(
            {**DATA, "rounds": 8},
            {**MODEL, "compute": {"history_pass": "graphed"}},
            precision="16-mixed",
            accelerator="gpu",
        )


def test_one_seed_on_gpu_runs_graphed_and_plays_what_it_plays_among_four():
    """One seed in a process captures the update on CUDA (auto resolves to graphed; one graph per 256-round
    bucket) and plays the pairs it plays among four seeds in one run, with V and theta to float32 rounding."""
    data = {**DATA, "rounds": 260}
    s4, m4 = run_experiment({**data, "num_seeds": 4, "first_seed_id": 0}, MODEL, accelerator="gpu")
    for i in (0, 3):
        s1, m1 = run_experiment({**data, "num_seeds": 1, "first_seed_id": i}, MODEL, accelerator="gpu")
        assert m1.execution.steps.captures == 2
        assert torch.equal(m1.history()[0], m4.history()[i])
        v = float((m1.V[0] - m4.V[i]).abs().max() / m4.V[i].abs().max())
        th = float((m1.net.theta[0] - m4.net.theta[i]).abs().max() / m4.net.theta[i].abs().max())
        print(f"seed {i}: S=1 graphed against S=4 graphed: V rel {v:.2e}, theta rel {th:.2e}")
        assert v < 1e-4 and th < 1e-3


@pytest.mark.parametrize(
    "model,learner",
    [
        ({**MODEL, "sampler": {"size": 8}, "compute": {"history_pass": "masked"}}, "NVLDB"),
        ({**MODEL, "compute": {"history_pass": "graphed"}}, "NVLDB"),
        ({}, "VACDB"),
    ],
)
def test_a_cuda_round_never_waits_for_the_device(monkeypatch, model, learner):
    """torch's sync debug mode, on from the loop's first batch start to the end of training (the
    every-N-rounds flush and a CUDA graph's capture, once per 256 rounds, excepted), warns at every
    operation that makes the host wait for the GPU, the package's or Lightning's between the hooks
    (its logger connector reads the progress-bar values after every batch); none may."""
    import warnings

    from nvldb_pl.loop.callbacks import DuelingLoop
    from nvldb_pl.machinery.graphs import CapturedSteps

    replay_or_capture = CapturedSteps.__call__

    def quiet_capture(self, key, fn):
        if key == self.key:
            return replay_or_capture(self, key, fn)
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("default")  # torch.cuda.graph synchronizes before a capture
        try:
            return replay_or_capture(self, key, fn)
        finally:
            torch.cuda.set_sync_debug_mode(mode)

    monkeypatch.setattr(CapturedSteps, "__call__", quiet_capture)

    def spanning(hook, mode_in, mode_out=None):
        """The hook under sync debug mode ``mode_in``; after it ``mode_out`` (None: the mode before:
        a flush at the end of the run, after the last batch, must not leave "warn" on)."""

        def wrapper(self, *args, **kwargs):
            before = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode(mode_in)
            try:
                return hook(self, *args, **kwargs)
            finally:
                torch.cuda.set_sync_debug_mode(before if mode_out is None else mode_out)

        return wrapper

    monkeypatch.setattr(DuelingLoop, "on_train_batch_start", spanning(DuelingLoop.on_train_batch_start, "warn", "warn"))
    monkeypatch.setattr(DuelingLoop, "on_train_batch_end", spanning(DuelingLoop.on_train_batch_end, "warn", "warn"))
    monkeypatch.setattr(DuelingLoop, "on_train_end", spanning(DuelingLoop.on_train_end, "default", "default"))
    monkeypatch.setattr(DuelingLoop, "flush", spanning(DuelingLoop.flush, "default"))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s, _ = run_experiment(
                {**DATA, "rounds": 16}, model, learner=learner, accelerator="gpu", log_every_n_rounds=10
            )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    waits = sorted(
        {f"{w.filename}:{w.lineno} {w.message}" for w in caught if "called a synchronizing" in str(w.message)}
    )  # not torch's "debug mode is a prototype"
    assert s["rounds"] == 16
    if waits:
        pytest.fail("host waits inside a round:\n" + "\n".join(waits))


@pytest.mark.parametrize("network", list(NETWORKS))
def test_the_graphed_update_replays_what_the_eager_update_computes(network):
    """history_pass=graphed: the n Adam steps and the theta refit, captured once per 256-round bucket
    and replayed, give the parameters and V that the same update gives eagerly (same kernels, same
    capturable Adam), across a bucket change."""
    from nvldb_pl.learners.nvldb import NVLDB

    t0, T = 250, 600
    models = []
    for graphed in (True, False):
        m = NVLDB(
            dim=4,
            arms=3,
            rounds=T,
            num_seeds=3,
            network={"width": 16},
            grad_steps=3,
            compute={"history_pass": "graphed"},
            **NETWORKS[network],
        ).cuda()
        m.init_parameters(7, [0, 1, 2])
        g = torch.Generator().manual_seed(5)
        m.hist_xt.copy_(torch.randn(3, 4, 2 * T, generator=g))
        m.hist_o.copy_((torch.rand(3, T, generator=g) < 0.5).float())
        m.execute_with(
            Execution(optimizer=torch.optim.Adam(m.net.parameters(), lr=1e-3, fused=True, capturable=True))
        )  # as a graphed run makes it
        if not graphed:
            m._graphed = lambda: False
        models.append(m)
    for t in range(t0, t0 + 12):  # rounds 250-256 in the first bucket, 257-261 in the second
        for m in models:
            m._t = t
            m.rounds_done.fill_(t)
            m.update({"dphi": torch.zeros(3, 4, dtype=torch.float64, device="cuda")})
    graphed, eager = models
    assert graphed.execution.steps.captures == 2 and eager.execution.steps.captures == 0
    for a, b in zip(graphed.net.param_list(), eager.net.param_list()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(graphed.V, eager.V, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("first,then", [("cpu", "gpu"), ("gpu", "cpu")])
def test_a_run_goes_on_on_the_other_device_and_says_so(first, then, tmp_path, caplog):
    """A CPU run's checkpoint goes on on the GPU (graphed: Adam made capturable there) and a GPU run's on
    the CPU (Adam as a CPU run makes it); each resume says the devices differ, and the checkpoint it
    writes records the device it ran on."""
    import os

    from nvldb_pl.cli import run_cli
    from tests.helpers.runs import fit_args

    args = fit_args(
        tmp_path,
        "--data.num_seeds=3",
        "--model.network.width=16",
        "--model.grad_steps=5",
        "--checkpoint.every_n_rounds=10",
    )
    assert run_cli([*args, "--data.rounds=20", f"--trainer.accelerator={first}"]) == 0
    assert run_cli([*args, "--data.rounds=30", f"--trainer.accelerator={then}", "--ckpt_path=last"]) == 0
    device = {"cpu": "cpu", "gpu": "cuda"}
    assert (
        f"the checkpoint's rounds were computed on {device[first]}, and this run goes on on {device[then]}"
        in caplog.text
    )
    ckpt = torch.load(
        os.path.join(str(tmp_path), "lightning_logs", "version_0", "checkpoints", "last.ckpt"),
        map_location="cpu",
        weights_only=False,
    )
    assert int(ckpt["state_dict"]["rounds_done"]) == 30 and ckpt["accelerator"] == device[then]
    group = ckpt["optimizer_states"][0]["param_groups"][0]
    assert group["capturable"] == group["fused"] == (then == "gpu") and group["foreach"] == (then == "cpu")


def test_trainer_deterministic_on_gpu_runs_and_repeats_itself(tmp_path):
    """``--trainer.deterministic true`` (torch's deterministic algorithms, which raise on an operation
    that has none) runs the default GPU path, and two such runs give the same per-seed results."""
    import json
    import os

    from nvldb_pl.cli import run_cli

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    seeds = []
    try:
        for name in ("a", "b"):
            assert (
                run_cli(
                    [
                        "fit",
                        "--config",
                        os.path.join(root, "configs", "cos.yaml"),
                        "--data.rounds=30",
                        "--data.num_seeds=3",
                        "--model.network.width=16",
                        "--trainer.accelerator=gpu",
                        "--trainer.deterministic=true",
                        "--trainer.enable_progress_bar=false",
                        f"--trainer.default_root_dir={tmp_path / name}",
                    ]
                )
                == 0
            )
            with open(tmp_path / name / "lightning_logs" / "version_0" / "summary.json") as fh:
                seeds.append(json.load(fh)["seeds"])
    finally:  # Lightning leaves torch's deterministic mode on in this process
        torch.use_deterministic_algorithms(False)
    assert [s["cum_avg_regret"] for s in seeds[0]] == [s["cum_avg_regret"] for s in seeds[1]]
