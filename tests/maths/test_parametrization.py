"""The standard parametrization (nn.Linear layers: no sqrt(m), biases) wherever the ntk one is checked:
eq. (nn) per seed, the hand-written gradient and NDB's per-point gradients against autograd, S=4
against four S=1 runs, and its validation. The vectorized loop against the naive one, for both
networks: tests/learners/test_naive_equivalence.py."""

import math

import pytest
import torch

from nvldb_pl.learners.settings import merged
from nvldb_pl.maths import links, objective
from nvldb_pl.maths.backward import accumulate_nll_grad, per_point_gradients
from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.maths.network import StackedMLP, init_biases, init_weights
from nvldb_pl.loop.run import run_experiment

S, D, M, L = 3, 4, 6, 3


def _stack(init="torch", activation="relu"):
    gens = [torch.Generator().manual_seed(10 + s) for s in range(S)]
    per = [init_weights(D, M, L, init, g) for g in gens]
    bias = [init_biases(D, M, L, init, g) for g in gens]
    net = StackedMLP(S, D, M, L, "standard", bias=True, activation=activation)
    net.load_seed_init(per, bias)
    return net, per, bias


ACTS = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}


def _f_one_seed(ws, bs, th, x, activation="relu"):
    """f(x) = theta^T act(W^L ... act(W^1 x + b^1) ... + b^L): plain Linear layers, one seed."""
    h = x
    for w, b in zip(ws, bs):
        h = ACTS[activation](w @ h + b)
    return th @ h


@pytest.mark.parametrize("init", ["torch", "normal"])
def test_standard_features_are_linear_layers_with_biases_per_seed(init):
    net, per, bias = _stack(init)
    x = torch.randn(S, 7, D, generator=torch.Generator().manual_seed(1))
    f = net.utility(net.features(x))
    for s in range(S):
        for n in range(7):
            expect = _f_one_seed(
                [w.float() for w in per[s][:-1]], [b.float() for b in bias[s]], per[s][-1].float(), x[s, n]
            )
            assert float(f[s, n].detach()) == pytest.approx(float(expect), rel=1e-4, abs=1e-5)


def test_torch_init_bounds_and_normal_init_scale():
    W1, W2, W3, th = init_weights(D, 400, 3, "torch", torch.Generator().manual_seed(0))
    assert W1.abs().max() <= 1 / math.sqrt(D) and W2.abs().max() <= 1 / math.sqrt(400)
    assert W2.abs().max() > 0.9 / math.sqrt(400)  # fills its interval
    assert th.abs().max() <= 1 / math.sqrt(D)
    b1, b2, b3 = init_biases(D, 400, 3, "torch", torch.Generator().manual_seed(0))
    assert b1.abs().max() <= 1 / math.sqrt(D) and b2.abs().max() <= 1 / math.sqrt(400)
    W1, W2, W3, th = init_weights(D, 400, 3, "normal", torch.Generator().manual_seed(0))
    assert float(W2.std()) == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
