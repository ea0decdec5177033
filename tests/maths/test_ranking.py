"""The ranking objective (objective: rank): the BALD score against an independent quadrature, the pair it picks, and
the objective through the live API, scripts/duel.py and the annotation server."""

import math

import numpy as np
import pytest
import torch

from nvldb_pl.live import DuelingBandit
from nvldb_pl.maths.ranking import InformativePair, bald, binary_entropy
from nvldb_pl.serve.annotation import SHARED, Annotation
from nvldb_pl.serve.items import builtin_catalog
from nvldb_pl.serve.store import Store
from tests.helpers.script_loader import load_script

CONFIG = "configs/live.yaml"


@pytest.mark.parametrize("m", [-3.0, -0.4, 0.0, 0.7, 2.5])
@pytest.mark.parametrize("s", [0.01, 0.5, 1.0, 4.0])
def test_bald_is_the_probit_models_information_up_to_its_approximation(m, s):
    """h(Phi(m / sqrt(1 + s^2))) - E_{d ~ N(m, s^2)} h(Phi(d)), the expectation by Gauss-Hermite quadrature."""
    z, w = np.polynomial.hermite_e.hermegauss(120)
    d = torch.tensor(m + s * z)
    given = float((torch.tensor(w) * binary_entropy(torch.special.ndtr(d))).sum() / w.sum())
    exact = float(binary_entropy(torch.special.ndtr(torch.tensor(m / math.sqrt(1 + s * s))))) - given
    assert abs(float(bald(torch.tensor(m), torch.tensor(s))) - exact) < 5e-3
    assert float(bald(torch.tensor(m), torch.tensor(s))) >= -1e-9


def test_the_informative_pair_is_an_open_order_with_the_widest_gap_never_a_self_duel():
    f = torch.tensor([[0.0, 3.0, 0.1, 3.05]])
    norm = torch.tensor([[[0, 1, 2, 1], [1, 0, 1, 0.5], [2, 1, 0, 1], [1, 0.5, 1, 0]]], dtype=torch.float64)
    a1, a2 = InformativePair()(f.double(), norm)
    assert {int(a1), int(a2)} == {0, 2}  # close utilities, width 2: the most open order
    a1, a2 = InformativePair()(torch.zeros(3, 5, dtype=torch.float64), torch.zeros(3, 5, 5, dtype=torch.float64))
    assert (a1 != a2).all()


def _reference_question(x, answered, last, link="logistic"):
    """The rank question written out pair by pair: BALD of each gap under the taste posterior of ``answered``
    [(first row, second row, o)], skipping self-duels, the last pair and, while two items were never shown, pairs
    with a shown item (while one: pairs of two shown items); ties to the first pair in row-major order."""
    from nvldb_pl.maths.posterior import taste_posterior

    first = np.array([a for a, _, _ in answered]).reshape(-1, x.shape[1])
    second = np.array([b for _, b, _ in answered]).reshape(-1, x.shape[1])
    o = torch.tensor([float(c) for _, _, c in answered], dtype=torch.float64)
    f, cov, _ = taste_posterior(x, first, second, o, link)
    shown = [any(np.array_equal(x[k], r) for a, b, _ in answered for r in (a, b)) for k in range(len(x))]
    if last is not None:
        shown[last[0]] = shown[last[1]] = True
    new = shown.count(False)
    best, pair = -math.inf, None
    for k in range(len(x)):
        for j in range(len(x)):
            if k == j or (last is not None and {k, j} == set(last)):
                continue
            if (new >= 2 and (shown[k] or shown[j])) or (new == 1 and shown[k] and shown[j]):
                continue
            var = float(cov[k, k] + cov[j, j] - 2 * cov[k, j])
            score = float(bald(f[k] - f[j], torch.tensor(math.sqrt(max(var, 0.0)), dtype=torch.float64)))
            if score > best:
                best, pair = score, (k, j)
    return pair


