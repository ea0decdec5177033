"""The self-duel tests of nvldb_pl.maths.selfduel on hand-made estimates, against loops written from their definitions."""

import math

import pytest
import torch

from nvldb_pl.learners.base import Execution
from nvldb_pl.maths import selection, selfduel


def _loop_sure(f, D, beta):
    """c = argmax f (first), sure iff f_c - f_k >= beta D[c, k] for every k != c: one seed, plain Python."""
    c = max(range(len(f)), key=lambda k: (f[k], -k))
    return c, all(f[c] - f[k] >= beta * D[c][k] for k in range(len(f)) if k != c)


def test_confident_greedy_matches_its_definition_on_random_estimates():
    gen = torch.Generator().manual_seed(3)
    f = torch.randn(200, 4, generator=gen, dtype=torch.float64)
    D = torch.rand(200, 4, 4, generator=gen, dtype=torch.float64)
    D = D + D.transpose(1, 2)
    c, sure = selfduel.confident_greedy(f, D, 0.5)
    for s in range(200):
        assert (int(c[s]), bool(sure[s])) == _loop_sure(f[s].tolist(), D[s].tolist(), 0.5)
    assert 0 < int(sure.sum()) < 200  # both outcomes occur


def test_a_collapsed_shallow_width_no_longer_sticks_the_learner_on_its_greedy_arm():
    """The stuck case: the last-layer norms have collapsed (0), so the literal ASYM rule self-duels arm 0 for
    good; where the whole network's width still covers arm 1, the deep test keeps the informative distinct pair."""
    f = torch.tensor([[1.0, 0.9, 0.0]], dtype=torch.float64)
    norm = torch.zeros(1, 3, 3, dtype=torch.float64)
    literal = selection.make_rule("ucb_asym", 1.0, distinct=False)(f, norm, None, 10)
    assert [int(a) for a in literal] == [0, 0]
    distinct = selection.make_rule("ucb_asym", 1.0, distinct=True)(f, norm, None, 10)
    wide = torch.full((1, 3, 3), 0.5, dtype=torch.float64)  # ||g_0 - g_1|| = 0.5 > the lead 0.1
    assert [int(a) for a in selfduel.deep_test(distinct, f, wide, 1.0)] == [0, 1]
    narrow = torch.full((1, 3, 3), 0.05, dtype=torch.float64)  # the lead clears every width: the free self-duel
    assert [int(a) for a in selfduel.deep_test(distinct, f, narrow, 1.0)] == [0, 0]


def test_escape_replaces_a_self_duel_with_probability_c_over_sqrt_t():
    allowed = (torch.tensor([2, 2, 1]), torch.tensor([2, 2, 0]))
    distinct = (torch.tensor([2, 2, 1]), torch.tensor([0, 1, 0]))
    uniform = torch.tensor([0.1, 0.6, 0.0])
    a1, a2 = selfduel.escape(allowed, distinct, uniform, t=4, c=1.0)  # c / sqrt(t) = 0.5
    assert a1.tolist() == [2, 2, 1] and a2.tolist() == [0, 2, 0]  # seed 0 escapes, seed 1 not, seed 2 was distinct
    a1, a2 = selfduel.escape(allowed, distinct, uniform, t=1, c=1.0)  # min(1, c) = 1: every self-duel replaced
    assert a2.tolist() == [0, 1, 0]


@pytest.mark.parametrize("form", ["full", "diag"])
def test_gradient_pair_norms_match_a_loop_over_pairs(form):
    gen = torch.Generator().manual_seed(1)
    S, K, p = 3, 4, 6
    g = torch.randn(S, K, p, generator=gen, dtype=torch.float64)
    A = torch.randn(S, p, p, generator=gen, dtype=torch.float64)
    Z = A @ A.transpose(1, 2) + torch.eye(p, dtype=torch.float64)
    U = torch.rand(S, p, generator=gen, dtype=torch.float64) + 0.5
    N = selfduel.gradient_pair_norms(g, torch.linalg.inv(Z) if form == "full" else None, U if form == "diag" else None)
    for s in range(S):
        for i in range(K):
            for j in range(K):
                z = g[s, i] - g[s, j]
                q = z @ torch.linalg.solve(Z[s], z) if form == "full" else (z * z / U[s]).sum()
                assert float(N[s, i, j]) == pytest.approx(math.sqrt(float(q)), rel=1e-9, abs=1e-12)


