"""Every question asked and every answer given, in one SQLite file (write-ahead log).

Tables: ``meta`` (what the file was made with: the items' sha256, the learner's config, seed, offer),
``sessions`` (one a browser), ``questions`` (the offer, as item indices, the pair shown, and its ``purpose``: ""
for a question the learner chose, ``attention`` or ``repeat`` for a check, never learned from; NULL where asked
before the column),
``answers`` (one a question at most; ``choice`` 1: the first item shown, 2: the second, 0: can't
decide; ``learned`` NULL until the learner has taken it, 1 then, 0 where the learner refused it; ``undone`` the
time the person took it back, else NULL: an undone answer is kept, and learned from by no one; ``train`` 0 where
the learner took the answer without its network's steps, which waited for a later answer (answers coming faster
than the learner learns them one by one), else 1, NULL until learned or where learned before this column: a replay
gives each answer its recorded ``train``, so that it rebuilds the same learner),
``settle`` (Kendall tau between the rankings before and after each learned answer), ``snapshots``
(the learner files saved, with the number of answers each holds and its sha256) and ``invites`` (an invited
annotator's name and the sha256 of their secret: the secret itself is kept nowhere).
An answer is on disk before :meth:`Store.add_answer` returns: a killed server, or a machine that loses power, loses
none. Answers that arrive together share one durable commit (group commit: one transaction, one checkpoint, one record
of the last acknowledged), so that the disk's sync time is paid once for everyone waiting rather than once an answer.
A write is durable before it returns (the log synced and checkpointed into the database file) except the questions
asked and the learner's reports (learned, refused), which are on disk with the next durable write: a machine that
loses power may forget a question not yet answered or that an answer was learned (the learner's file says it, and a
restart learns it again), never an answer, an undo, a session or its consent.

Refused at start, in one line naming ``--db`` (nothing read or written beside it): a file that is empty (0 bytes),
not SQLite, another program's database or damaged (SQLite's integrity check); with ``exclusive`` (a server), a
database another server holds (the lock file ``<db>.lock`` names it), since two servers on one file would each learn
half of the answers; and a database that holds fewer answers than were acknowledged (``<db>.acked`` records, synced,
the number of the last answer committed). Each answer is checkpointed into the database file before it is
acknowledged (the write-ahead log truncated), so damage to the log, which loses its last frames without a word, can
take back no acknowledged answer. (Those files: :mod:`nvldb_pl.serve.db_files`; the invites' tables:
:mod:`nvldb_pl.serve.invites`.)
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import urllib.parse
from typing import Callable, Optional

from ..machinery.host import hold_existing
from .invites import Invites
from .db_files import check_existing, hold, read_acked, write_acked

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, annotator TEXT, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS questions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL REFERENCES sessions(id), learner TEXT NOT NULL,
    offer TEXT NOT NULL, i INTEGER NOT NULL, j INTEGER NOT NULL, asked REAL NOT NULL, purpose TEXT);
CREATE TABLE IF NOT EXISTS answers (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, question INTEGER NOT NULL UNIQUE REFERENCES questions(id),
    session TEXT NOT NULL, learner TEXT NOT NULL, choice INTEGER NOT NULL CHECK (choice IN (0, 1, 2)),
    answered REAL NOT NULL, learned INTEGER, refused TEXT, undone REAL, train INTEGER);
CREATE TABLE IF NOT EXISTS settle (learner TEXT NOT NULL, answers INTEGER NOT NULL, tau REAL NOT NULL,
    PRIMARY KEY (learner, answers));
CREATE TABLE IF NOT EXISTS snapshots (learner TEXT PRIMARY KEY, answers INTEGER NOT NULL, sha256 TEXT NOT NULL,
    path TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS invites (annotator TEXT PRIMARY KEY, secret_sha256 TEXT NOT NULL UNIQUE, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS invite_sessions (secret_sha256 TEXT PRIMARY KEY, session TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS consents (session TEXT PRIMARY KEY, at REAL NOT NULL, text_sha256 TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS questions_of_session ON questions (session, id);
CREATE INDEX IF NOT EXISTS answers_of_session ON answers (session);
"""
FORMAT = "nvldb_pl.serve/1"


