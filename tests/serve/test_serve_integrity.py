"""One server a database, and a damaged or inconsistent database refused at start in one line, every file beside it
left as it was (issue "The page, ready for a real study")."""

import hashlib
import os
import re
import sqlite3

import pytest

from nvldb_pl.serve.annotation import Annotation
from nvldb_pl.serve.items import builtin_catalog
from nvldb_pl.serve.store import Store
from tests.serve.test_serve import CONFIG, _answer_n


def _study(tmp_path, answers=12):
    """A study of ``answers`` answers, its learner saved (save_every 5, then at close), the server stopped."""
    db = str(tmp_path / "a.db")
    ann = Annotation(builtin_catalog(), Store(db), CONFIG, save_every=5)
    _answer_n(ann, ann.new_session(), answers)
    ann.close()
    ann.store.close()
    return db


def _files(db):
    """sha256 of the database and every learner file beside it (not SQLite's -wal/-shm, made while it is open)."""
    folder = os.path.dirname(db)
    names = sorted(
        f
        for f in os.listdir(folder)
        if f.startswith(os.path.basename(db)) and not f.endswith(("-wal", "-shm", ".lock"))
    )
    return {f: hashlib.sha256(open(os.path.join(folder, f), "rb").read()).hexdigest() for f in names}


def _refused(db, match):
    before = _files(db)
    with pytest.raises(ValueError, match=match) as err:
        store = Store(db)
        try:
            Annotation(builtin_catalog(), store, CONFIG, save_every=5)
        finally:
            store.close()
    assert "\n" not in str(err.value) and str(err.value).startswith(f"--db: {db}")
    assert _files(db) == before  # nothing read-write touched, nothing overwritten
    return str(err.value)


def test_a_page_of_garbage_is_refused(tmp_path):
    db = _study(tmp_path)
    with sqlite3.connect(db) as con:
        page = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'answers'").fetchone()[0]
    con.close()
    with open(db, "r+b") as fh:  # the answers' table page, every byte of it garbage
        fh.seek((page - 1) * 4096)
        fh.write(os.urandom(4096))
    _refused(db, r"(is damaged \(SQLite's integrity check|is not a readable database)")


def test_an_empty_database_file_is_refused_and_the_learner_beside_it_kept(tmp_path):
    db = _study(tmp_path)
    open(db, "wb").close()  # 0 bytes, the learner file of 12 answers beside it
    for f in os.listdir(tmp_path):
        if f.endswith(("-wal", "-shm")):
            os.remove(tmp_path / f)
    _refused(db, "is an empty file \\(0 bytes\\), not a database this server made")


def test_a_database_that_lost_acknowledged_answers_is_refused_against_its_learner_file(tmp_path):
    """As after WAL damage: the learner file holds answers up to #12, the database only to #9."""
    db = _study(tmp_path)
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM answers WHERE seq > 9")
    message = _refused(db, r"holds answers up to #9, but #12 was acknowledged \(.*a.db.acked\)")
    assert "has lost acknowledged answers" in message
    os.remove(db + ".acked")  # without that record, the learner file says as much
    _refused(db, "holds answers up to #12, and the database's last answer of that learner is #9")


def test_a_learner_file_of_other_answers_is_refused(tmp_path):
    db = _study(tmp_path)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE answers SET choice = 3 - choice WHERE seq = 4")
    _refused(db, "holds other answers than the database up to #12")


def test_a_learner_file_without_its_database_is_refused(tmp_path):
    db = _study(tmp_path)
    for f in os.listdir(tmp_path):
        if re.fullmatch(r"a\.db(-wal|-shm)?", f):
            os.remove(tmp_path / f)
    beside = _files(db)
    with pytest.raises(
        ValueError, match=r"a.db does not exist, but .*a.db.acked says answers up to #12 were acknowledged"
    ):
        Store(db)
    assert _files(db) == beside and not os.path.exists(db)
    os.remove(db + ".acked")
    learner_files = _files(db)
    with pytest.raises(ValueError, match="the database's last answer of that learner is none"):
        Annotation(builtin_catalog(), Store(db), CONFIG)
    assert {f: h for f, h in _files(db).items() if f != "a.db"} == learner_files