def test_sherman_morrison_keeps_the_inverse_of_the_growing_gram():
    gen = torch.Generator().manual_seed(2)
    S, p = 2, 5
    Zinv = torch.eye(p, dtype=torch.float64).repeat(S, 1, 1)
    Z = torch.eye(p, dtype=torch.float64).repeat(S, 1, 1)
    for _ in range(20):
        z = torch.randn(S, p, generator=gen, dtype=torch.float64)
        selfduel.sherman_morrison_(Zinv, z)
        Z = Z + z.unsqueeze(2) * z.unsqueeze(1)
    assert torch.allclose(Zinv, torch.linalg.inv(Z), rtol=1e-9, atol=1e-12)


def test_nvldbs_default_is_the_deep_test_where_the_rule_keeps_a2_distinct():
    from nvldb_pl.learners.nvldb import NVLDB

    assert NVLDB(num_seeds=1, rounds=5).hparams.self_duel["test"] == "deep_diag"
    assert NVLDB(num_seeds=1, rounds=5, distinct_arms=False).hparams.self_duel["test"] == "none"  # the literal reading
    with pytest.raises(ValueError, match="model.self_duel.test: deep_full decides the self-duels itself"):
        NVLDB(num_seeds=1, rounds=5, distinct_arms=False, self_duel={"test": "deep_full"})


def test_the_live_api_never_asks_a_to_duel_with_itself_under_the_fit_default():
    import numpy as np

    from nvldb_pl.live import DuelingBandit

    bandit = DuelingBandit.create(dim=3, grad_steps=5, seed=1)
    assert bandit.learner.hparams.self_duel["test"] == "deep_diag"
    taste = np.array([3.0, -1.0, 0.5])
    rng = np.random.default_rng(0)
    for _ in range(60):
        x = rng.standard_normal((4, 3))
        i, j = bandit.select(x)
        assert i != j
        bandit.observe(x, i, j, int(x[i] @ taste > x[j] @ taste))
    assert (
        float(bandit.learner.self_duel.gram.U.sum())
        > bandit.learner.hparams.lam * bandit.learner.self_duel.gram.U.numel()
    )  # Z gains the duels


def test_the_deep_second_arm_is_the_optimistic_rival_under_the_whole_networks_width():
    """a2 = argmax_{k != a1} f_k + beta D[a1, k], checked against a plain loop; a1 is never its own rival."""
    gen = torch.Generator().manual_seed(5)
    f = torch.randn(100, 5, generator=gen, dtype=torch.float64)
    D = torch.rand(100, 5, 5, generator=gen, dtype=torch.float64)
    D = D + D.transpose(1, 2)
    a1 = torch.randint(0, 5, (100,), generator=gen)
    a2 = selfduel.deep_second_arm(a1, f, D, 0.7)
    for s in range(100):
        i = int(a1[s])
        want = max((k for k in range(5) if k != i), key=lambda k: (float(f[s, k] + 0.7 * D[s, i, k]), -k))
        assert int(a2[s]) == want
    # a wide rival wins over a better-estimated but narrow one
    f1 = torch.tensor([[1.0, 0.9, 0.5]], dtype=torch.float64)
    D1 = torch.tensor([[[0.0, 0.01, 0.8], [0.01, 0.0, 0.8], [0.8, 0.8, 0.0]]], dtype=torch.float64)
    assert int(selfduel.deep_second_arm(torch.tensor([0]), f1, D1, 1.0)) == 2


