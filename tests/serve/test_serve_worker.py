"""The page's learner in a process of its own (background): a reply waits for no learning, the answers are learned in
the order they were committed (the learner equals a full replay), a learner that lags far behind holds the replies,
first come first served, undo goes through the process, and a process that fails or is killed keeps every answer for
a restart."""

import os
import signal
import sqlite3
import time
import types

import numpy as np
import pytest

from nvldb_pl.live import DuelingBandit
from nvldb_pl.serve.annotation import SHARED, Annotation, BadRequest
from nvldb_pl.serve.items import builtin_catalog
from nvldb_pl.serve.store import Store
from nvldb_pl.serve.worker import LearnerProcess
from tests.serve.test_serve import CONFIG, _person


def _config(tmp_path, network: str) -> str:
    """configs/live.yaml with a network of tests/helpers/networks.py (the learning process imports it by path)."""
    path = tmp_path / f"{network}.yaml"
    text = open(CONFIG).read().replace("model:\n", f"model:\n  network: {{module: tests.helpers.networks.{network}}}\n")
    path.write_text(text)
    return str(path)


def _background(tmp_path, config=CONFIG, **kw):
    return Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), config, background=True, **kw)


def test_a_reply_waits_for_no_learning_and_the_learner_equals_a_full_replay(tmp_path):
    config = _config(tmp_path, "SlowMLP")  # a learning step of tens of milliseconds
    ann = _background(tmp_path, config, most_behind=100)
    sids = [ann.new_session() for _ in range(3)]
    replies = []
    for n in range(12):
        sid = sids[n % 3]
        q = ann.question(sid)
        start = time.perf_counter()
        out = ann.answer(sid, q["question"], _person(q))
        replies.append(time.perf_counter() - start)
    assert max(replies) < 0.05 and out["behind"] > 0  # no reply waited for a learning step
    assert ann.worker.drain(timeout=60) and ann.bandits[SHARED].num_observed == 12  # published: the server's copy
    # the answers that waited were taken in batches: the steps once a batch, after its last answer
    train = [t for *_, t in ann.store.rows("SELECT seq, train FROM answers ORDER BY seq")]
    assert 0 in train and train[-1] == 1 and None not in train
    assert ann.worker.process.pid != os.getpid() and ann.worker.process.is_alive()
    scores = ann.bandits[SHARED].scores(ann.items.contexts)
    ann.close()
    assert ann.worker.process.exitcode == 0
    ann.store.close()
    replayed = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), config, save_every=10**6)
    assert replayed.restored == {SHARED: 0}  # the close saved all 12: taken from the file
    assert np.array_equal(replayed.bandits[SHARED].scores(replayed.items.contexts), scores)
    (tmp_path / "a.db.learner.pt").unlink()
    replayed.store.close()
    again = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), config)
    assert again.restored == {SHARED: 12}  # every answer replayed, in order
    assert np.array_equal(again.bandits[SHARED].scores(again.items.contexts), scores)


def test_a_learner_that_lags_far_behind_holds_the_reply_until_it_catches_up(tmp_path):
    ann = _background(tmp_path, _config(tmp_path, "SlowMLP"), most_behind=1)
    sid = ann.new_session()
    for _ in range(4):
        q = ann.question(sid)
        assert ann.answer(sid, q["question"], _person(q))["behind"] <= 1
    ann.close()


def test_undo_goes_through_the_learning_process(tmp_path):
    """The learner after an undo is the one that never took the answer, in the process and in the server's copy."""
    ann = _background(tmp_path)
    sid = ann.new_session()
    for _ in range(3):
        q = ann.question(sid)
        ann.answer(sid, q["question"], _person(q))
    ann.worker.drain(timeout=60)
    ref = DuelingBandit.from_config(CONFIG, dim=ann.items.contexts.shape[1], seed=0, standardize=False)  # as served
    for _, offer, i, j, choice, _, train in ann.store.to_learn(SHARED)[:2]:  # the first two answers, as taken
        ref.observe(ann.items.contexts[offer], i, j, int(choice == 1), train=train)
    two = ref.scores(ann.items.contexts)
    assert ann.undo(sid)["undone"] == 3
    assert ann.bandits[SHARED].num_observed == 2
    assert np.array_equal(ann.bandits[SHARED].scores(ann.items.contexts), two)
    with pytest.raises(BadRequest, match="the learner has moved on"):
        ann.undo(sid)  # answer 2's learner state went with the first undo
    ann.close()
    ann.store.close()
    again = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG)
    assert again.restored == {SHARED: 0}  # the process saved the learner without the answer taken back
    assert np.array_equal(again.bandits[SHARED].scores(again.items.contexts), two)


