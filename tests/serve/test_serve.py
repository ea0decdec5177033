"""The annotation server (nvldb_pl.serve): items files, answers kept in SQLite, learners restored, the HTTP API."""

import threading

import numpy as np
import pytest

from nvldb_pl.live import DuelingBandit
from nvldb_pl.serve.annotation import SHARED, Annotation, BadRequest
from nvldb_pl.serve.items import FEATURES, builtin_catalog, kendall_tau, read_items
from nvldb_pl.serve.store import Store
from tests.helpers.script_loader import load_script

CONFIG = "configs/live.yaml"
TASTE = load_script("duel").TASTE  # the simulated person's hidden weights per feature


def _annotation(tmp_path, name="a.db", **kw):
    return Annotation(builtin_catalog(), Store(str(tmp_path / name)), CONFIG, **kw)


def _person(q):
    """The simulated person: prefers the item whose raw features score higher under TASTE."""
    f = [np.array([q[s]["features"][k] for k in FEATURES]) @ TASTE for s in ("first", "second")]
    return 1 if f[0] > f[1] else 2


def _answer_n(ann, sid, n):
    for _ in range(n):
        q = ann.question(sid)
        ann.answer(sid, q["question"], _person(q))


# ---------------------------------------------------------------------- items
def test_an_items_file_reads_names_shown_columns_and_features(tmp_path):
    f = tmp_path / "items.csv"
    f.write_text("name,text,image,x,y\nA,first <b>one</b>,http://e/a.png,1,2\nB,,,-1,0.5\nC,third,,0,-3\n")
    c = read_items(str(f))
    assert c.names == ["A", "B", "C"] and c.text == ["first <b>one</b>", "", "third"] and c.features == ["x", "y"]
    assert np.allclose(np.linalg.norm(c.contexts, axis=1), 1.0)
    z = (c.raw - c.raw.mean(0)) / c.raw.std(0)  # standardized over the items, then unit norm, as duel.py does
    assert np.allclose(c.contexts, z / np.linalg.norm(z, axis=1, keepdims=True))


@pytest.mark.parametrize(
    "text, message",
    [
        ("title,x\nA,1\nB,2\n", "line 1: no 'name' column"),
        ("name,x\nA,1\nB\n", "line 3: expected 2 columns, found 1"),
        ("name,x,y\nA,1,2\nB,two,3\n", "line 3, column 'x': not a number: 'two'"),
        ("name,x\nA,1\nB,inf\n", "line 3, column 'x': not finite"),
        ("name,x\nA,1\nA,2\n", "line 3, column 'name': 'A' is already the name"),
        # a name another Unicode spelling (NFD) or an invisible character away from another: two items shown alike
        ("name,x\nCaf\u00e9,1\nCafe\u0301,2\n", "line 3, column 'name': 'Cafe\u0301' looks like line 2's 'Caf\u00e9'"),
        ("name,x\nA,1\nA\u200b,2\nC,3\n", "line 3, column 'name': 'A\\u200b' looks like line 2's 'A'"),
        ("name,x\n\u200b,1\nB,2\n", "line 2, column 'name': empty"),
        ("name,x\n,1\nB,2\n", "line 2, column 'name': empty"),
        ("name,x,y\nA,1,5\nB,2,5\n", "column 'y' has the same value for every item"),
        # a cell of 1e308: the spread overflows (it was inf, and the column became 0 for every item)
        ("name,x,y\nA,1,1e308\nB,2,-1e308\nC,3,0\n", "column 'y': its values (up to 1e+308, item 1) overflow"),
        ("name,x\nA,1\n", "1 item(s); a question needs two"),
        ("name,text\nA,a\nB,b\n", "no feature column"),
    ],
)
def test_a_bad_items_file_is_refused_naming_line_and_column(tmp_path, text, message):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(ValueError) as err:
        read_items(str(f))
    assert message in str(err.value) and str(f) in str(err.value) and "\n" not in str(err.value)


def test_kendall_tau_against_the_pairwise_count():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.integers(0, 5, 9).astype(float), rng.normal(size=9)
        s = sum(np.sign(a[i] - a[j]) * np.sign(b[i] - b[j]) for i in range(9) for j in range(i + 1, 9))
        assert kendall_tau(a, b) == pytest.approx(s / 36)


# ---------------------------------------------------------------------- questions and answers
def test_a_question_stays_until_answered_and_an_answer_is_learned(tmp_path):
    ann = _annotation(tmp_path)
    sid = ann.new_session()
    q = ann.question(sid)
    assert ann.question(sid)["question"] == q["question"]  # a reload shows the same question
    assert q["first"]["name"] != q["second"]["name"]
    r = ann.answer(sid, q["question"], 1)
    assert r["answers"] == 1 and r["learned"] == 1 and r["refused"] is None
    q2 = ann.question(sid)
    assert q2["question"] != q["question"]
    assert ann.answer(sid, q2["question"], 0)["learned"] == 1  # "can't decide": kept, not learned from
    assert ann.store.count_answers() == 2


