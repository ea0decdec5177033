"""Loss, weights, theta refit, Gram matrix, network, regret: against direct formulas."""

import math

import numpy as np
import pytest
import torch

from nvldb_pl.maths import gram, links, objective
from nvldb_pl.environments.regret import CumulativeRegret, instant_regret
from nvldb_pl.maths.network import StackedMLP, init_weights
from tests.helpers import reference as ref


def _history(S=3, t=40, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    dphi = torch.randn(S, t, d, generator=g, dtype=torch.float64) * 2
    theta = torch.randn(S, d, generator=g, dtype=torch.float64)
    o = (torch.rand(S, t, generator=g, dtype=torch.float64) < 0.6).double()
    return dphi, theta, o


@pytest.mark.parametrize("variance_aware", [True, False])
def test_loss_matches_history_loop(variance_aware):
    dphi, theta, o = _history()
    theta0 = torch.zeros_like(theta) + 0.3
    eps = 0.2
    df = torch.einsum("std,sd->st", dphi, theta)
    mode = "estimated" if variance_aware else "none"
    z = objective.zeta(df, "logistic", eps, mode)
    got = objective.weighted_nll("logistic", df, o, z.pow(-2)) + objective.ridge(theta, theta0, 1.5)
    for s in range(3):
        zs = [ref.zeta(float(v), eps, variance_aware) for v in df[s]]
        assert z[s].tolist() == pytest.approx(zs, rel=1e-12)
        expect = ref.loss(theta[s].numpy(), theta0[s].numpy(), dphi[s].numpy(), o[s].tolist(), zs, 1.5)
        assert got[s].item() == pytest.approx(expect, rel=1e-10)


def test_zeta_is_bounded_and_oracle_uses_true_gap():
    delta = torch.tensor([[-30.0, -1.0, 0.0, 2.0, 30.0]], dtype=torch.float64)
    z = objective.zeta(delta, "logistic", 0.1, "oracle")
    assert z[0, 2].item() == pytest.approx(0.5) and z[0, 0].item() == 0.1 and z[0, -1].item() == 0.1
    assert z[0, 3].item() == pytest.approx(math.sqrt(ref.sigmoid(2) * (1 - ref.sigmoid(2))))
    assert torch.all(objective.zeta(delta, "logistic", 0.1, "none") == 1)


@pytest.mark.parametrize("link", links.LINKS)
def test_refit_reaches_zero_gradient_and_lowers_the_loss(link):
    dphi, theta, o = _history(S=4, t=120, d=5, seed=3)
    w = torch.rand(4, 120, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 50 + 1
    theta0 = torch.zeros(4, 5, dtype=torch.float64)
    start = objective.theta_objective(link, theta, dphi, o, w, theta0, 1.0)
    fitted = objective.refit_theta(link, theta, dphi, o, w, theta0, 1.0, iterations=12)
    grad, _ = objective.theta_gradient(link, fitted, dphi, o, w, theta0, 1.0)
    # zero (from |g| ~ 3e3 at the start) up to what the line search can resolve: the loss (~3e3) is known
    # to ~5e-13 in float64, so steps whose gain g^2 / 2H (H ~ 1e3) is smaller tie with staying put
    assert grad.norm(dim=1).max().item() < 1e-4
    assert torch.all(objective.theta_objective(link, fitted, dphi, o, w, theta0, 1.0) < start)
    # the analytic gradient agrees with autograd
    th = theta.clone().requires_grad_(True)
    objective.theta_objective(link, th, dphi, o, w, theta0, 1.0).sum().backward()
    g2, _ = objective.theta_gradient(link, theta, dphi, o, w, theta0, 1.0)
    assert torch.allclose(th.grad, g2, rtol=1e-9, atol=1e-9)


def test_the_cuda_refits_triangular_solves_equal_cholesky_solve():
    """The refit's Newton direction on CUDA (two triangular solves: a batched torch.cholesky_solve goes
    through MAGMA there, which a CUDA graph cannot capture) solves H x = g as torch.cholesky_solve does."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(5, 7, 7, generator=g, dtype=torch.float64)
    hess = a @ a.transpose(1, 2) + torch.eye(7, dtype=torch.float64)
    grad = torch.randn(5, 7, 1, generator=g, dtype=torch.float64)
    chol = torch.linalg.cholesky(hess)
    x = objective.triangular_cholesky_solve(grad, chol)
    torch.testing.assert_close(x, torch.cholesky_solve(grad, chol), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(hess @ x, grad, rtol=1e-10, atol=1e-10)
    assert torch.equal(objective.cholesky_solve(grad, chol), torch.cholesky_solve(grad, chol))  # CPU: LAPACK's


def test_gram_matches_sum_of_outer_products_and_rank_one_updates():
    dphi, _, _ = _history(S=2, t=30, d=4)
    w = torch.rand(2, 30, dtype=torch.float64) + 0.5
    V = gram.gram_from_history(dphi, w, 2.0)
    V_inc = 2.0 * torch.eye(4, dtype=torch.float64).repeat(2, 1, 1)
    for i in range(30):
        V_inc = gram.rank_one_update(V_inc, dphi[:, i], w[:, i])
    for s in range(2):
        expect = ref.gram(dphi[s].numpy(), (1 / w[s].sqrt()).numpy(), 2.0, 4)
        np.testing.assert_allclose(V[s].numpy(), expect, rtol=1e-12)
    torch.testing.assert_close(V, V_inc, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("init", ["kaiming", "paper"])
def test_network_features_match_eq_nn_per_seed(init):
    S, d, m, L = 3, 5, 8, 3
    net = StackedMLP(S, d, m, L)
    per_seed = [init_weights(d, m, L, init, torch.Generator().manual_seed(i)) for i in range(S)]
    net.load_seed_init(per_seed)
    x = torch.randn(S, 7, d)
    phi = net.features(x)
    f = net.utility(phi)
    for s in range(S):
        for n in range(7):
            expect = ref.features(x[s, n].numpy(), [w.numpy() for w in per_seed[s][:-1]], m)
            np.testing.assert_allclose(phi[s, n].detach().numpy(), expect, rtol=1e-5, atol=1e-5)
            assert f[s, n].item() == pytest.approx(float(per_seed[s][-1].numpy() @ expect), rel=1e-4, abs=1e-4)


def test_paper_init_structure():
    d, m = 5, 8
    W1, W2, W3, theta0 = init_weights(d, m, 3, "paper", torch.Generator().manual_seed(0))
    assert W1.shape == (m, d) and W3.shape == (d, m)
    # blockdiag(w, w) (cut to d columns) and (omega, -omega)
    torch.testing.assert_close(W2[: m // 2, : m // 2], W2[m // 2 :, m // 2 :])
    assert torch.all(W2[: m // 2, m // 2 :] == 0) and torch.all(W1[: m // 2, 3:] == 0)
    torch.testing.assert_close(W3[:, : m // 2], -W3[:, m // 2 :])
    assert theta0.shape == (d,)


def test_seeds_do_not_share_gradients():
    net = StackedMLP(2, 3, 4, 2)
    net.load_seed_init([init_weights(3, 4, 2, "kaiming", torch.Generator().manual_seed(i)) for i in range(2)])
    x = torch.randn(2, 6, 3)
    loss = net.utility(net.features(x))
    loss[0].sum().backward()  # only seed 0's data enters the loss
    assert all(w.grad[1].abs().max() == 0 for w in net.weights) and net.theta.grad[1].abs().max() == 0
    assert any(w.grad[0].abs().max() > 0 for w in net.weights)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_link_functions_of_a_seed_do_not_depend_on_the_seeds_beside_it(dtype):
    """Every prefix of a tensor (fewer seeds) gets the very bits the whole tensor gets.

    torch.sigmoid fails this on CPU (vectorized body vs scalar tail); the logistic link must not.
    """
    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        z = torch.randn(64, generator=g, dtype=dtype) * (1 + 10 * trial / 50)
        o = (torch.rand(64, generator=g) < 0.5).to(dtype)
        for link in links.LINKS:
            whole = [links.prob(link, z), links.log_prob(link, z), *links.nll_derivatives(link, z, o)]
            for k in range(1, 40):
                part = [
                    links.prob(link, z[:k]),
                    links.log_prob(link, z[:k]),
                    *links.nll_derivatives(link, z[:k], o[:k]),
                ]
                assert all(torch.equal(a[:k], b) for a, b in zip(whole, part)), (link, trial, k)
    edge = torch.tensor([-1000.0, -30.0, 0.0, 30.0, 1000.0], dtype=dtype)
    sig = links.sigmoid(edge)
    assert torch.allclose(sig, torch.sigmoid(edge), rtol=4 * torch.finfo(dtype).eps, atol=0)
    assert sig[0] == 0 and sig[-1] == 1 and sig[2] == 0.5


def test_training_gradient_of_a_seed_does_not_depend_on_the_number_of_seeds():
    """The hand-written gradient at Covertype's sizes (d=378, m=32) for 20 seeds, sliced, equals 3 seeds'.

    With torch.sigmoid this differed in the last bit after one duel, and 3-seed runs left the
    20-seed run's trajectories after 34-155 rounds.
    """
    from nvldb_pl.maths.backward import accumulate_nll_grad

    g = torch.Generator().manual_seed(0)
    S, d, m = 20, 378, 32
    Ws = [
        torch.randn(S, m, d, generator=g) / d**0.5,
        torch.randn(S, m, m, generator=g) / m**0.5,
        torch.randn(S, d, m, generator=g) / m**0.5,
    ]
    theta = torch.randn(S, d, generator=g) / d**0.5
    for n in (1, 2, 3, 5):
        x = torch.randn(S, d, 2 * n, generator=g)
        o = (torch.rand(S, n, generator=g) < 0.5).float()
        out = []
        for s in (S, 3):
            grads = [torch.zeros_like(w[:s]) for w in Ws] + [torch.zeros_like(theta[:s])]
            loss = accumulate_nll_grad(
                [w[:s] for w in Ws], theta[:s], x[:s], o[:s], "logistic", lambda df: 1.0 / (1.0 + df.abs()), grads, None
            )
            out.append([loss, *grads])
        assert all(torch.equal(a[:3], b) for a, b in zip(*out)), n


def test_regret_arithmetic():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(5, 4, generator=g, dtype=torch.float64)
    a1 = torch.tensor([0, 1, 2, 3, 0])
    a2 = torch.tensor([0, 3, 2, 1, 1])
    ra, rw = instant_regret(u, a1, a2)
    metric = CumulativeRegret([10, 11, 12, 13, 14])
    metric.update(ra, rw)
    metric.update(ra, rw)
    for s in range(5):
        ea, ew = ref.regret(u[s].tolist(), a1[s].item(), a2[s].item())
        assert ra[s].item() == pytest.approx(ea) and rw[s].item() == pytest.approx(ew)
        assert ea >= 0 and ew >= 0 and ew <= 2 * ea + 1e-12
    out = metric.compute()
    torch.testing.assert_close(out["cum_avg"], 2 * ra)
    assert out["seed_ids"].tolist() == [10, 11, 12, 13, 14] and int(out["rounds"]) == 2


def test_task_utilities_match_the_appendix_formulas():
    from nvldb_pl.environments.tasks import draw_contexts, draw_theta, utility

    rng = np.random.default_rng(0)
    x = draw_contexts(4, 3, 5, rng)  # [rounds=4 used as seeds, K=3, d=5]
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0)
    assert np.all(np.abs(x) <= 1.0)
    for task in ("cos", "square", "quadratic"):
        theta = np.stack([draw_theta(task, 5, rng) for _ in range(4)])
        assert np.all(np.abs(theta) <= 1.0) and theta.shape == ((4, 5, 5) if task == "quadratic" else (4, 5))
        u = utility(task, theta, x)
        for s in range(4):
            for k in range(3):
                if task == "cos":
                    expect = math.cos(3 * float(theta[s] @ x[s, k]))
                elif task == "square":
                    expect = 10 * float(theta[s] @ x[s, k]) ** 2
                else:
                    expect = float(x[s, k] @ theta[s] @ theta[s].T @ x[s, k])
                assert u[s, k] == pytest.approx(expect, rel=1e-12, abs=1e-12)


def test_the_learners_adam_step_of_a_seed_does_not_depend_on_the_number_of_seeds():
    """NVLDB's own optimizer at Covertype's sizes (d=378, m=32): 20 seeds, sliced, equal 3 seeds.

    torch's fused CPU Adam failed this for theta [S, 378] (the last bit of some elements).
    """
    from nvldb_pl.learners.nvldb import NVLDB

    g = torch.Generator().manual_seed(0)
    shapes = [
        w.shape[1:] for w in NVLDB(dim=378, arms=7, rounds=10, num_seeds=1, network={"width": 32}).net.parameters()
    ]
    steps = [[torch.randn(20, *shape, generator=g) * 10.0 ** (-6 * i / 40) for shape in shapes] for i in range(40)]
    out = []
    for S in (20, 3):
        m = NVLDB(dim=378, arms=7, rounds=10, num_seeds=S, network={"width": 32})
        m.init_parameters(0, list(range(S)))
        opt = m.make_optimizer()
        for grads in steps:
            for p, gr in zip(m.net.parameters(), grads):
                p.grad = gr[:S].clone()
            opt.step()
        out.append([p.detach().clone() for p in m.net.parameters()])
    assert all(torch.equal(a[:3], b) for a, b in zip(*out))