def test_a_learner_that_fails_keeps_every_answer_for_a_restart(tmp_path):
    ann = _background(tmp_path, _config(tmp_path, "FailingMLP"))
    sid = ann.new_session()
    for _ in range(3):
        q = ann.question(sid)
        ann.answer(sid, q["question"], _person(q))
    assert ann.worker.drain(timeout=60)
    assert ann.worker.failed == "RuntimeError: out of memory" and ann.store.count_answers() == 3
    q = ann.question(sid)
    assert ann.answer(sid, q["question"], 2)["answer"] == 4  # still kept, learned by no one
    ann.close()
    assert ann.store.rows("SELECT COUNT(*) FROM answers WHERE learned IS NULL")[0][0] >= 2


def test_a_killed_learning_process_is_said_and_a_restart_learns_every_answer(tmp_path):
    ann = _background(tmp_path)
    sid = ann.new_session()
    os.kill(ann.worker.process.pid, signal.SIGKILL)
    ann.worker.process.join(timeout=30)
    for _ in range(3):
        q = ann.question(sid)
        ann.answer(sid, q["question"], _person(q))
    assert ann.worker.drain(timeout=30) and "the learning process ended (exit code -9)" in ann.worker.failed
    assert ann.store.count_answers() == 3
    ann.close()
    ann.store.close()
    again = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG)
    assert again.restored == {SHARED: 3} and again.bandits[SHARED].num_observed == 3


def test_a_stopped_learning_process_neither_holds_an_undo_nor_the_servers_stop(tmp_path, capsys):
    """With the learning process stopped (SIGSTOP), an undo hung, and so did the server's stop. Now the undo is a 503
    that says so after stall_seconds, and the stop ends the process after stall_seconds without learning, said on
    stderr; every answer is kept and a restart learns them."""
    import time

    from nvldb_pl.serve.annotation import BadRequest

    ann = _background(tmp_path, stall_seconds=1.0)
    sid = ann.new_session()
    q = ann.question(sid)
    ann.answer(sid, q["question"], _person(q))
    assert ann.worker.drain(timeout=60)
    os.kill(ann.worker.process.pid, signal.SIGSTOP)
    for _ in range(2):
        q = ann.question(sid)
        ann.answer(sid, q["question"], _person(q))
    start = time.monotonic()
    with pytest.raises(BadRequest, match="undo: the learner has learned nothing for 1 s"):
        ann.undo(sid)
    ann.close()
    assert time.monotonic() - start < 30
    assert "the learning process learned nothing for 1 s while stopping; ended" in capsys.readouterr().err
    assert ann.store.count_answers() == 3
    ann.store.close()
    again = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG)
    assert again.bandits[SHARED].num_observed == 3


def test_most_behind_is_checked():
    with pytest.raises(ValueError, match="--most-behind: must be an integer >= 0, got -1"):
        Annotation(builtin_catalog(), Store(":memory:"), CONFIG, most_behind=-1)


def test_questions_asked_before_a_learning_step_go_to_different_pairs(tmp_path):
    """Objective rank asks the most informative pair of every item under the answers' posterior: one pair for
    everyone until answers come, unless a pair out to someone and not answered yet is not asked again."""
    ann = _background(tmp_path, objective="rank", offer=None)
    pairs = []
    for _ in range(3):
        q = ann.question(ann.new_session())
        pairs.append(frozenset((q["first"]["name"], q["second"]["name"])))
    assert len(set(pairs)) == 3
    # no learner holds a made-up answer (the questions read the store's answers; no learner is published yet)
    assert SHARED not in ann.bandits or ann.bandits[SHARED].num_observed == 0
    ann.close()


def test_a_file_ahead_of_the_records_gives_each_answer_the_steps_it_was_taken_with(tmp_path):
    """A server killed after the learning process saved its file and before the reports reached the database: the
    restart reads from the file which answers waited for the steps, records it, and a replay from the database
    alone then rebuilds the same learner."""
    ann = _background(tmp_path, _config(tmp_path, "SlowMLP"), most_behind=100)
    sids = [ann.new_session() for _ in range(3)]
    for n in range(12):
        q = ann.question(sids[n % 3])
        ann.answer(sids[n % 3], q["question"], _person(q))
    ann.close()  # the file saved with all 12
    scores = ann.bandits[SHARED].scores(ann.items.contexts)
    ann.store.close()
    db = sqlite3.connect(tmp_path / "a.db")
    waited = [s for (s,) in db.execute("SELECT seq FROM answers WHERE train = 0")]
    assert waited
    db.execute("UPDATE answers SET learned = NULL, train = NULL")  # the reports never came
    db.commit()
    db.close()
    config = _config(tmp_path, "SlowMLP")
    again = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), config)
    assert again.restored == {SHARED: 0}
    assert [s for (s,) in again.store.rows("SELECT seq FROM answers WHERE train = 0")] == waited
    again.store.close()
    (tmp_path / "a.db.learner.pt").unlink()
    replayed = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), config)
    assert replayed.restored == {SHARED: 12}
    assert np.array_equal(replayed.bandits[SHARED].scores(replayed.items.contexts), scores)


