"""The page's learner in a thread of its own (background): a reply waits for no learning, the answers are learned in
the order they were committed (the learner equals a full replay), a learner that lags far behind holds the replies,
and a learner that fails keeps every answer for a restart."""

import time

import numpy as np
import pytest

from nvldb_pl.live import DuelingBandit
from nvldb_pl.serve.annotation import SHARED, Annotation
from nvldb_pl.serve.items import builtin_catalog
from nvldb_pl.serve.store import Store
from tests.serve.test_serve import CONFIG, _person


def _background(tmp_path, **kw):
    return Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG, background=True, **kw)


def _slowly(monkeypatch, seconds):
    observe = DuelingBandit.observe

    def slow(self, *args, **kwargs):
        time.sleep(seconds)
        return observe(self, *args, **kwargs)

    monkeypatch.setattr(DuelingBandit, "observe", slow)


def test_a_reply_waits_for_no_learning_and_the_learner_equals_a_full_replay(tmp_path, monkeypatch):
    _slowly(monkeypatch, 0.05)
    ann = _background(tmp_path, most_behind=100)
    sids = [ann.new_session() for _ in range(3)]
    replies = []
    for n in range(12):
        sid = sids[n % 3]
        q = ann.question(sid)
        start = time.perf_counter()
        out = ann.answer(sid, q["question"], _person(q))
        replies.append(time.perf_counter() - start)
    assert max(replies) < 0.05 and out["behind"] > 0  # no reply waited for a learning step (each takes 50 ms)
    assert ann.queue.drain(timeout=30) and ann.bandits[SHARED].num_observed == 12
    scores = ann.bandits[SHARED].scores(ann.items.contexts)
    ann.close()
    ann.store.close()
    monkeypatch.undo()
    replayed = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG, save_every=10**6)
    assert replayed.restored == {SHARED: 0}  # the close saved all 12: taken from the file
    (tmp_path / "a.db.learner.pt").unlink()
    replayed.store.close()
    again = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG)
    assert again.restored == {SHARED: 12}  # every answer replayed, in order
    assert np.array_equal(again.bandits[SHARED].scores(again.items.contexts), scores)


def test_a_learner_that_lags_far_behind_holds_the_reply_until_it_catches_up(tmp_path, monkeypatch):
    _slowly(monkeypatch, 0.05)
    ann = _background(tmp_path, most_behind=1)
    sid = ann.new_session()
    for _ in range(6):
        q = ann.question(sid)
        assert ann.answer(sid, q["question"], _person(q))["behind"] <= 1
    ann.close()


def test_a_learner_that_fails_keeps_every_answer_for_a_restart(tmp_path, monkeypatch):
    ann = _background(tmp_path)
    sid = ann.new_session()
    q = ann.question(sid)

    def broken(self, *args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(DuelingBandit, "observe", broken)
    ann.answer(sid, q["question"], 1)
    ann.queue.drain(timeout=30)
    assert ann.queue.failed == "RuntimeError: out of memory" and ann.store.count_answers() == 1
    monkeypatch.undo()
    ann.store.close()
    again = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG)
    assert again.restored == {SHARED: 1} and again.bandits[SHARED].num_observed == 1


def test_most_behind_is_checked():
    with pytest.raises(ValueError, match="--most-behind: must be an integer >= 0, got -1"):
        Annotation(builtin_catalog(), Store(":memory:"), CONFIG, most_behind=-1)
