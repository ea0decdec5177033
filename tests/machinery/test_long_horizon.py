"""Options for long horizons: a bounded training sample per Adam step (uniform or recency-weighted),
retraining every H rounds and the incremental Gram matrix; the default stays exact."""

import os

import numpy as np
import pytest
import torch

from nvldb_pl.learners.base import Execution
from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.loop.run import run_experiment


def _filled(t, seeds=(0, 1, 2), **kw):
    m = NVLDB(dim=4, arms=3, rounds=t, num_seeds=len(seeds), **{"network": {"width": 8}, **kw})
    m.init_parameters(7, list(seeds))
    for s_i, s in enumerate(seeds):  # each seed's history depends on its id only
        g = torch.Generator().manual_seed(100 + s)
        m.hist_xt[s_i] = torch.randn(4, 2 * t, generator=g)
        m.hist_o[s_i] = (torch.rand(t, generator=g) < 0.5).float()
    m._t = t
    m.rounds_done.fill_(t)
    return m


def test_sampled_step_is_the_scaled_loss_on_the_drawn_rows():
    """One SGD step with B = 16 of t = 100 rows equals, per seed, the gradient of
    (t / B) sum_{i in sample} -log g(s_i Delta f_i) / zeta_i^2 + lam/2 ||theta - theta_0||^2 (eq.
    total_loss on the drawn rows, with multiplicity), computed by autograd one seed at a time."""
    t, B = 100, 16
    for backward in ("manual", "autograd"):
        m = _filled(
            t,
            grad_steps=1,
            sampler={"size": B},
            compute={"backward": backward},
            network={"width": 8, "parametrization": "ntk"},
        )  # eq. (nn), as below
        rows = m._sample_rows(t, 1)[:, 0]  # what the step will draw: the stream of (seed, round t)
        assert rows.shape == (3, B) and int(rows.min()) >= 0 and int(rows.max()) < t
        start = [w.detach().clone() for w in m.net.weights] + [m.net.theta.detach().clone()]
        m.execute_with(Execution(optimizer=torch.optim.SGD(m.net.parameters(), lr=0.05)))
        m._adam_steps(t)
        after = list(m.net.weights) + [m.net.theta]
        for s in range(3):
            ws = [w[s].detach().clone().requires_grad_(True) for w in start[:-1]]
            theta = start[-1][s].detach().clone().requires_grad_(True)
            loss = 0.5 * 1.0 * (theta - m.net.theta0[s]).pow(2).sum()
            for r in rows[s].tolist():
                fs = []
                for col in (2 * r, 2 * r + 1):
                    h = m.hist_xt[s, :, col]
                    for w in ws:
                        h = torch.relu(w @ h)
                    fs.append(theta @ (np.sqrt(8) * h))
                df = fs[0] - fs[1]
                p = torch.sigmoid(df.detach())
                zeta = torch.clamp(torch.sqrt(p * (1 - p)), min=m.hparams.epsilon)  # eq. (wi)
                sign = 1.0 if m.hist_o[s, r] == 1 else -1.0
                loss = loss - (t / B) * torch.nn.functional.logsigmoid(sign * df) / zeta**2
            loss.backward()
            for p_after, p0, g in zip(after, [w[s] for w in start], ws + [theta]):
                torch.testing.assert_close(p_after[s].detach(), p0 - 0.05 * g.grad, rtol=1e-4, atol=1e-5)