def test_a_stopped_learning_process_holds_one_reply_for_its_stall_time_and_no_reply_after(tmp_path, capsys):
    """A stopped (SIGSTOP) learner blocked every reply after ``most_behind`` answers, with no timeout. Now the first
    reply that waits gives up after ``stall_seconds``, says so once, and the replies after it do not wait; the counts
    say ``stalled`` until it learns again (SIGCONT), and every answer is learned then."""
    ann = _background(tmp_path, most_behind=2, stall_seconds=1.0)
    sid = ann.new_session()
    os.kill(ann.worker.process.pid, signal.SIGSTOP)
    try:
        waits = []
        for _ in range(8):
            q = ann.question(sid)
            start = time.perf_counter()
            reply = ann.answer(sid, q["question"], _person(q))
            waits.append(time.perf_counter() - start)
        assert reply["stalled"] is True and reply["failed"] is None and reply["behind"] == 8
        assert max(waits) < 5 and sum(w > 0.9 for w in waits) == 1, waits  # one reply waited its second, no other
        assert capsys.readouterr().err.count("learned nothing for 1 s") == 1
    finally:
        os.kill(ann.worker.process.pid, signal.SIGCONT)
    assert ann.worker.drain(timeout=60) and not ann.worker.stalled
    q = ann.question(sid)
    reply = ann.answer(sid, q["question"], _person(q))
    assert reply["stalled"] is False and ann.store.count_answers() == 9
    ann.close()


def test_a_killed_learning_process_is_said_in_the_counts_not_as_answers_behind(tmp_path):
    """A killed learner left "the learner is 11 behind" on the page for ever: the counts now say it failed."""
    ann = _background(tmp_path)
    sid = ann.new_session()
    os.kill(ann.worker.process.pid, signal.SIGKILL)
    ann.worker.process.join(timeout=30)
    assert ann.worker.drain(timeout=30)
    q = ann.question(sid)
    reply = ann.answer(sid, q["question"], _person(q))
    assert "the learning process ended" in reply["failed"] and reply["stalled"] is False
    ann.close()


def test_a_record_that_fails_stops_the_learner_said_and_a_stop_does_not_hang(tmp_path, capsys):
    """A full disk killed the thread that records what the learner learned: learned stayed at 1, ``failed`` null,
    and SIGTERM (the server's stop) then hung waiting for it. Now the failure is ``failed``, said on stderr, and the
    stop returns."""
    ann = _background(tmp_path)
    sid = ann.new_session()

    def full(*args):
        raise OSError(28, "No space left on device")

    ann.store.learned = ann.store.learned_all = full  # a batch's learned answers: learned_all
    q = ann.question(sid)
    ann.answer(sid, q["question"], _person(q))
    assert ann.worker.drain(timeout=60)
    assert "recording what it learned failed (OSError" in ann.worker.failed
    assert "error: recording what it learned failed" in capsys.readouterr().err
    q = ann.question(sid)
    assert "recording what it learned failed" in ann.answer(sid, q["question"], _person(q))["failed"]
    start = time.perf_counter()
    ann.close()
    assert time.perf_counter() - start < 30


def test_the_exit_code_is_awaited_when_another_thread_reaped_the_process():
    """Two threads joined the killed process (the receiver and the caller): the one that lost the race to reap it
    returned from join with ``exitcode`` still None, and the page said "exit code None". The code is now polled."""

    class Reaped:  # a process another thread reaps: exitcode None for the first reads after join
        reads = 0

        def join(self, timeout=None):
            pass

        @property
        def exitcode(self):
            self.reads += 1
            return -9 if self.reads > 3 else None

    stub = types.SimpleNamespace(process=Reaped())
    assert LearnerProcess._exit_code(stub, seconds=5.0) == -9


def test_a_spoilt_asking_copy_is_replaced_and_the_question_still_asked(tmp_path, monkeypatch):
    """The page adds each question's pair to its asking copy in place; where that copy is refused (left non-finite),
    the question is still asked, and the next ones come from the learner as last published."""
    ann = _background(tmp_path)
    sid = ann.new_session()
    ann.question(sid)  # the asking copy is made
    spoilt = ann.worker.asking[SHARED]

    def refuse(self, contexts, i, j, in_place=False):
        raise ValueError("contexts: this pending question left the learner non-finite (a test)")

    monkeypatch.setattr(DuelingBandit, "pending", refuse)
    other = ann.new_session()
    q = ann.question(other)
    assert q["question"] > 0 and q["first"]["index"] != q["second"]["index"]
    assert ann.worker.asking[SHARED] is not spoilt
    ann.close()