def test_the_live_api_asks_the_taste_posteriors_question_never_twice_running_and_keeps_the_objective(tmp_path):
    """Each question is the pair a plain loop over pairs finds (BALD under the taste posterior of the answers, not
    the pair just asked, every item early); over 40 questions no pair twice in a row and every item of the catalog
    shown within its first 6 questions (12 items)."""
    x = builtin_catalog().contexts
    bandit = DuelingBandit.from_config(CONFIG, dim=5, seed=1, objective="rank")
    u = x @ np.array([1.0, -0.5, 0.3, 0.0, 0.8])
    answered, last, shown_by = [], None, {}
    for t in range(40):
        i, j = bandit.select(x)
        if t < 8 or t % 10 == 0:
            assert {i, j} == set(_reference_question(x, answered, last))  # BALD is symmetric: either order
        assert last is None or {i, j} != set(last)
        o = int(u[i] > u[j])
        bandit.observe(x, i, j, o)
        answered.append((x[i], x[j], o))
        last = (i, j)
        for k in (i, j):
            shown_by.setdefault(k, t + 1)
    assert len(shown_by) == 12 and max(shown_by.values()) <= 6
    bandit.save(str(tmp_path / "b.pt"))
    assert DuelingBandit.from_checkpoint(str(tmp_path / "b.pt")).objective == "rank"
    assert DuelingBandit.from_checkpoint(str(tmp_path / "b.pt"), objective="regret").objective == "regret"


def test_a_pending_question_is_not_asked_again_and_its_made_up_outcome_is_no_answer():
    """The page's copy between learning steps: a pending pair is the last pair (not asked again) and its made-up
    outcome does not enter the posterior (the next question is the reference's on the real answers alone)."""
    x = builtin_catalog().contexts
    bandit = DuelingBandit.from_config(CONFIG, dim=5, seed=2, objective="rank")
    answered = []
    for _ in range(5):
        i, j = bandit.select(x)
        bandit.observe(x, i, j, 1)
        answered.append((x[i], x[j], 1))
    i, j = bandit.select(x)
    bandit.pending(x, i, j, in_place=True)
    assert set(bandit.select(x)) == set(_reference_question(x, answered, (i, j)))


def test_the_question_mask_never_repeats_shows_new_items_first_and_always_leaves_a_pair():
    from nvldb_pl.maths.ranking import question_mask

    m = question_mask(torch.tensor([True, True, False, False]), (0, 1))
    assert not m[0, 1] and not m[1, 0] and not m.diagonal().any()
    assert m[2, 3] and not m[0, 2] and not m[0, 1]
    assert m.sum() == 2  # two new items: (2, 3) and (3, 2) only
    assert question_mask(torch.tensor([True, True, True]), (0, 2)).sum() == 4  # (0,1) (1,0) (1,2) (2,1)
    assert question_mask(torch.tensor([True, True]), (0, 1)).sum() == 2  # two items: the one pair, asked again
    assert question_mask(torch.tensor([True, False, True]), (0, 1)).sum() == 2  # (1,2) (2,1): item 1 is new
    out = question_mask(torch.tensor([True] * 4), (0, 1), asked=[(2, 3)])
    assert not out[2, 3] and not out[3, 2] and out.sum() == 8  # neither the last pair nor one out to others


def test_a_bad_objective_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="objective: 'ranking' is not one of"):
        DuelingBandit.create(objective="ranking")
    with pytest.raises(ValueError, match="objective: rank reads the learner's estimate.*RandomPair"):
        DuelingBandit.create("RandomPair", objective="rank")


def test_duel_script_runs_the_rank_objective_and_refuses_an_offer_it_would_ignore(capsys):
    duel = load_script("duel")
    assert duel.main(["--simulate", "--objective", "rank", "--questions", "6"]) == 0
    assert "Kendall tau" in capsys.readouterr().out
    assert duel.main(["--simulate", "--objective", "rank", "--offer", "4"]) == 2
    assert "--offer: objective rank chooses the pair among every item" in capsys.readouterr().err


def test_the_server_takes_the_objective_and_refuses_a_database_made_with_another(tmp_path):
    ann = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG, offer=None, objective="rank")
    sid = ann.new_session()
    q = ann.question(sid)
    ann.answer(sid, q["question"], 1)
    assert ann.bandits[SHARED].objective == "rank"
    ann.close()
    with pytest.raises(ValueError, match="--offer: objective rank chooses the pair among every item"):
        Annotation(builtin_catalog(), Store(str(tmp_path / "b.db")), CONFIG, offer=4, objective="rank")
    with pytest.raises(ValueError, match="made with objective = 'rank', this server has 'regret'"):
        Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG, offer=None)