def test_draws_are_per_seed_streams_and_recency_favours_new_rows():
    t = 5000
    uni = _filled(t, seeds=(0, 1, 2), sampler={"size": 256})._sample_rows(t, 20)
    alone = _filled(t, seeds=(1,), sampler={"size": 256})._sample_rows(t, 20)
    assert torch.equal(uni[1], alone[0])  # seed 1 draws the same rows beside other seeds or alone
    assert not torch.equal(uni[0], uni[1])
    rec = _filled(t, seeds=(0, 1, 2), sampler={"size": 256, "weighting": "recency"})._sample_rows(t, 20)
    # uniform rows: mean t/2; linear ramp: mean 2t/3 (std of a mean of 15360 draws: about 0.2% of t)
    assert abs(float(uni.double().mean()) / t - 0.5) < 0.01
    assert abs(float(rec.double().mean()) / t - 2 / 3) < 0.01
    assert int(rec.max()) < t and int(rec.min()) >= 0
    assert _filled(t, sampler={"size": t})._sample_rows(t, 1) is None  # t <= B: the whole history


def test_a_sample_as_large_as_the_horizon_is_refused_as_it_would_change_nothing():
    """The history of a run of T rounds never holds more than T answers, so sample_size >= T is the exact loop bit for
    bit (_sample_rows gives None while t <= B, above): a run asking for it is refused, not run under its name."""
    data = {"task": "cos", "rounds": 30, "num_seeds": 2, "seed": 1}
    for size in (30, 64):
        with pytest.raises(ValueError, match=f"model.sampler.size: {size} >= data.rounds=30: the history never holds"):
            run_experiment(data, {"network": {"width": 8}, "sampler": {"size": size}})
    run_experiment(data, {"network": {"width": 8}, "sampler": {"size": 29}})


def test_bounded_mode_runs_seed_independent():
    """B = 8 < T, H = 3, incremental Gram: each seed makes the same selections and regret alone or
    beside others (parameters up to float rounding of batched matmuls, as for the exact loop)."""
    model = {
        "network": {"width": 8},
        "sampler": {"size": 8, "weighting": "recency"},
        "episode": 3,
        "gram_mode": "incremental",
    }
    s2, two = run_experiment({"task": "cos", "rounds": 40, "num_seeds": 2, "seed": 4}, dict(model))
    s1, one = run_experiment({"task": "cos", "rounds": 40, "num_seeds": 1, "seed": 4, "first_seed_id": 1}, dict(model))
    assert torch.equal(two.hist_xt[1], one.hist_xt[0])
    assert torch.equal(two.hist_o[1], one.hist_o[0])
    torch.testing.assert_close(two.net.theta[1], one.net.theta[0], rtol=1e-5, atol=1e-6)
    assert s2["seeds"][1]["cum_avg_regret"] == pytest.approx(s1["seeds"][0]["cum_avg_regret"], abs=1e-12)


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"sampler": {"size": 0}}, "model.sampler.size: must be an integer >= 1"),
        ({"sampler": {"weighting": "newest"}}, "model.sampler.weighting: 'newest' is not one of"),
    ],
)
def test_bad_values_are_named(kw, message):
    with pytest.raises(ValueError, match=message):
        NVLDB(**kw)


def test_refit_uses_the_first_steps_rows_and_solves_that_problem():
    """With the network fixed (no Adam steps), the sampled refit's theta zeroes the gradient of
    (t / B) sum_{first draw} -log g(s_i theta^T dphi_i) / zeta_i^2 + lam/2 ||theta - theta_0||^2."""
    from nvldb_pl.maths import objective

    t, B = 300, 32
    m = _filled(t, grad_steps=0, sampler={"size": B}, refit_iterations=30, variance_aware=False)
    rows = m._sample_rows(t, 1)[:, 0]
    assert torch.equal(rows, m._sample_rows(t, 5)[:, 0])  # the same stream as the Adam steps' first draw
    m.update({"dphi": torch.zeros(3, 4, dtype=torch.float64)})
    x = m.hist_xt.gather(2, torch.stack([2 * rows, 2 * rows + 1], 2).flatten(1).unsqueeze(1).expand(-1, 4, -1))
    phi = m.net.features_t(x).detach().double().transpose(1, 2).reshape(3, B, 2, 4)
    dphi = phi[:, :, 0] - phi[:, :, 1]
    o = m.hist_o.gather(1, rows).double()

    def grad_at(theta):
        return (
            objective.theta_gradient(
                "logistic", theta.double(), dphi, o, torch.full_like(o, t / B), m.net.theta0.double(), 1.0
            )[0]
            .abs()
            .max(dim=1)
            .values
        )

    before = grad_at(m.net.theta0)  # theta was theta_0 before the refit
    after = grad_at(m.net.theta.detach())
    assert bool((after < 1e-6 * before).all())  # theta is stored in float32: zero up to its rounding


