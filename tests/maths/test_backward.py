"""The hand-written gradient (nvldb_pl.maths.backward) against autograd on per-seed losses."""

import math

import pytest
import torch

from nvldb_pl.learners.base import Execution
from nvldb_pl.maths import links, objective
from nvldb_pl.maths.backward import accumulate_nll_grad
from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.maths.network import init_weights


def _params(S=3, d=4, m=6, L=3, seed=0):
    per_seed = [init_weights(d, m, L, "kaiming", torch.Generator().manual_seed(seed + s)) for s in range(S)]
    weights = [torch.stack([p[layer] for p in per_seed]).float() for layer in range(L)]
    theta = torch.stack([p[-1] for p in per_seed]).float()
    return weights, theta


def _per_seed_autograd(weights, theta, x_t, o, link, eps, mode):
    """For each seed alone: eq. (nn) as plain matmuls, eq. (total_loss)'s sum, autograd."""
    out = []
    for s in range(theta.shape[0]):
        ws = [w[s].clone().requires_grad_(True) for w in weights]
        th = theta[s].clone().requires_grad_(True)
        h = x_t[s].T  # [2n, d]
        for w in ws:
            h = torch.relu(h @ w.T)
        f = math.sqrt(ws[0].shape[0]) * h @ th
        df = f[0::2] - f[1::2]
        zeta = objective.zeta(df, link, eps, mode)
        loss = -(links.log_prob(link, (2 * o[s] - 1) * df) / zeta.detach() ** 2).sum()
        loss.backward()
        out.append((loss.item(), [w.grad for w in ws] + [th.grad]))
    return out


@pytest.mark.parametrize("link", ["logistic", "probit"])
@pytest.mark.parametrize("mode", ["estimated", "none"])
def test_manual_gradient_equals_autograd_per_seed(link, mode):
    S, n, eps = 3, 37, 0.3
    weights, theta = _params(S)
    g = torch.Generator().manual_seed(7)
    x_t = torch.randn(S, 4, 2 * n, generator=g)
    o = (torch.rand(S, n, generator=g) < 0.5).float()
    grads = [torch.zeros_like(w) for w in weights] + [torch.zeros_like(theta)]
    # two blocks of rows, accumulated, as the module does
    loss = accumulate_nll_grad(
        weights, theta, x_t[:, :, :40], o[:, :20], link, lambda df: objective.zeta(df, link, eps, mode).pow(-2), grads
    )
    loss = loss + accumulate_nll_grad(
        weights, theta, x_t[:, :, 40:], o[:, 20:], link, lambda df: objective.zeta(df, link, eps, mode).pow(-2), grads
    )
    for s, (expect_loss, expect_grads) in enumerate(_per_seed_autograd(weights, theta, x_t, o, link, eps, mode)):
        assert loss[s].item() == pytest.approx(expect_loss, rel=1e-5)
        for got, expect in zip(grads, expect_grads):
            torch.testing.assert_close(got[s], expect, rtol=1e-4, atol=1e-5 * float(expect.abs().max()))


def test_bfloat16_matmuls_give_a_close_gradient_in_float32_accumulators():
    weights, theta = _params(S=2, m=16)
    x_t = torch.randn(2, 4, 200, generator=torch.Generator().manual_seed(1))
    o = (torch.rand(2, 100, generator=torch.Generator().manual_seed(2)) < 0.5).float()
    ones = lambda df: torch.ones_like(df)  # noqa: E731
    g32 = [torch.zeros_like(w) for w in weights] + [torch.zeros_like(theta)]
    g16 = [torch.zeros_like(w) for w in weights] + [torch.zeros_like(theta)]
    accumulate_nll_grad(weights, theta, x_t, o, "logistic", ones, g32)
    accumulate_nll_grad(weights, theta, x_t, o, "logistic", ones, g16, compute_dtype=torch.bfloat16)
    for a, b in zip(g32, g16):
        assert b.dtype == torch.float32
        assert float((a - b).norm() / a.norm()) < 0.1  # bfloat16 keeps 8 bits of mantissa
        assert not torch.equal(a, b)  # the matmuls really ran in bfloat16