def test_the_counts_a_reply_gives_equal_the_database_after_answers_an_undo_and_a_restart(tmp_path):
    """The kept answers (all, and a session's) are counted once and then kept in step, not counted each reply: they
    must still equal a count of the database's rows after answers, an undo, and a new Store on the same file."""
    ann = _background(tmp_path)
    sids = [ann.new_session() for _ in range(2)]
    for n in range(7):
        q = ann.question(sids[n % 2])
        ann.answer(sids[n % 2], q["question"], _person(q))
    ann.undo(sids[0])

    def truth(sid=None):
        where = "" if sid is None else f" AND session = '{sid}'"
        return ann.store.rows(f"SELECT COUNT(*) FROM answers WHERE undone IS NULL{where}")[0][0]

    assert ann.store.count_answers() == truth() == 6
    assert [ann.store.count_answers(s) for s in sids] == [truth(s) for s in sids] == [3, 3]
    q = ann.question(sids[0])
    reply = ann.answer(sids[0], q["question"], _person(q))
    assert (reply["answers"], reply["yours"]) == (truth(), truth(sids[0])) == (7, 4)
    assert ann.store.last_question() == ann.store.rows("SELECT MAX(id) FROM questions")[0][0]
    ann.close()
    again = Store(str(tmp_path / "a.db"))
    assert (again.count_answers(), again.count_answers(sids[1])) == (7, 3)
    again.close()


def test_a_sessions_question_and_answers_are_found_by_index_not_by_reading_every_row(tmp_path):
    """Each reply looks up the session's open question and counts its answers: with many sessions these read every
    row of the tables unless an index serves them (SQLite's plan names it)."""
    store = Store(str(tmp_path / "a.db"))
    store.claim({})

    def plan(sql):
        return " ".join(str(r[-1]) for r in store.rows("EXPLAIN QUERY PLAN " + sql, ("x",)))

    assert "questions_of_session" in plan(
        "SELECT q.id FROM questions q LEFT JOIN answers a ON a.question = q.id "
        "WHERE q.session = ? AND a.seq IS NULL ORDER BY q.id DESC LIMIT 1"
    )
    assert "answers_of_session" in plan("SELECT COUNT(*) FROM answers WHERE session = ? AND undone IS NULL")
    store.close()


def test_a_batchs_learned_reports_are_one_record_in_order_among_the_others():
    """The learning process sends a batch's reports in one message; the server records each run of learned answers
    in one transaction (``learned_all``) and the others one by one, in the order they came."""
    calls = []
    fake = LearnerProcess.__new__(LearnerProcess)
    fake.record = lambda kind, *args: calls.append((kind, args))
    reports = [
        ("learned", 1, "k", 1, 0.5, True),
        ("learned", 2, "k", 2, None, False),
        ("refused", 3, "why"),
        ("learned", 4, "k", 3, 0.7, True),
        ("saved", "k", 3, "sha", "path"),
    ]
    fake._record_reports(reports)
    assert calls == [
        ("learned_all", ([(1, "k", 1, 0.5, True), (2, "k", 2, None, False)],)),
        ("refused", (3, "why")),
        ("learned_all", ([(4, "k", 3, 0.7, True)],)),
        ("saved", ("k", 3, "sha", "path")),
    ]


def test_a_rank_question_waits_for_no_taste_fit_in_progress_and_is_chosen_from_the_last_one(tmp_path):
    """(background, objective rank) While another request holds the taste fit, a question is asked at once from the
    posterior fitted last, never a pair out to someone else; once the fit is let go, the next fit covers every answer."""
    import threading

    ann = _background(tmp_path, objective="rank", offer=None)
    sids = [ann.new_session() for _ in range(3)]
    for n in range(6):
        q = ann.question(sids[n % 3])
        ann.answer(sids[n % 3], q["question"], _person(q))
    rows_fitted, _ = ann._fitted[SHARED]
    held, release = threading.Event(), threading.Event()

    def fit_in_progress():
        with ann._fitting:
            held.set()
            release.wait(30)

    t = threading.Thread(target=fit_in_progress)
    t.start()
    held.wait(10)
    try:
        start = time.perf_counter()
        asked = [ann.question(sid) for sid in sids]
        assert time.perf_counter() - start < 5  # no wait for the fit held (released after 30 s)
        assert ann._fitted[SHARED][0] is rows_fitted  # chosen from the fit before; none made meanwhile
        pairs = [frozenset((q["first"]["index"], q["second"]["index"])) for q in asked]
        assert len(set(pairs)) == 3  # each a pair not out to another session
    finally:
        release.set()
        t.join()
    for sid, q in zip(sids, asked):
        ann.answer(sid, q["question"], _person(q))
    ann.question(sids[0])
    assert len(ann._fitted[SHARED][0]) == len(ann.store.to_learn(SHARED))  # the next fit: every answer learned
    ann.close()