@pytest.mark.parametrize("link", ["logistic", "probit"])
def test_manual_gradient_with_biases_equals_autograd_per_seed(link, activation):
    net, _, _ = _stack(activation=activation)
    g = torch.Generator().manual_seed(7)
    n = 29
    x_t = torch.randn(S, D, 2 * n, generator=g)
    o = (torch.rand(S, n, generator=g) < 0.5).float()
    weight = lambda df: objective.zeta(df, link, 0.3, "estimated").pow(-2)  # noqa: E731
    grads = [torch.zeros_like(p) for p in net.param_list()]
    loss = accumulate_nll_grad(
        list(net.weights),
        net.theta,
        x_t[:, :, :30],
        o[:, :15],
        link,
        weight,
        grads,
        biases=list(net.biases),
        scale=net.scale,
        activation=activation,
    )
    loss = loss + accumulate_nll_grad(
        list(net.weights),
        net.theta,
        x_t[:, :, 30:],
        o[:, 15:],
        link,
        weight,
        grads,
        biases=list(net.biases),
        scale=net.scale,
        activation=activation,
    )
    for s in range(S):
        ws = [w[s].detach().clone().requires_grad_(True) for w in net.weights]
        bs = [b[s].detach().clone().requires_grad_(True) for b in net.biases]
        th = net.theta[s].detach().clone().requires_grad_(True)
        f = torch.stack([_f_one_seed(ws, bs, th, x_t[s, :, j], activation) for j in range(2 * n)])
        df = f[0::2] - f[1::2]
        expect = -(links.log_prob(link, (2 * o[s] - 1) * df) * weight(df.detach())).sum()
        expect.backward()
        assert float(loss[s]) == pytest.approx(float(expect.detach()), rel=1e-5)
        for got, ref in zip(grads, ws + [th] + bs):  # parameters() order: W, theta, b
            torch.testing.assert_close(got[s], ref.grad, rtol=1e-4, atol=1e-5 * float(ref.grad.abs().max()))


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_per_point_gradients_with_biases_equal_autograd(activation):
    net, _, _ = _stack(activation=activation)
    x = torch.randn(S, 5, D, generator=torch.Generator().manual_seed(2))
    got = per_point_gradients(list(net.weights), net.theta, x.transpose(1, 2), list(net.biases), net.scale, activation)
    assert got.shape == (S, 5, sum(p[0].numel() for p in net.param_list()))
    for s in range(S):
        for k in range(5):
            ws = [w[s].detach().clone().requires_grad_(True) for w in net.weights]
            bs = [b[s].detach().clone().requires_grad_(True) for b in net.biases]
            th = net.theta[s].detach().clone().requires_grad_(True)
            grads = torch.autograd.grad(_f_one_seed(ws, bs, th, x[s, k], activation), ws + [th] + bs)
            torch.testing.assert_close(got[s, k], torch.cat([q.reshape(-1) for q in grads]), rtol=1e-5, atol=1e-6)


STANDARD = {"network": {"parametrization": "standard", "bias": True}}


@pytest.mark.parametrize(
    "learner,model", [("NVLDB", {"strategy": "ucb_osym", "distinct_arms": True}), ("NDB", {"gram": "diag"})]
)
def test_standard_four_seeds_together_equal_four_single_seed_runs(learner, model):
    model = merged({"network": {"width": 8}, "grad_steps": 3}, STANDARD, model)
    summary, module = run_experiment(
        {"task": "square", "rounds": 20, "num_seeds": 4, "seed": 5}, model, learner=learner
    )
    for s in range(4):
        single, m1 = run_experiment(
            {"task": "square", "rounds": 20, "num_seeds": 1, "first_seed_id": s, "seed": 5}, model, learner=learner
        )
        assert torch.equal(module.history()[s], m1.history()[0]), f"seed {s}"
        for a, b in zip(module.net.param_list(), m1.net.param_list()):  # equal up to float32 rounding (as ntk)
            torch.testing.assert_close(a[s], b[0], rtol=1e-5, atol=1e-6)
        assert summary["seeds"][s]["cum_avg_regret"] == single["seeds"][0]["cum_avg_regret"]


def test_ntk_output_grows_like_sqrt_width_at_init_and_standard_does_not():
    """eq. (nn)'s sqrt(m) factor on a variance-preserving (He) init: |f| grows like sqrt(m); the
    standard form with nn.Linear's init keeps |f| the same whatever the width."""
    x = torch.nn.functional.normalize(torch.randn(1, 400, 5, generator=torch.Generator().manual_seed(0)), dim=-1)
    size = {}
    for par in ("ntk", "standard"):
        for m in (32, 512):
            vals = []
            for seed in range(8):
                mod = NVLDB(dim=5, num_seeds=1, network={"width": m, "parametrization": par, "bias": par == "standard"})
                mod.init_parameters(seed, [0])
                vals.append(float(mod.scores(x).abs().mean()))
            size[par, m] = sum(vals) / len(vals)
    assert 2.5 < size["ntk", 512] / size["ntk", 32] < 6.5  # sqrt(512 / 32) = 4
    assert 0.5 < size["standard", 512] / size["standard", 32] < 2.0


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"network": {"parametrization": "wide"}}, "model.network.parametrization"),
        ({"network": {"parametrization": "ntk", "init": "torch"}}, "model.network.init"),
        ({"network": {"parametrization": "standard", "init": "paper"}}, "model.network.init"),
        ({"network": {"parametrization": "ntk", "bias": True}}, "model.network.bias"),
    ],
)
def test_bad_parametrization_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        NVLDB(dim=5, num_seeds=1, **kwargs)