@pytest.mark.parametrize(
    "network",
    [
        {"parametrization": "ntk", "bias": False},
        {"parametrization": "standard", "bias": True},
    ],
)
@pytest.mark.parametrize("w_reg", [0.0, 0.5])
@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_module_adam_step_is_the_same_with_either_backward(activation, w_reg, network):
    after = {}
    for backward in ("manual", "autograd"):
        torch.manual_seed(0)
        m = NVLDB(
            dim=5,
            arms=3,
            rounds=300,
            num_seeds=2,
            network={"width": 8, "activation": activation, **network},
            grad_steps=1,
            w_reg=w_reg,
            compute={"backward": backward},
        )
        m.init_parameters(0, [0, 1])
        with torch.no_grad():
            m.net.weights[0].add_(0.1)  # away from W_0, so the w_reg term has a gradient
            m.net.theta.add_(0.2)
        m.hist_xt.normal_()
        m.hist_o.bernoulli_(torch.full_like(m.hist_o, 0.5))
        opt = torch.optim.SGD(m.net.parameters(), lr=0.1)  # plain SGD: parameters move by the gradient
        m.execute_with(Execution(optimizer=opt))  # outside a Trainer (as in live use); backprop is loss.backward()
        loss = m._adam_steps(300)  # 300 rows: two blocks of TRAIN_CHUNK_ROUNDS
        after[backward] = (loss, [p.detach().clone() for p in m.net.parameters()])
    torch.testing.assert_close(after["manual"][0], after["autograd"][0], rtol=1e-5, atol=1e-4)
    # a smooth activation's derivative multiplies every backward term by a rounded value, where ReLU's mask is exact
    atol = 1e-6 if activation == "relu" else 1e-5
    for a, b in zip(after["manual"][1], after["autograd"][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=atol)


def test_unknown_backward_is_named():
    with pytest.raises(ValueError, match="model.compute.backward"):
        NVLDB(compute={"backward": "jax"})


def test_unknown_activation_is_named():
    with pytest.raises(ValueError, match="model.network.activation: 'tanh' is not one of"):
        NVLDB(network={"activation": "tanh"})


def test_the_backward_pass_s_cuda_forms_equal_the_plain_ones_on_a_cpu():
    """The two forms the backward pass takes on CUDA, checked where they run here: the duel columns'
    +-scale product is bit for bit scale * stack([g, -g]); the first layer's (h g^T)^T is g h^T to rounding."""
    from nvldb_pl.maths.backward import _plus_minus, _weight_grad

    gen = torch.Generator().manual_seed(3)
    g_df = torch.randn(4, 37, generator=gen)
    scale = 32**0.5
    plain = scale * torch.stack([g_df, -g_df], dim=-1)
    assert torch.equal(g_df.unsqueeze(-1) * _plus_minus(scale, g_df.dtype, g_df.device), plain)
    g, h = torch.randn(4, 16, 300, generator=gen), torch.randn(4, 5, 300, generator=gen)
    torch.testing.assert_close(_weight_grad(g, h, transposed=True), _weight_grad(g, h), rtol=1e-5, atol=1e-5)
    assert _weight_grad(g, h).shape == (4, 16, 5)


def test_a_bias_gradient_s_duel_sums_are_the_sums_over_each_duel_s_two_columns_bit_for_bit():
    """_duel_sums (two strided slices added) against torch's sum over a last dimension of 2, the form it
    replaced: the same values (exact cancellations included; a duel of two -0.0 gives -0.0 where the sum gave
    +0.0), and the bias gradients summed from them the same to the bit, signed zeros included."""
    from nvldb_pl.maths.backward import _duel_sums

    gen = torch.Generator().manual_seed(5)
    g = torch.randn(3, 7, 2 * 301, generator=gen)
    g[g.abs() < 0.4] = 0.0
    g[..., 1:40:2] = -g[..., 0:40:2]  # duels whose columns cancel exactly
    g[0, 0, :8] = -0.0
    g[1, 2] = -0.0  # a unit whose every gradient is -0.0
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        x = g.to(dtype)
        reference = x.view(3, 7, 301, 2).sum(dim=3)
        got = _duel_sums(x)
        assert got.shape == (3, 7, 301) and torch.equal(got, reference), dtype
        bias_grad, expected = got.sum(dim=2), reference.sum(dim=2)
        assert torch.equal(torch.signbit(bias_grad), torch.signbit(expected)) and torch.equal(bias_grad, expected), (
            dtype
        )
        assert not torch.signbit(bias_grad[1, 2])  # the all -0.0 unit: +0.0 either way
