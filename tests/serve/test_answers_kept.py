"""No answer a person gave is lost (issue "No run under another's name", family 3): the terminal session's
journal, Ctrl-C while the learner updates, an answer that would leave the learner non-finite."""

import io
import os
import signal

import numpy as np
import pytest

from nvldb_pl.live import DuelingBandit
from tests.helpers.script_loader import load_script

duel = load_script("duel")


def _run(argv):
    out = io.StringIO()
    return duel.main(argv, stdin=io.StringIO(""), out=out), out.getvalue()


def _bandit(n=5):
    b = DuelingBandit.from_config("configs/live.yaml", dim=5)
    x = np.random.default_rng(0).normal(size=(4, 5))
    for _ in range(n):
        i, j = b.select(x)
        b.observe(x, i, j, 1)
    return b, x


def test_every_answer_is_journaled_and_gives_the_same_learner_again(tmp_path):
    saved = str(tmp_path / "me.pt")
    code, _ = _run(["--simulate", "--questions", "6", "--save", saved])
    assert code == 0
    lines = open(saved + ".answers").read().splitlines()
    assert lines[0].startswith("# scripts/duel.py --seed 0") and lines[1].startswith("# session: {")
    assert len(lines) == 8 and set(lines[2:]) <= {"1", "2"}
    again = str(tmp_path / "again.pt")
    assert _run(["--answers", saved + ".answers", "--questions", "6", "--save", again])[0] == 0
    _, _, contexts = duel.catalog()
    a, b = DuelingBandit.from_checkpoint(saved), DuelingBandit.from_checkpoint(again)
    assert a.num_observed == b.num_observed == 6
    assert np.array_equal(a.scores(contexts), b.scores(contexts))


def test_ctrl_c_while_the_learner_updates_stops_after_that_answer_and_keeps_all(tmp_path, monkeypatch):
    learned = []
    observe = DuelingBandit.observe

    def interrupted_on_the_third(self, *args):
        if len(learned) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives in the middle of the update
        observe(self, *args)
        learned.append(1)

    monkeypatch.setattr(DuelingBandit, "observe", interrupted_on_the_third)
    saved = str(tmp_path / "me.pt")
    code, text = _run(["--simulate", "--questions", "10", "--save", saved])
    assert code == 0 and "interrupted" in text and "Learned ranking after 3 answers" in text
    assert f"saved the learner to {saved}" in text
    assert DuelingBandit.from_checkpoint(saved).num_observed == 3
    assert len(open(saved + ".answers").read().splitlines()) == 2 + 3  # the header, its settings, the answers


def test_an_interrupt_inside_an_update_leaves_the_learner_as_before(monkeypatch):
    b, x = _bandit()
    before = b.scores(x)
    learn = type(b.learner).learn

    def half_then_interrupt(self, batch):
        learn(self, batch)  # the update done, then the interrupt before observe returns
        raise KeyboardInterrupt

    monkeypatch.setattr(type(b.learner), "learn", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        b.observe(x, 0, 1, 1)
    assert b.num_observed == 5 and np.array_equal(b.scores(x), before)


def test_an_answer_that_would_make_the_learner_non_finite_is_refused_before_it_changes_anything(tmp_path):
    b, x = _bandit()
    before = b.scores(x)
    with pytest.raises(ValueError, match="would leave the learner non-finite.*nothing was recorded"):
        b.observe(x * 1e10, 0, 1, 1)  # finite, so it passes the context check
    assert b.num_observed == 5 and np.array_equal(b.scores(x), before)
    i, j = b.select(x)  # the learner goes on
    b.observe(x, i, j, 0)
    b.save(str(tmp_path / "b.pt"))
    assert DuelingBandit.from_checkpoint(str(tmp_path / "b.pt")).num_observed == 6