@pytest.mark.parametrize(
    "case, status, message",
    [
        ("unknown session", 404, "session: not a session of this server"),
        ("never asked", 404, "was never asked"),
        ("answered twice", 409, "already answered"),
        ("another session's", 403, "another session"),
        ("choice 3", 422, "choice: 1 (the first item)"),
        ("choice true", 422, "choice:"),
        ("question text", 422, "question: a question number"),
    ],
)
def test_a_bad_answer_is_refused_and_changes_nothing(tmp_path, case, status, message):
    ann = _annotation(tmp_path)
    sid, other = ann.new_session(), ann.new_session()
    _answer_n(ann, sid, 2)
    q = ann.question(sid)
    args = {
        "unknown session": ("nope", q["question"], 1),
        "never asked": (sid, 999, 1),
        "answered twice": (sid, q["question"] - 1, 1),
        "another session's": (other, q["question"], 1),
        "choice 3": (sid, q["question"], 3),
        "choice true": (sid, q["question"], True),
        "question text": (sid, str(q["question"]), 1),
    }[case]
    before = (
        ann.store.count_answers(),
        ann.bandits[SHARED].num_observed,
        ann.bandits[SHARED].scores(ann.items.contexts),
    )
    with pytest.raises(BadRequest) as err:
        ann.answer(*args)
    assert err.value.status == status and message in str(err.value)
    after = (
        ann.store.count_answers(),
        ann.bandits[SHARED].num_observed,
        ann.bandits[SHARED].scores(ann.items.contexts),
    )
    assert before[:2] == after[:2] and np.array_equal(before[2], after[2])
    assert ann.question(sid)["question"] == q["question"]  # the question is still open


def test_two_sessions_at_once_feed_one_learner(tmp_path):
    ann = _annotation(tmp_path)
    sids = [ann.new_session(), ann.new_session()]
    errors = []

    def work(sid):
        try:
            _answer_n(ann, sid, 8)
        except Exception as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in sids]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert ann.store.count_answers() == 16 and ann.bandits[SHARED].num_observed == 16
    assert {r[1] for r in ann.store.answers()} == set(sids)


def test_one_learner_an_annotator_where_asked(tmp_path):
    ann = _annotation(tmp_path, per_annotator=True)
    a, b = ann.new_session("ann"), ann.new_session("bob")
    _answer_n(ann, a, 3)
    _answer_n(ann, b, 1)
    assert ann.bandits["ann"].num_observed == 3 and ann.bandits["bob"].num_observed == 1
    again = ann.new_session("ann")  # the same annotator in another browser: the same learner
    assert ann.learner_of(again) == "ann"


# ---------------------------------------------------------------------- nothing lost
def _uninterrupted(n, tmp_path):
    ann = _annotation(tmp_path, name="ref.db")
    _answer_n(ann, ann.new_session(), n)
    return ann.bandits[SHARED]


@pytest.mark.parametrize("save_every", [1000, 3])
def test_a_restart_goes_on_from_every_answer_exactly(tmp_path, save_every):
    """Answers after the last save are replayed in order: the learner is the uninterrupted one, bit for bit."""
    ann = _annotation(tmp_path, save_every=save_every)
    sid = ann.new_session()
    _answer_n(ann, sid, 7)
    del ann  # no close(): as a killed server leaves it
    again = _annotation(tmp_path, save_every=save_every)
    assert again.restored == {SHARED: 7 if save_every > 7 else 1}
    ref = _uninterrupted(7, tmp_path)
    b = again.bandits[SHARED]
    assert b.num_observed == 7
    assert np.array_equal(b.scores(again.items.contexts), ref.scores(again.items.contexts))
    _answer_n(again, sid, 1)
    assert again.bandits[SHARED].num_observed == 8


def test_a_damaged_saved_learner_is_not_taken_for_whole(tmp_path):
    ann = _annotation(tmp_path, save_every=2)
    _answer_n(ann, ann.new_session(), 5)
    path = ann.snapshot_path(SHARED)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    again = _annotation(tmp_path, save_every=2)
    assert again.restored == {SHARED: 5}  # from the config, every answer replayed
    ref = _uninterrupted(5, tmp_path)
    assert np.array_equal(again.bandits[SHARED].scores(again.items.contexts), ref.scores(again.items.contexts))


def test_a_database_made_with_other_items_is_refused(tmp_path):
    _annotation(tmp_path)
    items = tmp_path / "items.csv"
    items.write_text("name,x,y\nA,1,0\nB,0,1\nC,1,1\n")
    with pytest.raises(ValueError, match="was made with items_sha256"):
        Annotation(read_items(str(items)), Store(str(tmp_path / "a.db")), CONFIG)
    with pytest.raises(ValueError, match="was made with seed = 0, this server has 1"):
        _annotation(tmp_path, seed=1)