def test_a_consistent_restart_goes_on_from_the_file_and_the_answers_after_it(tmp_path):
    """The check does not refuse the ordinary case: 12 answers, the file saved at 10 (save_every 5), killed before
    the close's save: the restart takes the file and replays the answers after #10."""
    db = str(tmp_path / "a.db")
    ann = Annotation(builtin_catalog(), Store(db), CONFIG, save_every=5)
    _answer_n(ann, ann.new_session(), 12)
    scores = ann.bandits["shared"].scores(ann.items.contexts)
    ann.store.close()  # no close(): as a killed server
    again = Annotation(builtin_catalog(), Store(db), CONFIG, save_every=5)
    assert again.restored == {"shared": 2}
    assert (again.bandits["shared"].scores(again.items.contexts) == scores).all()


def test_a_second_store_of_a_server_on_one_database_is_refused_naming_the_first(tmp_path):
    db = str(tmp_path / "a.db")
    first = Store(db, exclusive=True)
    with pytest.raises(ValueError, match=rf"--db: {re.escape(db)} is in use by another server \(pid {os.getpid()} on "):
        Store(db, exclusive=True)
    first.close()
    Store(db, exclusive=True).close()  # released with the first


@pytest.mark.parametrize("how", ["a symlink to the database", "the lock file removed"])
def test_a_second_server_is_refused_by_another_name_of_the_database_or_without_its_lock_file(tmp_path, how):
    """A second server started through a symlink to the database (its own lock file beside the link) or after the
    lock file was deleted by hand, each then learning half of the answers. The lock is the real file's, and the
    database file itself is held too."""
    db = tmp_path / "a.db"
    first = Store(str(db), exclusive=True)
    first.add_session("0" * 32, None)  # the database exists, with a row
    if how == "the lock file removed":
        os.remove(f"{db}.lock")
        other = db
    else:
        other = tmp_path / "link.db"
        other.symlink_to(db)
    with pytest.raises(ValueError, match="is in use by another server"):
        Store(str(other), exclusive=True)
    assert first.session("0" * 32) is not None  # the first goes on
    first.close()
    Store(str(other), exclusive=True).close()  # free once the first let go


def test_damage_to_the_write_ahead_log_or_its_loss_takes_no_acknowledged_answer(tmp_path):
    """A server killed with its last writes still in the write-ahead log (copied as it stood), then the log damaged
    and <db>.acked gone: SQLite drops damaged frames without a word, and 34 of 416 acknowledged answers vanished
    unannounced. Each answer is now in the database file before it is acknowledged, so all 12 are kept."""
    import shutil

    live = tmp_path / "live"
    live.mkdir()
    ann = Annotation(builtin_catalog(), Store(str(live / "a.db")), CONFIG, save_every=10)
    sid = ann.new_session()
    _answer_n(ann, sid, 12)
    ann.question(sid)  # written after the last answer: the log is not empty
    for how in ("damaged", "lost"):
        crashed = tmp_path / how
        crashed.mkdir()
        for f in os.listdir(live):  # the files as a kill -9 left them (no close, no checkpoint at the end)
            if not f.endswith(".lock"):
                shutil.copy(live / f, crashed / f)
        os.remove(crashed / "a.db.acked")
        wal = crashed / "a.db-wal"
        assert wal.stat().st_size > 0
        if how == "damaged":
            with open(wal, "r+b") as fh:
                fh.write(os.urandom(wal.stat().st_size))
        else:
            os.remove(wal)
        with sqlite3.connect(f"file:{crashed / 'a.db'}?mode=ro", uri=True) as con:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert con.execute("SELECT COUNT(*), MAX(seq) FROM answers").fetchone() == (12, 12), how
    ann.close()


def test_a_learner_file_ahead_of_the_databases_records_is_taken_and_the_records_filled_in(tmp_path, monkeypatch):
    """The learning process saves its file, then its reports reach the database: a server killed between leaves the
    file holding answers the database has not marked learned, and a refusal it has not recorded (the file's chain
    leaves it out). The restart takes the file (it broke the digest check, or left the answers marked unlearned
    forever), records what the file says, and replays nothing."""
    from nvldb_pl.live import DuelingBandit

    observe = DuelingBandit.observe
    calls = []

    def refuses_the_fourth(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise ValueError("contexts: learning from this answer would leave the learner non-finite")
        return observe(self, *args, **kwargs)

    monkeypatch.setattr(DuelingBandit, "observe", refuses_the_fourth)
    ann = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG, save_every=10)
    sid = ann.new_session()
    _answer_n(ann, sid, 11)  # 10 learned (the file saved at the 10th), the 4th refused
    monkeypatch.undo()
    scores = ann.bandits["shared"].scores(ann.items.contexts)
    ann.store.close()
    db = sqlite3.connect(tmp_path / "a.db")
    refused = db.execute("SELECT seq FROM answers WHERE learned = 0").fetchone()[0]
    db.execute("UPDATE answers SET learned = NULL, refused = NULL WHERE seq IN (?, 9, 10)", (refused,))
    db.commit()
    db.close()
    again = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG)
    assert again.restored == {"shared": 0} and (again.bandits["shared"].scores(again.items.contexts) == scores).all()
    rows = dict(again.store.rows("SELECT seq, learned FROM answers"))
    assert rows[refused] == 0 and all(rows[q] == 1 for q in rows if q != refused)
    assert "recorded from its file" in again.store.rows("SELECT refused FROM answers WHERE seq = ?", (refused,))[0][0]


