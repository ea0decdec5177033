"""Baselines: each selection rule and estimator against a direct per-seed computation."""

import math

import numpy as np
import pytest
import torch

from nvldb_pl.learners.settings import merged
from nvldb_pl.maths.backward import per_point_gradients
from nvldb_pl.learners import NDB, VACDB, CoLSTIM, MaxInP, RandomPair
from nvldb_pl.maths.network import init_weights
from nvldb_pl.loop.run import run_experiment

S, K, D = 3, 5, 4


def _contexts(seed=0, S=S, K=K, d=D):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(S, K, d, generator=g)
    return x / x.norm(dim=-1, keepdim=True), torch.randn(S, K, K, generator=g)


def _random_spd(seed, S=S, d=D, n=12):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(S, n, d, generator=g, dtype=torch.float64)
    return torch.eye(d, dtype=torch.float64) + torch.einsum("snd,sne->sde", z, z) * 0.3


def _wnorm(z, A_inv):
    return math.sqrt(max(float(z @ A_inv @ z), 0.0))


# ---------------------------------------------------------------- NDB
NDB_PAPER = {"network": {"parametrization": "ntk", "bias": False}, "distinct_arms": False}  # the NDB paper's equations


def test_per_point_gradients_equal_autograd_of_f_for_each_point():
    per = [init_weights(D, 6, 3, "kaiming", torch.Generator().manual_seed(s)) for s in range(2)]
    weights = [torch.stack([p[l] for p in per]).float() for l in range(3)]
    theta = torch.stack([p[-1] for p in per]).float()
    x, _ = _contexts(1, S=2)
    got = per_point_gradients(weights, theta, x.transpose(1, 2))
    for s in range(2):
        for k in range(K):
            ws = [w[s].clone().requires_grad_(True) for w in weights]
            th = theta[s].clone().requires_grad_(True)
            h = x[s, k]
            for w in ws:
                h = torch.relu(w @ h)
            f = math.sqrt(6) * th @ h
            grads = torch.autograd.grad(f, ws + [th])
            torch.testing.assert_close(got[s, k], torch.cat([g.reshape(-1) for g in grads]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gram", ["full", "diag"])
def test_ndb_gram_after_rank_one_updates_equals_direct_formula(gram):
    paper = merged({"network": {"width": 4}}, NDB_PAPER)
    m = NDB(dim=D, arms=K, rounds=10, num_seeds=2, lam=0.7, grad_steps=0, gram=gram, **paper)
    m.init_parameters(0, [0, 1])
    p = 4 * D + 4 * 4 + D * 4 + D
    g = torch.Generator().manual_seed(3)
    zs = [torch.randn(2, p, generator=g, dtype=torch.float64) for _ in range(6)]
    for z in zs:
        m.update({"dg": z})
    V = 0.7 * torch.eye(p, dtype=torch.float64) + sum(torch.einsum("sp,sq->spq", z, z) for z in zs)
    if gram == "full":
        torch.testing.assert_close(m.gradient_gram.Zinv, torch.linalg.inv(V), rtol=1e-9, atol=1e-10)
    else:
        torch.testing.assert_close(m.gradient_gram.U, torch.diagonal(V, dim1=1, dim2=2))


@pytest.mark.parametrize("rule", ["ucb", "ts"])
@pytest.mark.parametrize("gram", ["full", "diag"])
def test_ndb_selection_equals_per_seed_loop(rule, gram):
    m = NDB(
        dim=D,
        arms=K,
        rounds=10,
        num_seeds=S,
        strategy=f"{rule}_asym",
        gram=gram,
        beta=2.5,
        grad_steps=0,
        **merged({"network": {"width": 6}}, NDB_PAPER),
    )
    m.init_parameters(4, [0, 1, 2])
    p = sum(w[0].numel() for w in m.net.weights) + D
    g = torch.Generator().manual_seed(5)
    for _ in range(4):  # a non-trivial V
        m.update({"dg": torch.randn(S, p, generator=g, dtype=torch.float64)})
    x, noise = _contexts(2)
    a1, a2 = m.select(x, noise, 3)
    for s in range(S):
        ws = [w[s].detach().clone().requires_grad_(True) for w in m.net.weights]
        th = m.net.theta[s].detach().clone().requires_grad_(True)
        f, grads = [], []
        for k in range(K):
            h = x[s, k]
            for w in ws:
                h = torch.relu(w @ h)
            fk = math.sqrt(6) * th @ h
            f.append(float(fk.detach()))
            grads.append(torch.cat([q.reshape(-1) for q in torch.autograd.grad(fk, ws + [th])]).double())
        A_inv = m.gradient_gram.Zinv[s] if gram == "full" else torch.diag(1.0 / m.gradient_gram.U[s])
        first = int(np.argmax(f))
        score = [
            (f[k] + 2.5 * _wnorm(grads[k] - grads[first], A_inv))
            if rule == "ucb"
            else (f[k] - f[first]) + 2.5 * _wnorm(grads[k] - grads[first], A_inv) * float(noise[s, 0, k])
            for k in range(K)
        ]
        assert (int(a1[s]), int(a2[s])) == (first, int(np.argmax(score))), f"seed {s}"


# ---------------------------------------------------------------- linear baselines
def _set_linear_state(m, seed=7):
    g = torch.Generator().manual_seed(seed)
    m.theta = torch.randn(S, D, generator=g, dtype=torch.float64)
    m.Sigma = _random_spd(seed)


def test_maxinp_selection_equals_per_seed_loop():
    assert MaxInP(dim=D, arms=K, rounds=100, num_seeds=S).settings.beta == pytest.approx(
        2 * math.sqrt(D * math.log(100))
    )
    m = MaxInP(dim=D, arms=K, rounds=100, num_seeds=S, beta=0.8)  # small: the candidate set is not always everything
    _set_linear_state(m)
    for trial in range(5):
        x, noise = _contexts(10 + trial)
        a1, a2 = m.select(x, noise, 5)
        for s in range(S):
            inv = torch.linalg.inv(m.Sigma[s])
            X = x[s].double()
            w = [[_wnorm(X[i] - X[j], inv) for j in range(K)] for i in range(K)]
            u = (X @ m.theta[s]).tolist()
            greedy = int(np.argmax(u))
            cand = [
                i for i in range(K) if i == greedy or all((u[i] - u[j]) + 0.8 * w[i][j] > 0 for j in range(K) if j != i)
            ]
            best = max((w[i][j], -(i * K + j)) for i in cand for j in cand)
            pair = (-best[1] // K, -best[1] % K)
            assert (int(a1[s]), int(a2[s])) == pair, f"trial {trial} seed {s}"


def test_colstim_selection_equals_per_seed_loop():
    m = CoLSTIM(dim=D, arms=K, rounds=50, num_seeds=S)
    _set_linear_state(m)
    beta = m.hparams.beta
    assert beta == pytest.approx(math.sqrt(D * math.log(50)))
    clip = math.sqrt(D * math.log(50))
    branches = set()
    for trial, t in enumerate([1, 40] + [10_000] * 6):  # p_shared = 1 until sqrt(t) > d log(dT) = 21.2
        x, noise = _contexts(20 + trial)
        a1, a2 = m.select(x, noise, t)
        p_shared = min(1.0, D * math.log(D * 50) / math.sqrt(t))
        for s in range(S):
            inv = torch.linalg.inv(m.Sigma[s])
            X = x[s].double()
            U = [[0.5 * math.erfc(-float(noise[s, i, j]) / math.sqrt(2)) for j in range(K)] for i in range(K)]
            gumbel = lambda q: -math.log(-math.log(q))  # noqa: E731
            shared = U[1][0] < p_shared
            branches.add(shared)
            eps = [gumbel(U[1][1]) if shared else gumbel(U[0][k]) for k in range(K)]
            eps = [min(max(e, -clip), clip) for e in eps]
            u = (X @ m.theta[s]).tolist()
            first = int(np.argmax([u[k] + eps[k] * _wnorm(X[k], inv) for k in range(K)]))
            second = int(np.argmax([(u[j] - u[first]) + beta * _wnorm(X[j] - X[first], inv) for j in range(K)]))
            assert (int(a1[s]), int(a2[s])) == (first, second), f"t {t} seed {s}"
    assert branches == {True, False}


@pytest.mark.parametrize("cls", [MaxInP, CoLSTIM])
def test_linear_estimator_is_the_regularized_mle_and_sigma_the_sum(cls):
    T = 30
    m = cls(dim=D, arms=K, rounds=T, num_seeds=S, lam=0.5)
    g = torch.Generator().manual_seed(1)
    for t in range(T):
        x, _ = _contexts(100 + t)
        a1 = torch.randint(0, K, (S,), generator=g)
        a2 = torch.randint(0, K, (S,), generator=g)
        m.learn(
            {"contexts": x, "a1": a1, "a2": a2, "o": (torch.rand(S, generator=g) < 0.5).float(), "du": torch.zeros(S)}
        )
    for s in range(S):
        Z = (m.history()[s, :, 0] - m.history()[s, :, 1]).double()
        o = m.hist_o[s].double()
        theta = m.theta[s]
        grad = (((torch.sigmoid(Z @ theta) - o)[:, None]) * Z).sum(0) + 0.5 * theta  # d/dtheta of the MLE objective
        assert float(grad.abs().max()) < 1e-6  # loss ties in float64 stop Newton near 1e-8
        torch.testing.assert_close(m.Sigma[s], 0.5 * torch.eye(D, dtype=torch.float64) + Z.T @ Z)


# ---------------------------------------------------------------- VACDB
def _vacdb_reference(x, noise, thetas, Sigmas, beta_l, L):
    """One seed's layer walk, written from Di et al. (2023) Alg. 1 with plain loops."""
    K_ = x.shape[0]
    D_set = list(range(K_))
    for l in range(1, L + 1):
        inv = torch.linalg.inv(Sigmas[l - 1])
        w = {(i, j): _wnorm(x[i] - x[j], inv) for i in D_set for j in D_set}
        u = {i: float(x[i] @ thetas[l - 1]) for i in D_set}
        if all(v <= 2.0**-L for v in w.values()):
            best = max((u[i] + u[j] + beta_l(l) * w[i, j], -(i * K_ + j)) for i in D_set for j in D_set)
            return -best[1] // K_, -best[1] % K_, 0
        if all(v <= 2.0**-l for v in w.values()):
            top = max(u.values())
            D_set = [i for i in D_set if u[i] >= top - 2.0**-l * beta_l(l)]
            continue
        far = [(float(noise[i, j]), -(i * K_ + j)) for (i, j), v in w.items() if v > 2.0**-l]
        best = max(far)
        return -best[1] // K_, -best[1] % K_, l
    raise AssertionError("the walk must end by layer L")


def test_vacdb_layer_walk_equals_per_seed_loop():
    L = 3
    m = VACDB(dim=D, arms=K, rounds=64, num_seeds=S, layers=L)
    g = torch.Generator().manual_seed(9)
    seen = set()
    for trial in range(12):
        # vary the scale of Sigma so that seeds end in different layers and branches
        scale = [1.0, 30.0, 3000.0, 1e6][trial % 4]
        m.theta = torch.randn(S, L, D, generator=g, dtype=torch.float64)
        m.Sigma = torch.stack([_random_spd(trial * 10 + l) * scale * 4.0**l for l in range(L)], dim=1)
        x, noise = _contexts(200 + trial)
        duel = m.propose(x, noise, 5)
        a1, a2, layer_of, w = duel["a1"], duel["a2"], duel["layer"], duel["w"]
        for s in range(S):
            r1, r2, rl = _vacdb_reference(x[s].double(), noise[s], m.theta[s], m.Sigma[s], m.beta_l, L)
            assert (int(a1[s]), int(a2[s]), int(layer_of[s])) == (r1, r2, rl), f"trial {trial} seed {s}"
            seen.add(rl)
            if rl > 0:
                z = (x[s, r1] - x[s, r2]).double()
                assert float(w[s]) == pytest.approx(2.0**-rl / _wnorm(z, torch.linalg.inv(m.Sigma[s, rl - 1])))
    assert len(seen) >= 2, f"the trials reached only layers {seen}"


def test_vacdb_update_touches_only_the_chosen_layer_and_refits_it():
    L, T = 3, 20
    m = VACDB(dim=D, arms=K, rounds=T, num_seeds=S, layers=L, lam=0.5)
    for t in range(1, T + 1):
        x, noise = _contexts(300 + t)
        before = m.Sigma.clone()
        duel = m.propose(x, noise, t)
        a1, a2, layer_of, w = duel["a1"], duel["a2"], duel["layer"], duel["w"]
        m.learn({**duel, "contexts": x, "o": (noise[:, 2, 2] > 0).float(), "du": torch.zeros(S)})
        for s in range(S):
            for l in range(L):
                if l + 1 == int(layer_of[s]):
                    z = (x[s, a1[s]] - x[s, a2[s]]).double()
                    torch.testing.assert_close(m.Sigma[s, l], before[s, l] + float(w[s]) ** 2 * torch.outer(z, z))
                else:
                    assert torch.equal(m.Sigma[s, l], before[s, l])
    for s in range(S):
        Z = (m.history()[s, :, 0] - m.history()[s, :, 1]).double()
        for l in range(L):
            wt = (m.hist_layer[s] == l + 1).double() * m.hist_w[s].pow(2)
            theta = m.theta[s, l]
            grad = ((wt * (torch.sigmoid(Z @ theta) - m.hist_o[s].double()))[:, None] * Z).sum(0) + 0.5 * 4.0 ** -(
                l + 1
            ) * theta
            assert float(grad.abs().max()) < 1e-6  # loss ties in float64 stop Newton near 1e-8


# ---------------------------------------------------------------- all of them in the loop
def test_random_pair_is_uniform_and_independent():
    m = RandomPair(dim=D, arms=K, rounds=10, num_seeds=4000)
    _, noise = _contexts(0, S=4000)
    a1, a2 = m.select(None, noise, 1)
    counts = torch.bincount(a1 * K + a2, minlength=K * K).double()
    assert float(counts.min()) > 4000 / 25 * 0.6 and float(counts.max()) < 4000 / 25 * 1.4


@pytest.mark.parametrize(
    "learner,model",
    [
        ("CoLSTIM", {}),
        ("VACDB", {}),
        ("NDB", {"network": {"width": 8}, "grad_steps": 2}),
        ("MaxInP", {}),
        ("RandomPair", {}),
    ],
)
def test_baselines_run_in_the_loop_and_seeds_are_independent(learner, model):
    data = {"task": "square", "rounds": 15, "num_seeds": 3, "seed": 2}
    together, m3 = run_experiment(data, model, learner=learner)
    alone, m1 = run_experiment({**data, "num_seeds": 1, "first_seed_id": 2}, model, learner=learner)
    assert torch.equal(m3.history()[2], m1.history()[0])
    assert together["seeds"][2] == alone["seeds"][0]
    assert together["method"] == m3.method and together["R_T_over_T_mean"] > 0


def test_an_ndb_checkpoint_from_when_ndb_subclassed_nvldb_still_loads():
    """Those checkpoints carry NVLDB's unused V buffer and NVLDB's extra hparams."""
    m = NDB(dim=D, arms=K, rounds=10, num_seeds=2, network={"width": 4})
    m.init_parameters(0, [0, 1])
    state = {**m.state_dict(), "V": torch.eye(D, dtype=torch.float64).repeat(2, 1, 1)}
    hparams = {**m.hparams, "strategy": "ucb_asym", "variance_aware": False, "refit_theta": False, "w_reg": 1.0}
    checkpoint = {"state_dict": state, "hyper_parameters": hparams, "learner": "NDB"}
    fresh = NDB(dim=D, arms=K, rounds=10, num_seeds=2, network={"width": 4})
    fresh.upgrade_checkpoint(checkpoint)
    fresh.load_state_dict(checkpoint["state_dict"])  # strict: no unexpected V
    assert torch.equal(fresh.net.theta, m.net.theta) and not hasattr(fresh, "V")


def test_ndb_takes_nvldbs_name_for_its_rule_and_a_saved_files_old_one_reads_as_it():
    """strategy names the rule in NDB as in NVLDB (ucb_asym, ts_asym: NVLDB's ASYM on the gradients); a checkpoint or
    run record of its old name (rule: ucb, ts) reads as the new; the old name as an argument, or another of NVLDB's
    rules, is refused naming the field."""
    from nvldb_pl.migrations import upgrade_settings

    new = NDB(rounds=5, num_seeds=1, network={"width": 4}, strategy="ts_asym")
    assert "rule" not in new.hparams and new.method == "NDB-TS"
    assert upgrade_settings({**{k: v for k, v in new.hparams.items() if k != "strategy"}, "rule": "ts"}, "NDB") == {
        **new.hparams
    }
    with pytest.raises(ValueError, match="model.strategy: 'ucb_osym': NDB's rules are NVLDB's ASYM rules"):
        NDB(rounds=5, num_seeds=1, network={"width": 4}, strategy="ucb_osym")
    with pytest.raises(TypeError, match="rule"):
        NDB(rounds=5, num_seeds=1, network={"width": 4}, rule="ts")
