"""Algorithm 1 in one file, as the appendix listings are written: one seed at a time, Python loops over arms,
V rebuilt from the history each round (its inverse from a float64 Cholesky factor), the network trained by autograd.

The doorway to the algorithm: read :func:`run_seed` top to bottom for what the vectorized learner
(:class:`nvldb_pl.learners.nvldb.NVLDB` with the loop of :mod:`nvldb_pl.loop`) computes for S seeds at once. Run on the
same streams, it makes the same decisions as that loop (``tests/learners/test_naive_equivalence.py``), and it is the speed
baseline of ``scripts/benchmark.py``. It reuses no selection or Gram code of the package.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .environments.stream import RoundStream, StreamSpec
from .environments.seeding import TAG_INIT, rng_for
from .maths.network import INITS_OF, init_biases, init_weights
from .maths.objective import refit_theta


def _inverse(A: torch.Tensor) -> torch.Tensor:
    """A^-1 of a symmetric positive-definite float64 matrix, from its Cholesky factor."""
    return torch.cholesky_inverse(torch.linalg.cholesky(A))


def _phi(weights, x, scale, biases=(), activation="relu"):
    h = x
    for layer, w in enumerate(weights):
        h = h @ w.T
        if biases:
            h = h + biases[layer]
        h = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}[activation](h)
    return scale * h


def _zeta(df, eps, variance_aware):
    if not variance_aware:
        return torch.ones_like(df)
    p = torch.sigmoid(df.detach())
    return torch.clamp(torch.sqrt(p * (1 - p)), min=eps)


def _select(strategy, f, grads, Vinv, beta, noise, t, distinct=False):
    K = len(f)
    kind, rule = strategy.split("_")

    def w(i, j):
        z = grads[i] - grads[j]
        return beta * math.sqrt(max(float(z @ Vinv @ z), 0.0))

    if rule == "asym":
        a1 = int(np.argmax(f))
        best, a2 = -math.inf, 0
        for j in range(K):
            if distinct and j == a1:
                continue
            score = f[j] + w(j, a1) if kind == "ucb" else (f[j] - f[a1]) + w(j, a1) * noise[0][j]
            if score > best:
                best, a2 = score, j
        return a1, a2
    if rule == "osym":
        best, pair = -math.inf, (0, 0)
        for i in range(K):
            for j in range(K):
                if distinct and i == j:
                    continue
                score = f[i] + f[j] + w(i, j) * (noise[i][j] if kind == "ts" else 1.0)
                if score > best:
                    best, pair = score, (i, j)
        return pair
    greedy = int(np.argmax(f))
    cand = [i for i in range(K) if i == greedy or all(w(i, j) > f[j] - f[i] for j in range(K) if j != i)]
    if distinct and len(cand) == 1:  # a lone candidate duels its optimistic competitor
        c, best, a2 = cand[0], -math.inf, 0
        for j in range(K):
            score = f[j] + w(c, j) * (noise[c][j] if kind == "ts" else 1.0)
            if j != c and score > best:
                best, a2 = score, j
        return c, a2
    best, pair = -math.inf, (greedy, greedy)
    for i in cand:
        for j in cand:
            if distinct and i == j:
                continue
            n = w(i, j) / beta
            score = n if kind == "ucb" else n * n + n * n / (2 * math.sqrt(math.log(K * t * t))) * noise[i][j]
            if score > best:
                best, pair = score, (i, j)
    return pair


def run_seed(
    spec: StreamSpec,
    seed_id: int,
    strategy="ucb_asym",
    variance_aware=True,
    network=None,
    feature_dim=None,
    lr=1e-3,
    lam=1.0,
    beta=1.0,
    epsilon=None,
    grad_steps=20,
    w_reg=0.1,
    refit_iterations=8,
    distinct_arms=True,
    self_duel_test=None,
):
    """One seed of Alg. 1 (H = 1, recompute Gram, logistic link). Returns (pairs, cum_avg_regret).

    ``network``: the built-in MLP's fields, as NVLDB's ``model.network`` mapping. ``self_duel_test`` deep_diag / deep_full (``None``: deep_diag where distinct_arms, else none): the
    distinct pair is replaced by the greedy arm's self-duel where f_c - f_k >= beta ||g_c - g_k||_{Z^-1}
    for every k != c, g the gradient of f over every parameter (autograd, one arm at a time) and
    Z = lam I + sum of the played pairs' (g_a1 - g_a2)(...)^T at selection time (its diagonal for deep_diag)."""
    if self_duel_test is None:
        self_duel_test = "deep_diag" if distinct_arms else "none"
    epsilon = 1.0 / math.sqrt(spec.dim) if epsilon is None else epsilon
    mlp = {"width": 32, "depth": 3, "parametrization": "standard", "activation": "relu", **(network or {})}
    width, depth, parametrization, activation = (mlp[k] for k in ("width", "depth", "parametrization", "activation"))
    init = mlp.get("init") or INITS_OF[parametrization][0]
    bias = mlp.get("bias")
    bias = parametrization == "standard" if bias is None else bias
    scale = math.sqrt(width) if parametrization == "ntk" else 1.0
    one = StreamSpec(spec.task, spec.dim, spec.arms, spec.rounds, 1, seed_id, spec.base_seed)
    gen = torch.Generator().manual_seed(int(rng_for(spec.base_seed, seed_id, TAG_INIT).integers(2**62)))
    params = [p.float() for p in init_weights(spec.dim, width, depth, init, gen, feature_dim)]
    weights = [p.clone().requires_grad_(True) for p in params[:-1]]
    biases = (
        [b.float().requires_grad_(True) for b in init_biases(spec.dim, width, depth, init, gen, feature_dim)]
        if bias
        else []
    )
    theta0 = params[-1].clone()
    layers0 = [p.detach().clone() for p in weights + biases]  # W_0 (and b_0): w_reg's prior
    theta = theta0.clone().requires_grad_(True)
    opt = torch.optim.Adam(weights + [theta] + biases, lr=lr)
    V = lam * torch.eye(len(theta0), dtype=torch.float64)
    n_params = sum(p.numel() for p in weights + [theta] + biases)
    Z = lam * torch.eye(n_params, dtype=torch.float64)  # the deep test's Gram (full; deep_diag reads its diagonal)
    hist_x1, hist_x2, hist_o = [], [], []
    pairs, cum = [], 0.0
    for t, batch in enumerate(RoundStream(one), start=1):
        x, u = batch["contexts"][0], batch["utilities"][0]
        noise, uniform = batch["noise"][0].tolist(), float(batch["uniform"][0])
        with torch.no_grad():
            grads = [_phi(weights, x[k], scale, biases, activation).double() for k in range(spec.arms)]  # d f / d theta
            f = [float(g @ theta.double()) for g in grads]
        a1, a2 = _select(strategy, f, grads, _inverse(V), beta, noise, t, distinct_arms)
        if self_duel_test != "none":
            g = []
            for k in range(spec.arms):  # d f(x_k) / d(W, theta, b), one arm at a time
                fk = _phi(weights, x[k], scale, biases, activation) @ theta
                g.append(torch.cat([d.flatten() for d in torch.autograd.grad(fk, weights + [theta] + biases)]).double())
            Zinv = _inverse(Z) if self_duel_test == "deep_full" else torch.diag(1.0 / torch.diagonal(Z))
            c = int(np.argmax(f))
            sure = all(
                f[c] - f[k] >= beta * math.sqrt(max(float((g[c] - g[k]) @ Zinv @ (g[c] - g[k])), 0.0))
                for k in range(spec.arms)
                if k != c
            )
            if sure:
                a1, a2 = c, c
            z = g[a1] - g[a2]
            Z = Z + torch.outer(z, z)
        du = float(u[a1] - u[a2])
        o = 1.0 if uniform < 1.0 / (1.0 + math.exp(-du)) else 0.0
        cum += (2 * float(u.max()) - float(u[a1]) - float(u[a2])) / 2
        pairs.append((a1, a2))
        hist_x1.append(x[a1])
        hist_x2.append(x[a2])
        hist_o.append(o)
        X1, X2, O = torch.stack(hist_x1), torch.stack(hist_x2), torch.tensor(hist_o)
        for _ in range(grad_steps):
            opt.zero_grad()
            f1 = _phi(weights, X1, scale, biases, activation) @ theta
            df = f1 - _phi(weights, X2, scale, biases, activation) @ theta
            zeta = _zeta(df, epsilon, variance_aware)
            sign = 2 * O - 1
            loss = -(torch.nn.functional.logsigmoid(sign * df) / zeta**2).sum()
            loss = loss + 0.5 * lam * ((theta - theta0) ** 2).sum()
            if w_reg > 0:  # mu/2 sum_l ||W^l - W^l_0||^2 (+ the biases'), not in eq. (total_loss)
                loss = loss + 0.5 * w_reg * sum(((p - p0) ** 2).sum() for p, p0 in zip(weights + biases, layers0))
            loss.backward()
            opt.step()
        with torch.no_grad():
            dphi = (
                _phi(weights, X1, scale, biases, activation) - _phi(weights, X2, scale, biases, activation)
            ).double()
            zeta = _zeta((dphi @ theta.double()), epsilon, variance_aware)
            new = refit_theta(
                "logistic",
                theta.double()[None],
                dphi[None],
                O.double()[None],
                zeta[None].pow(-2),
                theta0.double()[None],
                lam,
                refit_iterations,
            )[0]
            theta.copy_(new)
            zeta = _zeta(dphi @ theta.double(), epsilon, variance_aware)
            V = lam * torch.eye(len(theta0), dtype=torch.float64)  # appendix: V reinitialized each round
            for i in range(len(hist_o)):
                V += torch.outer(dphi[i], dphi[i]) / zeta[i] ** 2
    return pairs, cum