def test_the_ranking_view_matches_a_loop_over_items_and_pairs():
    import math

    import torch

    from nvldb_pl.maths.ranking import ranking_view

    g = torch.Generator().manual_seed(3)
    f = torch.randn(6, generator=g, dtype=torch.float64)
    a = torch.rand(6, 6, generator=g, dtype=torch.float64)
    norm = (a + a.T) * (1 - torch.eye(6, dtype=torch.float64))
    view = ranking_view(f, norm, 2.0, "logistic")
    mean = sum(f.tolist()) / 6
    pairs = []
    for k in range(6):
        w = sum(norm[k, j].item() for j in range(6) if j != k) / 5
        for z, name in (
            (f[k].item() - mean, "vs_average"),
            (f[k].item() - mean - 2 * w, "low"),
            (f[k].item() - mean + 2 * w, "high"),
        ):
            assert math.isclose(view[name][k].item(), 1 / (1 + math.exp(-z)), rel_tol=1e-12)
        for j in range(k + 1, 6):
            pairs.append(0.5 * (1 + math.erf(abs(f[k].item() - f[j].item()) / (2 * norm[k, j].item()) / math.sqrt(2))))
    assert math.isclose(view["settled"], sum(pairs) / len(pairs), rel_tol=1e-12)


def test_bradley_terry_is_the_penalized_likelihoods_maximum_against_a_plain_loop():
    """At the returned strengths the gradient of sum log sigmoid(s_w - s_l) - prior/2 ||s||^2, written out pair by
    pair, is 0; more wins rank higher; an item always winning stays finite; an item never seen stays at the mean."""
    import math

    import numpy as np

    from nvldb_pl.maths.ranking import bradley_terry

    rng = np.random.default_rng(3)
    true = np.array([2.0, 1.0, 0.0, -1.0, 0.5])
    pairs = []
    for _ in range(300):
        a, b = rng.choice(4, size=2, replace=False)  # item 4 never compared
        p = 1 / (1 + math.exp(-(true[a] - true[b])))
        pairs.append((a, b) if rng.random() < p else (b, a))
    pairs += [(0, 3)] * 5
    s = bradley_terry(5, pairs, prior=0.5)
    grad = [-0.5 * s[k] for k in range(5)]
    for w, l_ in pairs:
        g = 1 - 1 / (1 + math.exp(-(s[w] - s[l_])))
        grad[w] += g
        grad[l_] -= g
    assert max(abs(g) for g in grad) < 1e-8
    assert list(np.argsort(-s[:4])) == [0, 1, 2, 3] and np.isfinite(s).all() and s[4] == 0.0
    assert np.isfinite(bradley_terry(2, [(0, 1)] * 50)).all()  # always winning: finite under the prior
    assert bradley_terry(3, []).tolist() == [0.0, 0.0, 0.0]


def test_the_page_never_asks_a_session_one_pair_twice_running_under_either_objective(tmp_path, monkeypatch):
    """objective rank: 30 questions of one session, never the pair just asked, and all 12 items within the first 6;
    objective regret: where the learner's own pick is the pair just asked, another pair is asked and counted."""
    items = builtin_catalog()
    ann = Annotation(items, Store(str(tmp_path / "r.db")), CONFIG, offer=None, objective="rank")
    sid, last, seen = ann.new_session(), None, []
    u = items.raw @ np.array([1.0, -1.0, 0.5, 0.0, 0.2])
    for _ in range(30):
        q = ann.question(sid)
        first, second = items.names.index(q["first"]["name"]), items.names.index(q["second"]["name"])
        assert {first, second} != last
        seen.append({first, second})
        ann.answer(sid, q["question"], 1 if u[first] > u[second] else 2)
        last = {first, second}
    assert set().union(*seen[:6]) == set(range(12))
    ann.close()

    ann = Annotation(items, Store(str(tmp_path / "g.db")), CONFIG, offer=None)
    monkeypatch.setattr(ann, "_select", lambda key, offer: (0, 1))  # a learner stuck on one pair
    sid = ann.new_session()
    q = ann.question(sid)
    assert {q["first"]["name"], q["second"]["name"]} == {items.names[0], items.names[1]}
    ann.answer(sid, q["question"], 1)
    q = ann.question(sid)
    assert {q["first"]["name"], q["second"]["name"]} != {items.names[0], items.names[1]}
    assert ann.repeats_avoided == 1
    ann.close()