def test_a_foreign_sqlite_file_is_refused(tmp_path):
    import sqlite3

    db = sqlite3.connect(tmp_path / "x.db")
    db.execute("CREATE TABLE songs (title TEXT)")
    db.commit()
    db.close()
    with pytest.raises(ValueError, match="an SQLite file of something else"):
        Store(str(tmp_path / "x.db"))
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(ValueError, match="not a readable database"):
        Store(str(tmp_path / "junk.db"))


def test_a_refused_answer_is_kept_and_the_learner_unchanged(tmp_path, monkeypatch):
    ann = _annotation(tmp_path)
    sid = ann.new_session()
    _answer_n(ann, sid, 2)
    q = ann.question(sid)

    def refuse(*a, **k):
        raise FloatingPointError("model: a non-finite value")

    monkeypatch.setattr(DuelingBandit, "observe", refuse)
    r = ann.answer(sid, q["question"], 1)
    assert r["refused"] == "model: a non-finite value" and r["learned"] == 2 and r["answers"] == 3
    assert ann.store.rows("SELECT learned, refused FROM answers ORDER BY seq DESC LIMIT 1")[0] == (
        0,
        "model: a non-finite value",
    )


def test_undo_takes_the_last_answer_back_exactly_and_keeps_it_as_undone(tmp_path):
    """The learner after an undo is the learner that never took the answer (bit for bit: the next answers give the
    same scores as a run without it), the answer stays in the database as undone, its pair is asked again, a restart
    replays without it; refused where another person's answer came since (one learner for all) or none is left."""
    ann = _annotation(tmp_path, save_every=2)
    sid, other = ann.new_session(), ann.new_session()
    _answer_n(ann, sid, 3)
    ref = _annotation(tmp_path, name="ref.db", save_every=2)
    rsid = ref.new_session()
    _answer_n(ref, rsid, 3)
    q = ann.question(sid)
    ann.answer(sid, q["question"], 1)
    out = ann.undo(sid)
    assert out["yours"] == 3 and ann.store.count_answers() == 3
    again = ann.question(sid)
    assert (again["first"]["name"], again["second"]["name"]) == (q["first"]["name"], q["second"]["name"])
    assert (ann.bandits[SHARED].scores(ann.items.contexts) == ref.bandits[SHARED].scores(ref.items.contexts)).all()
    with pytest.raises(BadRequest, match="undo: the learner has moved on since"):
        _answer_n(ann, other, 1)
        ann.undo(sid)
    ann.store.close()
    restarted = _annotation(tmp_path, save_every=2)
    assert restarted.bandits[SHARED].num_observed == 4  # 3 of sid and 1 of other; the undone one not replayed
    fresh = _annotation(tmp_path, name="empty.db")
    with pytest.raises(BadRequest, match="undo: this session has no answer to take back"):
        fresh.undo(fresh.new_session())


def test_a_goal_ends_a_persons_questions_and_counts_their_own_answers(tmp_path):
    ann = _annotation(tmp_path, questions_per_person=2)
    a, b = ann.new_session(), ann.new_session()
    _answer_n(ann, a, 2)
    assert ann.question(a) == {"done": True, "answers": 2, "learned": 2, "behind": 0, "yours": 2, "goal": 2}
    q = ann.question(b)
    assert q["yours"] == 0 and q["goal"] == 2 and "question" in q
    with pytest.raises(ValueError, match="--questions-per-person: must be an integer >= 1, got 0"):
        _annotation(tmp_path, name="b.db", questions_per_person=0)


def test_the_ranking_view_reads_as_probabilities_with_bands_counts_and_the_learners_own_settledness(tmp_path):
    """vs_average is g(f_k - mean f) (checked against the scores), inside its band; compared counts the learned
    answers an item was in (checked against the database); settled is a share of pairs in [0.5, 1]; the settle
    chart is each answer's tau."""
    ann = _annotation(tmp_path)
    sid = ann.new_session()
    _answer_n(ann, sid, 8)
    view = ann.ranking()
    f = np.array([r["score"] for r in view["ranking"]])
    p = np.array([r["vs_average"] for r in view["ranking"]])
    assert np.allclose(p, 1 / (1 + np.exp(-(f - f.mean()))), atol=1e-6)  # the logistic link of configs/live.yaml
    assert all(r["low"] <= r["vs_average"] <= r["high"] for r in view["ranking"])
    assert sum(r["compared"] for r in view["ranking"]) == 2 * 8
    assert 0.5 <= view["settled"] <= 1 and len(view["settle"]) == 8