def test_the_self_duel_width_and_second_arm_are_checked_and_change_the_run():
    from nvldb_pl.learners.nvldb import NVLDB

    with pytest.raises(ValueError, match="model.self_duel.second_arm: deep takes the deep test's Gram"):
        NVLDB(num_seeds=1, rounds=5, self_duel={"test": "none", "second_arm": "deep"})
    with pytest.raises(ValueError, match="model.self_duel.second_arm: 'wide' is not one of"):
        NVLDB(num_seeds=1, rounds=5, self_duel={"second_arm": "wide"})
    with pytest.raises(ValueError, match="model.self_duel.width"):
        NVLDB(num_seeds=1, rounds=5, self_duel={"width": float("nan")})
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 5, generator=gen, dtype=torch.float64)
    noise = torch.zeros(2, 4, 4, dtype=torch.float64)
    plain = NVLDB(dim=5, arms=4, num_seeds=2, rounds=5)
    deep = NVLDB(dim=5, arms=4, num_seeds=2, rounds=5, self_duel={"second_arm": "deep"})
    with torch.no_grad():
        for par in plain.net.parameters():
            par.normal_(generator=gen)
    deep.load_state_dict(plain.state_dict())
    for m in (plain, deep):  # the second arm alone (as the live API runs)
        m.execute_with(Execution(self_duels=False))
    p1, p2 = plain.propose(x, noise, 1), deep.propose(x, noise, 1)
    assert torch.equal(p1["a1"], p2["a1"])  # a1 is the rule's
    with torch.no_grad():
        D = selfduel.gradient_pair_norms(deep._gradients(x), None, deep.self_duel.gram.U)
        want = selfduel.deep_second_arm(p2["a1"], deep.estimate(x).f, D, 1.0)
    assert torch.equal(p2["a2"], want) and not torch.equal(p1["a2"], want)


def test_saves_and_checkpoints_from_before_the_test_owned_its_gram_still_load(tmp_path):
    """The deep test's Z was NVLDB's own buffer (U, Zinv) and NDB's V its own (Vinv, U) before both became a
    GradientGram: a fit checkpoint of that layout goes on to exactly the run in one go, and a live save of it loads
    with its Gram."""
    import json
    import os

    import numpy as np

    from nvldb_pl.cli import run_cli
    from nvldb_pl.learners.ndb import NDB
    from nvldb_pl.learners.nvldb import NVLDB
    from nvldb_pl.live import DuelingBandit

    cos = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs", "cos.yaml"
    )

    from nvldb_pl.migrations import MIGRATIONS

    def old_layout(state, cls):
        back = {new: old for m in MIGRATIONS for old, new in m.renamed_state.get(cls.__name__, {}).items()}
        return {back.get(k, k): v for k, v in state.items()}

    short = [
        "--data.num_seeds=2",
        "--model.network.width=8",
        "--model.grad_steps=2",
        "--trainer.enable_progress_bar=false",
    ]
    for model in (["--model.self_duel.test=deep_full"], ["--model=NDB", "--model.gram=diag"]):
        whole, part = tmp_path / f"whole{len(model)}", tmp_path / f"part{len(model)}"
        assert (
            run_cli(["fit", "--config", cos, *short, *model, "--data.rounds=16", f"--trainer.default_root_dir={whole}"])
            == 0
        )
        assert (
            run_cli(["fit", "--config", cos, *short, *model, "--data.rounds=8", f"--trainer.default_root_dir={part}"])
            == 0
        )
        path = part / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
        ckpt = torch.load(path, weights_only=False)
        cls = NDB if "--model=NDB" in model else NVLDB
        ckpt["state_dict"] = old_layout(ckpt["state_dict"], cls)
        del ckpt["format_version"]  # a file of then records no migration version
        assert not any(k.startswith(("self_duel.", "gradient_gram.")) for k in ckpt["state_dict"])
        torch.save(ckpt, path)
        args = ["fit", "--config", cos, *short, *model, "--data.rounds=16", f"--trainer.default_root_dir={part}"]
        assert run_cli([*args, "--ckpt_path=last"]) == 0

        def regret(root):
            with open(root / "lightning_logs" / "version_0" / "summary.json") as fh:
                return [s["cum_avg_regret"] for s in json.load(fh)["seeds"]]

        assert regret(part) == regret(whole)

    bandit = DuelingBandit.create(dim=3, grad_steps=2, seed=1, self_duel={"test": "deep_full"})
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.standard_normal((4, 3))
        i, j = bandit.select(x)
        bandit.observe(x, i, j, 1)
    bandit.save(str(tmp_path / "live.pt"))
    save = torch.load(tmp_path / "live.pt", weights_only=False)
    save["state_dict"] = old_layout(save["state_dict"], NVLDB)
    del save["format_version"]
    torch.save(save, tmp_path / "old.pt")
    loaded = DuelingBandit.from_checkpoint(str(tmp_path / "old.pt"))
    assert torch.equal(loaded.learner.self_duel.gram.Zinv, bandit.learner.self_duel.gram.Zinv)