def test_a_database_made_before_answers_recorded_their_steps_is_taken_as_every_answer_trained(tmp_path):
    """A study made before the ``train`` column: the column is added, its answers (learned, ``train`` NULL) are taken
    as learned with the steps, and the learner rebuilt from the database alone is the one the file holds."""
    db = _study(tmp_path, answers=7)
    with sqlite3.connect(db) as con:
        con.execute("ALTER TABLE answers DROP COLUMN train")
    ann = Annotation(builtin_catalog(), Store(db), CONFIG, save_every=5)
    scores = ann.bandits["shared"].scores(ann.items.contexts)
    assert ann.restored == {"shared": 0}
    assert [t for *_, t in ann.store.to_learn("shared")] == [True] * 7
    ann.store.close()
    os.remove(db + ".learner.pt")
    again = Annotation(builtin_catalog(), Store(db), CONFIG, save_every=5)
    assert again.restored == {"shared": 7} and (again.bandits["shared"].scores(again.items.contexts) == scores).all()


def test_a_copied_database_rebuilds_its_learner_and_never_loads_the_originals_file(tmp_path):
    """A database copied to another folder without its learner file loaded the original's file from the original's
    folder (its snapshots record that path): now only the file beside the database is read, so the copy replays
    every answer from the config into a learner of its own."""
    import shutil

    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    ann = Annotation(builtin_catalog(), Store(str(here / "a.db")), CONFIG, save_every=5)
    _answer_n(ann, ann.new_session(), 12)
    ann.close()
    ann.store.close()
    shutil.copy(here / "a.db", there / "a.db")
    mtime = os.path.getmtime(ann.snapshot_path("shared"))
    copy = Annotation(builtin_catalog(), Store(str(there / "a.db")), CONFIG, save_every=5)
    assert copy.restored == {"shared": 12}  # every answer replayed: no file was taken for this learner
    assert os.path.getmtime(ann.snapshot_path("shared")) == mtime  # the original's file untouched
    copy.store.close()


def test_a_refused_start_after_a_kill_leaves_the_log_and_the_database_as_they_were(tmp_path):
    """A server killed with writes in its log, then started with another seed: refused, and every file (the
    database, its log, the learner's) byte for byte as the kill left them, the log's index still there. The refused start
    closed its connection, the last one, and SQLite checkpointed the log into the database and removed both log
    files though the line said nothing was changed."""
    import shutil
    import subprocess
    import sys

    from tests.test_readme import ROOT

    live, crashed = tmp_path / "live", tmp_path / "crashed"
    live.mkdir()
    crashed.mkdir()
    ann = Annotation(builtin_catalog(), Store(str(live / "a.db")), CONFIG, save_every=5)
    sid = ann.new_session()
    _answer_n(ann, sid, 6)
    ann.question(sid)  # written after the last answer: the log holds it
    for f in os.listdir(live):  # the files as a kill -9 left them (no close, no checkpoint at the end)
        if not f.endswith(".lock"):
            shutil.copy(live / f, crashed / f)
    ann.close()

    def every_file():  # (the log's index, -shm, by name only: SQLite rebuilds it from the log as it reads)
        return {
            f: "present" if f.endswith("-shm") else hashlib.sha256((crashed / f).read_bytes()).hexdigest()
            for f in sorted(os.listdir(crashed))
        }

    before = every_file()
    assert {"a.db", "a.db-wal", "a.db-shm"} <= set(before)
    serve = [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--db", str(crashed / "a.db"), "--port", "0"]
    res = subprocess.run([*serve, "--seed", "3"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "was made with" in res.stderr and "this server has" in res.stderr, res.stderr
    assert every_file() == before
    again = Annotation(builtin_catalog(), Store(str(crashed / "a.db")), CONFIG)
    assert again.store.count_answers() == 6
    again.close()