class Store(Invites):
    """The database at ``path`` (made if absent). Safe to share between threads (one lock). ``exclusive``: held by
    this process alone while it is open (a server; see the module's doc)."""

    def __init__(self, path: str, exclusive: bool = False):
        self.path = path
        # the lock of the file itself, wherever it is named from (a symlink to it, another path): one server a database
        real = os.path.realpath(path)
        self._held = hold(f"{real}.lock") if exclusive else None
        self._held_db = None
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            self.db = None
            self.abandon()
            raise ValueError(
                f"--db: {path} is an empty file (0 bytes), not a database this server made; if it should hold "
                f"answers, restore it from a backup, else remove it to start a new study"
            )
        self.db = None
        self._acked = None  # the file descriptor of <db>.acked, opened at the first answer
        try:
            acked = read_acked(path)
            # checked read-only first, and changed (new tables and columns) only once claim() finds it made with the
            # server's settings: a refused file is left as it was
            self._upgrade_pending = os.path.isfile(path) and bool(check_existing(path, acked))
            if not os.path.isfile(path) and acked:
                raise ValueError(
                    f"--db: {path} does not exist, but {path}.acked says answers up to #{acked} were acknowledged: "
                    f"restore the database from a backup, or move {path}.acked away to start a new study"
                )
            if self._upgrade_pending:  # read-only until claim() accepts it: a refused start changes no byte of it
                uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
                self.db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            else:
                self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)  # (made: empty)
            if exclusive:  # the database's own flock too (SQLite's locks are fcntl's, apart): a lock file removed by
                self._hold_database(real)  # hand lets a second server take a new one, not this (before any write)
            if not self._upgrade_pending:
                self._open_writable(self.db)
                self._upgrade()
        except sqlite3.DatabaseError as err:
            self.abandon()
            raise ValueError(f"--db: {path} is not a readable database ({err}); nothing was changed") from None
        except ValueError:
            self.abandon()
            raise
        self.lock = threading.RLock()
        # kept answers in all and by session, counted once and then kept in step by add_answer and undo (this
        # process alone writes answers: one server a database); each reply says them
        self._kept: Optional[int] = None
        self._kept_by_session: dict = {}
        self._decided_by_session: dict = {}
        self._last_question: Optional[int] = None
        self._syncer: Optional[sqlite3.Connection] = None  # the connection that checkpoints (_sync)
        self._sync_lock = threading.Lock()
        self._group = threading.Condition()  # answers waiting for the next group commit (add_answer)
        self._waiting: list = []
        self._committing = False

    def _open_writable(self, db: Optional[sqlite3.Connection] = None) -> None:
        """The connection that writes, ``db`` or a new one (the read-only one before it closed: it leaves the log and
        its index as they are, where the last connection to close would checkpoint and remove them)."""
        if db is None:
            self.db.close()
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.db = db
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # a commit is made durable by _sync (the log synced)
        self.db.execute("PRAGMA foreign_keys=ON")

    def _write(self, sql: str, args=(), *more: tuple, durable: bool = True) -> sqlite3.Cursor:
        """``sql`` with ``args`` (and each further ``(sql, args)``) in one transaction, on disk before it returns
        (``durable`` False: with the next durable write); the first one's cursor."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                cur = self.db.execute(sql, args)
                for statement in more:
                    self.db.execute(*statement)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            if durable:
                self._sync()
            return cur

    def _sync(self) -> None:
        """Every commit so far on disk, in the database file itself: the log synced and checkpointed (the database
        file synced after it), so that damage to the log, or its loss, can take nothing committed with it. Where a
        reader holds the log back, the log itself is synced (its commits are then durable there). On a connection of
        its own: the disk's syncs hold no reader or writer of the main one (self.lock need not be held)."""
        if self.path == ":memory:":
            return
        with self._sync_lock:
            if self._syncer is None:
                self._syncer = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            busy, frames, copied = self._syncer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if busy or frames != copied:
                fd = os.open(f"{self.path}-wal", os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def rows(self, sql: str, args=()) -> list:
        with self.lock:
            return self.db.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ what the file was made with
    def meta(self) -> dict:
        return {k: json.loads(v) for k, v in self.rows("SELECT key, value FROM meta")}

    def _upgrade(self) -> None:
        """The tables and columns of this version (a new file's, or those a file made before them lacks), on the
        connection that writes."""
        if self._upgrade_pending:
            self._open_writable()
        self.db.executescript(SCHEMA)
        columns = {r[1] for r in self.db.execute("PRAGMA table_info(answers)")}
        for column, kind in (("undone", "REAL"), ("train", "INTEGER")):  # a database made before the column
            if column not in columns:
                self.db.execute(f"ALTER TABLE answers ADD COLUMN {column} {kind}")
        if "purpose" not in {r[1] for r in self.db.execute("PRAGMA table_info(questions)")}:
            self.db.execute("ALTER TABLE questions ADD COLUMN purpose TEXT")
        self._upgrade_pending = False

    def claim(self, made_with: dict) -> None:
        """Record ``made_with`` in a new file; in a used one, refuse any value that differs (naming it), then bring
        it to this version's tables (not before: a refused start changes nothing in it)."""
        with self.lock:
            old = self.meta()
            if not old:
                if self._upgrade_pending:
                    self._upgrade()
                for k, v in {"format": FORMAT, **made_with}.items():
                    self._write("INSERT INTO meta VALUES (?, ?)", (k, json.dumps(v)))
                return
            for k, v in made_with.items():
                if k in old and old[k] != v:
                    raise ValueError(
                        f"--db: {self.path} was made with {k} = {old[k]!r}, this server has {v!r}; "
                        f"start with those, or give another --db"
                    )
            if self._upgrade_pending:
                self._upgrade()

    # ------------------------------------------------------------------ sessions, questions, answers
    def add_session(
        self,
        sid: str,
        annotator: Optional[str],
        invite_sha256: Optional[str] = None,
        consent_sha256: Optional[str] = None,
    ) -> None:
        """A new session, in one transaction with (``invite_sha256``) its being the one session of that invite's link
        and (``consent_sha256``) the consent its person gave, to the text of that digest."""
        now = time.time()
        more = (("INSERT INTO invite_sessions VALUES (?, ?)", (invite_sha256, sid)),) if invite_sha256 else ()
        more += (("INSERT INTO consents VALUES (?, ?, ?)", (sid, now, consent_sha256)),) if consent_sha256 else ()
        self._write("INSERT INTO sessions VALUES (?, ?, ?)", (sid, annotator, now), *more)

    def count_sessions(self) -> int:
        return self.rows("SELECT COUNT(*) FROM sessions")[0][0]

    def consented(self) -> set:
        """The sessions that started with their person's consent."""
        return {r[0] for r in self.rows("SELECT session FROM consents")}

    def consents(self) -> int:
        """How many sessions started with their person's consent."""
        return self.rows("SELECT COUNT(*) FROM consents")[0][0]

    def session(self, sid: str) -> Optional[tuple]:
        """(id, annotator, withdrawn: it came from an invite since replaced or withdrawn) of session ``sid``, else
        None."""
        r = self.rows(
            "SELECT s.id, s.annotator, l.secret_sha256 IS NOT NULL AND NOT EXISTS "
            "(SELECT 1 FROM invites i WHERE i.secret_sha256 = l.secret_sha256) "
            "FROM sessions s LEFT JOIN invite_sessions l ON l.session = s.id WHERE s.id = ?",
            (sid,),
        )
        return (r[0][0], r[0][1], bool(r[0][2])) if r else None

    def pending(self, sid: str) -> Optional[tuple]:
        """The session's latest question without an answer: (id, offer, i, j), else None."""
        r = self.rows(
            "SELECT q.id, q.offer, q.i, q.j FROM questions q LEFT JOIN answers a ON a.question = q.id "
            "WHERE q.session = ? AND a.seq IS NULL ORDER BY q.id DESC LIMIT 1",
            (sid,),
        )
        return (r[0][0], json.loads(r[0][1]), r[0][2], r[0][3]) if r else None

    def add_question(self, sid: str, learner: str, offer: list, i: int, j: int, purpose: str = "") -> int:
        """A question asked (on disk with the next durable write: its answer's commit at the latest); ``purpose``
        ``attention`` or ``repeat`` for a check, whose answer no learner takes."""
        with self.lock:
            self._last_question = self._write(
                "INSERT INTO questions (session, learner, offer, i, j, asked, purpose) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (sid, learner, json.dumps([int(k) for k in offer]), int(i), int(j), time.time(), purpose),
                durable=False,
            ).lastrowid
            return self._last_question

    def last_question(self) -> int:
        """The number of the last question asked (0: none yet), counted once, then kept by :meth:`add_question`."""
        with self.lock:
            if self._last_question is None:
                self._last_question = self.rows("SELECT COALESCE(MAX(id), 0) FROM questions")[0][0]
            return self._last_question

    def answered_pairs(self, sid: str) -> list:
        """The session's answered questions with a choice (not undone, not "can't decide", not a check), in order:
        (offer, i, j)."""
        rows = self.rows(
            "SELECT q.offer, q.i, q.j FROM answers a JOIN questions q ON q.id = a.question "
            "WHERE a.session = ? AND a.choice != 0 AND a.undone IS NULL AND COALESCE(q.purpose, '') = '' "
            "ORDER BY a.seq",
            (sid,),
        )
        return [(json.loads(offer), i, j) for offer, i, j in rows]

    def last_pair(self, sid: str) -> Optional[tuple]:
        """The items (k, k') of the session's latest question, else None."""
        r = self.rows("SELECT offer, i, j FROM questions WHERE session = ? ORDER BY id DESC LIMIT 1", (sid,))
        if not r:
            return None
        offer = json.loads(r[0][0])
        return offer[r[0][1]], offer[r[0][2]]

    def open_pairs(self, learner: str, recent: int = 50) -> list:
        """The items (k, k') of learner ``learner``'s questions without an answer among its ``recent`` latest
        (asked of someone who has not answered yet)."""
        r = self.rows(
            "SELECT q.offer, q.i, q.j FROM questions q LEFT JOIN answers a ON a.question = q.id "
            "WHERE q.id IN (SELECT id FROM questions WHERE learner = ? ORDER BY id DESC LIMIT ?) AND a.seq IS NULL",
            (learner, recent),
        )
        return [(json.loads(o)[i], json.loads(o)[j]) for o, i, j in r]

    def count_questions(self, sid: str) -> int:
        return self.rows("SELECT COUNT(*) FROM questions WHERE session = ?", (sid,))[0][0]

    def question(self, qid: int) -> Optional[tuple]:
        """(session, learner, offer, i, j, answered: bool, purpose) of question ``qid``, else None."""
        r = self.rows(
            "SELECT q.session, q.learner, q.offer, q.i, q.j, a.seq IS NOT NULL, COALESCE(q.purpose, '') "
            "FROM questions q LEFT JOIN answers a ON a.question = q.id WHERE q.id = ?",
            (qid,),
        )
        return (r[0][0], r[0][1], json.loads(r[0][2]), r[0][3], r[0][4], bool(r[0][5]), r[0][6]) if r else None

    def add_answer(
        self, qid: int, sid: str, choice: int, check: Callable[[], tuple], then: Optional[Callable] = None
    ) -> tuple:
        """Answer ``choice`` to question ``qid`` of session ``sid``, on disk before this returns (and recorded in
        ``<db>.acked``). Answers that arrive while a group is being committed wait for it, then are committed together
        by one of them (group commit: one transaction, one sync). ``check()``, run in that transaction after the
        group's earlier answers, returns a tuple whose first item is the question's learner, or raises: that answer
        alone is refused (nothing of it written), the error raised here. ``then(seq, checked)`` runs once the group is
        on disk, in the order committed (the learner's queue: the database's order). Returns (seq, what check
        returned, what then returned)."""
        ticket = {"args": (qid, sid, choice, check, then), "done": False, "result": None, "error": None}
        with self._group:
            self._waiting.append(ticket)
            while not ticket["done"]:
                if self._committing:  # another caller commits a group: this answer goes in the next one
                    self._group.wait()
                    continue
                self._committing, group, self._waiting = True, self._waiting, []
                self._group.release()
                try:
                    self._commit_group(group)
                finally:
                    self._group.acquire()
                    self._committing = False
                    self._group.notify_all()
        if ticket["error"] is not None:
            raise ticket["error"]
        return ticket["result"]

    def _commit_group(self, group: list) -> None:
        """The answers of ``group`` (add_answer's tickets) in one transaction, then one sync and one record of the
        last acknowledged; each ticket done, with its result or its error."""
        made: list = []
        try:
            with self.lock:
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    for ticket in group:
                        qid, sid, choice, check, _ = ticket["args"]
                        try:
                            checked = check()
                            seq = self.db.execute(
                                "INSERT INTO answers (question, session, learner, choice, answered) "
                                "VALUES (?, ?, ?, ?, ?)",
                                (qid, sid, checked[0], int(choice), time.time()),
                            ).lastrowid
                        except (ValueError, LookupError, sqlite3.IntegrityError) as err:  # this answer alone refused
                            ticket["error"] = err
                            continue
                        made.append((ticket, seq, checked))
                    self.db.execute("COMMIT")
                except BaseException:
                    self.db.execute("ROLLBACK")
                    made = []
                    raise
            if made:  # on disk, in the database file itself, before it is acknowledged (the lock let go meanwhile)
                self._sync()
                self._ack(made[-1][1])
            with self.lock:
                for ticket, seq, checked in made:  # counted, and handed on in the order committed
                    sid, then = ticket["args"][1], ticket["args"][4]
                    if self._kept is not None:
                        self._kept += 1
                    if sid in self._kept_by_session:
                        self._kept_by_session[sid] += 1
                    if sid in self._decided_by_session and ticket["args"][2]:
                        self._decided_by_session[sid] += 1
                    try:
                        ticket["result"] = (seq, checked, then(seq, checked) if then is not None else None)
                    except Exception as err:  # kept, but not handed on: said to this caller alone
                        ticket["error"] = err
        except BaseException as err:  # the group's transaction or sync failed (a full disk): none of it is kept
            for ticket in group:
                if ticket["result"] is None and ticket["error"] is None:
                    ticket["error"] = err
        finally:
            for ticket in group:
                ticket["done"] = True

    def refused(self, seq: int, reason: str, only_new: bool = False) -> None:
        """Answer ``seq`` refused by its learner (which is as it was before it), with the reason (``only_new``: where
        no outcome is recorded yet)."""
        where = " AND learned IS NULL" if only_new else ""
        self._write(f"UPDATE answers SET learned = 0, refused = ? WHERE seq = ?{where}", (reason, seq), durable=False)

    def mark_learned(self, seqs: list, untrained=()) -> None:
        """Answers ``seqs`` held by their learner's file, marked learned where no outcome is recorded (their reports
        did not reach the database before the server stopped), ``train`` 0 for those in ``untrained``; no stability
        point is recorded for them."""
        sql = "UPDATE answers SET learned = 1, train = ? WHERE seq = ? AND learned IS NULL"
        rows = [(sql, (int(q not in untrained), q)) for q in seqs]
        if rows:
            self._write(*rows[0], *rows[1:], durable=False)

    def learned(self, seq: int, learner: str, answers: int, tau: Optional[float], train: bool = True) -> None:
        """Answer ``seq`` learned by ``learner``, now holding ``answers``, its ranking's tau (None: no point, the
        ranking unchanged as the network's steps waited): one transaction."""
        self.learned_all([(seq, learner, answers, tau, train)])

    def learned_all(self, reports: list) -> None:
        """:meth:`learned` for each of ``reports`` (its arguments, in the order learned), in one transaction."""
        statements = []
        for seq, learner, answers, tau, train in reports:
            statements.append(
                ("UPDATE answers SET learned = 1, refused = NULL, train = ? WHERE seq = ?", (int(train), seq))
            )
            if tau is not None:
                statements.append(("INSERT OR REPLACE INTO settle VALUES (?, ?, ?)", (learner, int(answers), tau)))
        if statements:
            self._write(*statements[0], *statements[1:], durable=False)

    def to_learn(self, learner: str) -> list:
        """The learner's decided answers not refused and not to a check, in the order given: (seq, offer, i, j, choice,
        learned, train), ``train`` as the learner took it (True where recorded so or not recorded)."""
        r = self.rows(
            "SELECT a.seq, q.offer, q.i, q.j, a.choice, a.learned, a.train FROM answers a JOIN questions q "
            "ON q.id = a.question WHERE a.learner = ? AND a.choice != 0 AND (a.learned IS NULL OR a.learned = 1) "
            "AND a.undone IS NULL AND COALESCE(q.purpose, '') = '' ORDER BY a.seq",
            (learner,),
        )
        offers = {o: json.loads(o) for o in {row[1] for row in r}}  # each text once (rank: every question the same)
        return [(s, list(offers[o]), i, j, c, lr, tr != 0) for s, o, i, j, c, lr, tr in r]

    def learners(self) -> list:
        return [r[0] for r in self.rows("SELECT DISTINCT learner FROM questions ORDER BY learner")]

    def count_answers(self, session: Optional[str] = None) -> int:
        """The answers kept (undone ones not counted): all, or ``session``'s (counted once, then kept: read without
        the lock, which a commit holds)."""
        kept = self._kept if session is None else self._kept_by_session.get(session)
        if kept is not None:
            return kept
        with self.lock:
            if session is None:
                if self._kept is None:
                    self._kept = self.rows("SELECT COUNT(*) FROM answers WHERE undone IS NULL")[0][0]
                return self._kept
            if session not in self._kept_by_session:
                self._kept_by_session[session] = self.rows(
                    "SELECT COUNT(*) FROM answers WHERE session = ? AND undone IS NULL", (session,)
                )[0][0]
            return self._kept_by_session[session]

    def count_decided(self, session: str) -> int:
        """The session's kept answers with a choice (not "can't decide"): what its goal counts (counted once, then
        kept in step, as :meth:`count_answers`)."""
        kept = self._decided_by_session.get(session)
        if kept is not None:
            return kept
        with self.lock:
            if session not in self._decided_by_session:
                self._decided_by_session[session] = self.rows(
                    "SELECT COUNT(*) FROM answers WHERE session = ? AND undone IS NULL AND choice != 0", (session,)
                )[0][0]
            return self._decided_by_session[session]

    def check_answers(self, session: str, purpose: str) -> list:
        """The session's kept answers with a choice to its ``purpose`` checks: (offer, i, j, choice), in order."""
        rows = self.rows(
            "SELECT q.offer, q.i, q.j, a.choice FROM answers a JOIN questions q ON q.id = a.question "
            "WHERE a.session = ? AND a.undone IS NULL AND a.choice != 0 AND q.purpose = ? ORDER BY a.seq",
            (session, purpose),
        )
        return [(json.loads(o), i, j, c) for o, i, j, c in rows]

    def last_answer(self, session: str) -> Optional[tuple]:
        """The session's latest answer not undone: (seq, question, learner, choice, learned), else None."""
        r = self.rows(
            "SELECT seq, question, learner, choice, learned FROM answers WHERE session = ? AND undone IS NULL "
            "ORDER BY seq DESC LIMIT 1",
            (session,),
        )
        return r[0] if r else None

    def undo(self, seq: int) -> None:
        with self.lock:
            self._write("UPDATE answers SET undone = ? WHERE seq = ?", (time.time(), seq))
            self._kept, self._kept_by_session, self._decided_by_session = None, {}, {}  # counted again when asked

    def answers(self) -> list:
        """Every answer, in the order given: (seq, session, annotator, learner, first, second, choice, answered, learned,
        undone, asked, purpose: None where asked before the column)."""
        return self.rows(
            "SELECT a.seq, a.session, s.annotator, a.learner, q.offer, q.i, q.j, a.choice, a.answered, a.learned, "
            "a.undone, q.asked, q.purpose "
            "FROM answers a JOIN questions q ON q.id = a.question JOIN sessions s ON s.id = a.session ORDER BY a.seq"
        )

    def session_numbers(self) -> dict:
        """Session id -> its number (1 for the first session started): how exports name a session."""
        return {sid: n for n, (sid,) in enumerate(self.rows("SELECT id FROM sessions ORDER BY created, id"), 1)}

    # ------------------------------------------------------------------ how the ranking settled; saved learners
    def taus(self, learner: str) -> list:
        return self.rows("SELECT answers, tau FROM settle WHERE learner = ? ORDER BY answers", (learner,))

    def snapshot(self, learner: str) -> Optional[tuple]:
        r = self.rows("SELECT answers, sha256, path FROM snapshots WHERE learner = ?", (learner,))
        return r[0] if r else None

    def set_snapshot(self, learner: str, answers: int, sha256: str, path: str) -> None:
        self._write("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?)", (learner, int(answers), sha256, path))

    def _ack(self, seq: int) -> None:
        """Record, synced, that answer ``seq`` is committed (it may be acknowledged to the person from now on)."""
        if self.path == ":memory:":
            return
        if self._acked is None:
            self._acked = os.open(f"{self.path}.acked", os.O_WRONLY | os.O_CREAT, 0o644)
        write_acked(self._acked, seq)

    def abandon(self) -> None:
        """A refused start: the connection closed and the lock released (its last holder's line put back), the file
        as it was."""
        if self.db is not None:
            self.db.close()
        if getattr(self, "_syncer", None) is not None:
            self._syncer.close()
        if self._held is not None:
            self._held.seek(0)
            self._held.truncate()
            self._held.write(self._held.previous)
            self._held.flush()
        self._release()

    def _hold_database(self, real: str) -> None:
        fd = hold_existing(real)
        if fd is None:
            raise ValueError(
                f"--db: {self.path} is in use by another server (its lock file {real}.lock was removed or is another "
                f"one); two servers on one database would each learn half of the answers: stop it, or give another --db"
            )
        self._held_db = fd

    def _release(self) -> None:
        if getattr(self, "_acked", None) is not None:
            os.close(self._acked)
            self._acked = None
        if getattr(self, "_held_db", None) is not None:
            os.close(self._held_db)
            self._held_db = None
        if self._held is not None:
            self._held.close()
            self._held = None

    def close(self) -> None:
        with self.lock, self._sync_lock:
            if self._syncer is not None:
                self._syncer.close()
                self._syncer = None
            self.db.close()
            self._release()