@pytest.mark.parametrize("backward", ["manual", "autograd"])
@pytest.mark.parametrize("oracle", [False, True])
def test_the_whole_history_passes_give_the_same_gradient(backward, oracle):
    """chunked (blocks of 256 rounds), full (one block of the t played rounds), masked (all T
    preallocated rounds, the unplayed ones weighted 0) and graphed (masked up to t rounded up to 256
    rounds: 768 here, eager off CUDA) are one loss: the same gradient up to rounding."""
    t, T = 600, 1000  # t > 256: several chunks; T > 768 > t: masked rows in both masked passes
    grads = {}
    for mode in ("chunked", "full", "masked", "graphed"):
        m = NVLDB(
            dim=4,
            arms=3,
            rounds=T,
            num_seeds=3,
            network={"width": 8},
            grad_steps=1,
            compute={"backward": backward, "history_pass": mode},
            oracle_variance=oracle,
        )
        m.init_parameters(7, [0, 1, 2])
        g = torch.Generator().manual_seed(5)
        m.hist_xt[:, :, : 2 * t] = torch.randn(3, 4, 2 * t, generator=g)
        m.hist_o[:, :t] = (torch.rand(3, t, generator=g) < 0.5).float()
        m.hist_du[:, :t] = torch.randn(3, t, generator=g, dtype=torch.float64)
        m._t = t
        m.rounds_done.fill_(t)
        m.execute_with(
            Execution(optimizer=torch.optim.SGD(m.net.parameters(), lr=0.0))
        )  # keep the parameters; read .grad
        loss = m._adam_steps(t)
        grads[mode] = (loss.detach().clone(), [p.grad.detach().clone() for p in m.net.param_list()])
    for mode in ("full", "masked", "graphed"):
        torch.testing.assert_close(grads[mode][0], grads["chunked"][0], rtol=1e-5, atol=1e-5)
        for a, b in zip(grads[mode][1], grads["chunked"][1]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_an_unknown_history_pass_is_named():
    with pytest.raises(ValueError, match="model.compute.history_pass: 'lazy' is not one of"):
        NVLDB(rounds=4, num_seeds=1, compute={"history_pass": "lazy"})


def test_the_graphed_update_is_the_chunked_update_up_to_rounding():
    """history_pass=graphed trains, refits theta and rebuilds V over t rounded up to 256 rows with the
    rows after t weighted 0: the chunked pass's theta, W and V up to float rounding."""
    t, T = 300, 600  # bucket 512: rows 301-512 masked
    src = _filled(t)
    out = {}
    for mode in ("chunked", "graphed"):
        m = NVLDB(
            dim=4, arms=3, rounds=T, num_seeds=3, network={"width": 8}, compute={"history_pass": mode}, grad_steps=3
        )
        m.init_parameters(7, [0, 1, 2])
        m.hist_xt[:, :, : 2 * t] = src.hist_xt
        m.hist_o[:, :t] = src.hist_o
        m.hist_xt[:, :, 2 * t :: 2] = 3.0  # unplayed rows hold duels the mask must keep out
        m.hist_xt[:, :, 2 * t + 1 :: 2] = -1.0
        m.hist_o[:, t:] = 1.0
        m._t = t
        m.rounds_done.fill_(t)
        m.attach_optimizer()
        m.update({"dphi": torch.zeros(3, 4, dtype=torch.float64)})
        out[mode] = m
    a, b = out["chunked"], out["graphed"]
    for p, q in zip(a.net.param_list(), b.net.param_list()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6)
    # V is float64 built from phi in float32 at those W: their float32 rounding, not a tighter one (on an AVX-512 CPU
    # V's entries differed by 3.7e-6 relative)
    torch.testing.assert_close(b.V, a.V, rtol=1e-4, atol=1e-6)
    assert not torch.equal(a.V, a.hparams.lam * torch.eye(4, dtype=torch.float64).expand(3, 4, 4))


def test_the_graphed_pass_runs_off_cuda_seed_independent_and_refuses_sampling():
    """Off CUDA history_pass=graphed is the bucketed masked pass, eagerly: a whole run, each seed's
    result independent of the others; with a sample of rows (shapes that change) it is refused."""
    data = {"task": "cos", "rounds": 12, "num_seeds": 3}
    model = {"network": {"width": 8}, "grad_steps": 2, "compute": {"history_pass": "graphed"}}
    together, m3 = run_experiment(data, model)
    alone, m1 = run_experiment({**data, "num_seeds": 1, "first_seed_id": 2}, model)
    assert torch.equal(m3.history()[2], m1.history()[0])
    assert together["seeds"][2]["cum_avg_regret"] == alone["seeds"][0]["cum_avg_regret"]
    assert m3.execution.steps.captures == 0  # nothing captured on a CPU
    with pytest.raises(ValueError, match="model.compute.history_pass: graphed walks the whole history"):
        NVLDB(rounds=4, num_seeds=1, compute={"history_pass": "graphed"}, sampler={"size": 2})


def test_a_graph_replay_of_the_update_reads_no_round_number_baked_at_its_capture(monkeypatch):
    """A CUDA graph replays its captured kernels on the tensors' current values, with every Python
    value as at the capture (the round number included). Here the graph is simulated on a CPU: a
    replay re-runs the update as captured at the bucket's first round. If the graphed update read the
    round from Python anywhere (not from the rounds_done buffer), the replays would drift from the
    eager run; they must give it bit for bit, capturing once per bucket."""
    from nvldb_pl.learners import history
    from nvldb_pl.machinery import graphs

    monkeypatch.setattr(history, "BUCKET_ROUNDS", 8)  # 30 rounds: buckets 8, 16, 24, 30
    data = {"task": "cos", "rounds": 30, "num_seeds": 2}
    model = {"network": {"width": 8}, "grad_steps": 2, "compute": {"history_pass": "graphed"}}
    _, eager = run_experiment(data, model)
    monkeypatch.setattr(history, "graphs_available", lambda device: True)
    monkeypatch.setattr(graphs.CapturedSteps, "_warm_up", lambda self, fn: fn())
    monkeypatch.setattr(graphs.CapturedSteps, "_capture", lambda self, fn: setattr(self, "graph", fn))
    monkeypatch.setattr(graphs.CapturedSteps, "_replay", lambda self: self.graph())
    _, replayed = run_experiment(data, model)
    assert replayed.execution.steps.captures == 4 and eager.execution.steps.captures == 0
    assert torch.equal(replayed.hist_xt, eager.hist_xt)  # the same pairs every round
    assert torch.equal(replayed.V, eager.V) and torch.equal(replayed.net.theta, eager.net.theta)


def test_the_default_history_pass_is_chunked_on_a_cpu_and_graphed_where_graphs_exist(monkeypatch):
    """history_pass=auto (the default): on a CPU the chunked pass, bit for bit; where CUDA graphs exist
    (simulated on the CPU as above) the graphed pass, bit for bit, with its captures; with a sample of
    rows (shapes that change) chunked there too."""
    from nvldb_pl.learners import history
    from nvldb_pl.machinery import graphs
    from nvldb_pl.learners.history import resolve_history_pass

    cuda = torch.device("cuda")
    assert resolve_history_pass("auto", cuda, None) == "graphed"
    assert resolve_history_pass("auto", cuda, 8) == "chunked"
    assert resolve_history_pass("auto", torch.device("cpu"), None) == "chunked"
    assert resolve_history_pass("auto", cuda, None, scaled=True) == "chunked"  # 16-mixed's GradScaler syncs
    assert resolve_history_pass("full", cuda, None) == "full"
    data = {"task": "cos", "rounds": 20, "num_seeds": 2}
    model = {"network": {"width": 8}, "grad_steps": 2}
    assert NVLDB().hparams.compute["history_pass"] == "auto"
    _, default = run_experiment(data, model)
    _, chunked = run_experiment(data, {**model, "compute": {"history_pass": "chunked"}})
    assert torch.equal(default.V, chunked.V) and torch.equal(default.hist_xt, chunked.hist_xt)
    monkeypatch.setattr(history, "BUCKET_ROUNDS", 8)
    monkeypatch.setattr(history, "graphs_available", lambda device: True)
    monkeypatch.setattr(graphs.CapturedSteps, "_warm_up", lambda self, fn: fn())
    monkeypatch.setattr(graphs.CapturedSteps, "_capture", lambda self, fn: setattr(self, "graph", fn))
    monkeypatch.setattr(graphs.CapturedSteps, "_replay", lambda self: self.graph())
    _, default = run_experiment(data, model)
    _, graphed = run_experiment(data, {**model, "compute": {"history_pass": "graphed"}})
    assert default.execution.steps.captures == graphed.execution.steps.captures == 3
    assert torch.equal(default.V, graphed.V) and torch.equal(default.hist_xt, graphed.hist_xt)
    _, sampled = run_experiment(data, {**model, "sampler": {"size": 8}})
    assert sampled.execution.steps.captures == 0


def test_one_seed_runs_graphed_where_graphs_exist_and_plays_what_it_plays_among_three(monkeypatch):
    """Where CUDA graphs exist (simulated), one seed in a process walks its history graphed too (auto), one
    capture per bucket, and ends where the same seed ends among three in one run, bit for bit. (On an H200, in
    two calls, one seed's capture failed; since call 5 it captures: lab/results/gpu/README.md.)"""
    from nvldb_pl.learners import history
    from nvldb_pl.machinery import graphs

    monkeypatch.setattr(history, "BUCKET_ROUNDS", 8)
    monkeypatch.setattr(history, "graphs_available", lambda device: True)
    monkeypatch.setattr(graphs.CapturedSteps, "_warm_up", lambda self, fn: fn())
    monkeypatch.setattr(graphs.CapturedSteps, "_capture", lambda self, fn: setattr(self, "graph", fn))
    monkeypatch.setattr(graphs.CapturedSteps, "_replay", lambda self: self.graph())
    data, model = {"task": "cos", "rounds": 12}, {"network": {"width": 8}, "grad_steps": 2}
    _, three = run_experiment({**data, "num_seeds": 3}, model)
    _, one = run_experiment({**data, "num_seeds": 1, "first_seed_id": 2}, model)
    assert one.execution.steps.captures == three.execution.steps.captures == 2
    assert torch.equal(one.history(), three.history()[2:]) and torch.equal(one.V[0], three.V[2])
    for a, b in zip(one.net.param_list(), three.net.param_list()):
        assert torch.equal(a[0], b[2])


def test_a_graph_that_cannot_be_captured_stops_the_run_in_one_line_naming_the_pass(monkeypatch, tmp_path, capsys):
    """Where CUDA graphs exist (simulated) and the update's capture fails (as one seed's did on an H200 in two
    calls), the CLI stops with one line that names model.compute.history_pass, torch's first line and the pass that
    avoids graphs, not a traceback of torch's CUDA error."""
    import os

    from nvldb_pl.learners import history
    from nvldb_pl.machinery import graphs
    from nvldb_pl.cli import run_cli

    def broken(self, fn):
        raise RuntimeError(
            "CUDA error: operation not permitted when stream is capturing\nCompile with "
            "`TORCH_USE_CUDA_DSA` to enable device-side assertions."
        )

    monkeypatch.setattr(history, "graphs_available", lambda device: True)
    monkeypatch.setattr(graphs.CapturedSteps, "_warm_up", lambda self, fn: fn())
    monkeypatch.setattr(graphs.CapturedSteps, "_capture", broken)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rc = run_cli(
        [
            "fit",
            "--config",
            os.path.join(root, "configs", "cos.yaml"),
            "--data.num_seeds=2",
            "--data.rounds=6",
            "--model.network.width=4",
            "--model.grad_steps=1",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2, err
    assert (
        "error: model.compute.history_pass: the CUDA graph of the update could not be captured (history of 6 rows: CUDA "
        "error: operation not permitted when stream is capturing); start the run again with --model.compute.history_pass "
        "chunked"
    ) in err
    assert "Traceback" not in err and "TORCH_USE_CUDA_DSA" not in err


@pytest.mark.parametrize("mode", ["full", "masked", "graphed", "chunked", "sampled"])
def test_a_history_pass_whose_block_cannot_fit_at_the_horizon_is_refused_before_round_one(
    mode, monkeypatch, tmp_path, capsys
):
    """full, masked and graphed walk all T rounds in one block: at T=200000, width 64, two seeds, about 1.5 GiB
    of activations an Adam step, refused where 1 GiB is free (it would have run out of memory hours in);
    chunked (256-round blocks) and a bounded sample run."""
    from nvldb_pl.machinery import host
    from nvldb_pl.machinery.history import check_learner_memory
    from nvldb_pl.cli import run_cli

    monkeypatch.setattr(host, "available_memory_bytes", lambda: 2**30)
    extra = (
        ["--model.compute.history_pass=chunked", "--model.sampler.size=256"]
        if mode == "sampled"
        else [f"--model.compute.history_pass={mode}"]
    )
    cos = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs", "cos.yaml"
    )
    argv = [
        "fit",
        "--config",
        cos,
        "--data.rounds=200000",
        "--data.num_seeds=2",
        "--model.network.width=64",
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.enable_progress_bar=false",
        *extra,
    ]
    if mode in ("chunked", "sampled"):  # not refused: the learner is built and checked, then no round is run
        with torch.device("cpu"):
            learner = NVLDB(
                rounds=200000,
                num_seeds=2,
                network={"width": 64},
                compute={"history_pass": "chunked"},
                sampler={"size": 256 if mode == "sampled" else None},
            )
        check_learner_memory(learner)
        return
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"error: model.compute.history_pass: {mode} walks 200000 rounds of history in one block, about 1.5 GiB" in err
    ), err
    assert "use compute.history_pass chunked" in err and not list(tmp_path.rglob("summary.json"))


def test_processes_on_one_host_check_the_history_block_against_their_share_of_its_memory(monkeypatch):
    """seed_parallel's processes on a CPU host each checked their own block against all the free memory, so
    two processes whose blocks together could not fit both passed the check. Each now gets its share (on CUDA
    each process has a GPU of its own)."""
    from nvldb_pl.machinery import host
    from nvldb_pl.machinery.history import check_learner_memory

    with torch.device("cpu"):
        learner = NVLDB(rounds=200000, num_seeds=2, network={"width": 64}, compute={"history_pass": "full"})
    need = learner.training_block_bytes(200000)  # about 1.5 GiB
    monkeypatch.setattr(host, "available_memory_bytes", lambda: int(need / 0.9 * 1.5))  # one fits, two do not
    check_learner_memory(learner)  # one process
    check_learner_memory(learner, 1)
    with pytest.raises(
        ValueError,
        match=r"model.compute.history_pass: full walks 200000 rounds .* GiB is free on cpu for "
        r"each of the 2 processes on this host; use compute.history_pass chunked",
    ):
        check_learner_memory(learner, 2)
