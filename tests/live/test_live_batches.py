"""Answers taken in a batch (``observe(..., train=False)``: the steps wait for the batch's last answer) and questions
asked before their answers come (``pending``): what each changes, and that the same answers with the same ``train``
give the same learner bit for bit."""

import copy
import os

import numpy as np
import pytest
import torch

from nvldb_pl.live import DuelingBandit

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
LIVE = os.path.join(ROOT, "configs", "live.yaml")


def _answers(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, 5))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    out = []
    for _ in range(n):
        i, j = rng.choice(6, 2, replace=False)
        out.append((x, int(i), int(j), int(rng.integers(2))))
    return x, out


def _learned(flags, objective="regret") -> DuelingBandit:
    b = DuelingBandit.from_config(LIVE, dim=5, seed=3, objective=objective)
    for (x, i, j, o), train in zip(_answers(len(flags))[1], flags):
        b.observe(x, i, j, o, train=train)
    return b


def _state(b: DuelingBandit) -> dict:
    return {k: v.clone() for k, v in b.learner.state_dict().items() if torch.is_tensor(v)}


def test_an_answer_taken_without_the_steps_joins_v_and_leaves_the_network_and_theta():
    x, _ = _answers(0)
    before = _learned([True] * 4)
    after = copy.deepcopy(before)
    after.observe(*_answers(5)[1][4], train=False)
    assert after.num_observed == 5
    assert np.array_equal(after.scores(x), before.scores(x))  # the network and theta as they were
    assert not torch.equal(after.learner.V, before.learner.V)  # V gained the duel
    trained = copy.deepcopy(before)
    trained.observe(*_answers(5)[1][4])
    assert not np.array_equal(trained.scores(x), before.scores(x))


def test_the_same_answers_with_the_same_train_give_the_same_learner_and_other_train_another():
    flags = [True, False, False, True, False, True, True, False, True]
    one, two = _learned(flags), _learned(flags)
    a, b = _state(one), _state(two)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    every = _state(_learned([True] * len(flags)))
    assert any(not torch.equal(a[k], every[k]) for k in a if a[k].is_floating_point())


def test_train_must_be_a_bool():
    b = DuelingBandit.from_config(LIVE, dim=5, seed=0)
    x, i, j, o = _answers(1)[1][0]
    with pytest.raises(ValueError, match="^train: must be True or False, got 1$"):
        b.observe(x, i, j, o, train=1)
    assert b.num_observed == 0


def test_a_pending_question_narrows_its_pair_until_the_next_pair_is_elsewhere_and_touches_no_other_copy():
    """Objective rank picks the most informative pair, the same one until V changes. A pending question joins the
    asking copy's V: the asked pair's width shrinks at every pending question (V gains its duel's term), so, pending
    again and again, the pair asked moves elsewhere; one pending question need not move it (the learner may still
    find that pair the most open: on one CPU it does, on another not), so the test does not ask that. The learner
    the copy was made from is as it was."""
    b = _learned([True] * 6, objective="rank")
    x, _ = _answers(0)
    V = b.learner.V.clone()
    asking = copy.deepcopy(b)
    first = asking.select(x)
    assert copy.deepcopy(b).select(x) == first  # without pending: the same pair again
    X = torch.as_tensor(x).unsqueeze(0)
    widths = [float(asking.learner.estimate(X).norm[0, first[0], first[1]])]
    pair = first
    for _ in range(10):
        asking.pending(x, *pair)
        widths.append(float(asking.learner.estimate(X).norm[0, first[0], first[1]]))
        pair = asking.select(x)
        if pair != first:
            break
    assert pair != first, f"ten pending questions of {first} and it is still the pair asked: widths {widths}"
    assert all(after < before for before, after in zip(widths, widths[1:])), widths
    assert b.num_observed == 6 and np.array_equal(b.scores(x), asking.scores(x))
    assert torch.equal(b.learner.V, V) and not torch.equal(asking.learner.V, V)


def test_a_learner_that_cannot_put_off_its_steps_ignores_pending():
    config = {"data": {"dim": 5, "rounds": 50}, "model": {"class_path": "nvldb_pl.learners.linear.CoLSTIM"}}
    b = DuelingBandit.from_config(config, seed=0)
    assert not type(b.learner).DEFERS_TRAINING
    x, _ = _answers(0)
    b.pending(x, 0, 1)
    assert b.num_observed == 0


def test_pending_in_place_gives_the_learner_a_copying_pending_gives_bit_for_bit():
    """``pending(..., in_place=True)`` (the page's throwaway copy: no deepcopy, no probe) leaves the bandit's learner
    as the copying ``pending`` makes it: the same V and history, the same pairs asked next."""
    b = _learned([True] * 6)
    x, _ = _answers(0)
    copying, in_place = copy.deepcopy(b), copy.deepcopy(b)
    for _ in range(5):
        pair = copying.select(x)
        assert in_place.select(x) == pair
        copying.pending(x, *pair)
        in_place.pending(x, *pair, in_place=True)
        assert torch.equal(copying.learner.V, in_place.learner.V)
    state, other = copying.learner.state_dict(), in_place.learner.state_dict()
    assert state.keys() == other.keys() and all(torch.equal(state[k], other[k]) for k in state)
    assert not torch.equal(b.learner.V, in_place.learner.V)  # it did change that copy


def test_pending_in_place_refuses_a_learner_it_left_non_finite():
    b = _learned([True] * 6)
    x, _ = _answers(0)
    b.learner.V.fill_(float("nan"))  # a spoilt copy: the next duel's term leaves it non-finite
    with pytest.raises(ValueError, match="this pending question left the learner non-finite"):
        b.pending(x, 0, 1, in_place=True)
