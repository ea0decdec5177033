"""The page's learners: :class:`Learners` takes answers in order; :class:`LearnerProcess` runs it in a process of
its own, so that a reply waits for no learning and the learning does not share the server's interpreter lock.

:class:`Learners` holds learners by key (one for all, or one an annotator), each with the chain of answers it holds
(the number of its last one and a digest of all, in order), its scores after its latest answer and, for undo, the
learner as it was before that answer. What it does to the database goes through ``report(kind, *args)``:
``("learned", seq, key, answers, tau, train)`` (tau None where the network's steps waited),
``("refused", seq, reason)``, ``("saved", key, answers, sha256, path)``.

:class:`LearnerProcess` is the server's side of a learning process (``multiprocessing``, spawned): ``put`` hands it
an answer committed (in the order committed); a thread of the server takes its reports to the database and the
learners as they stand (copies, published after every batch) to :attr:`published`, and a second copy of each to
:attr:`asking`, which questions are chosen on (each question asked joins it: :meth:`DuelingBandit.pending`).
``behind`` counts the answers handed and not yet learned; ``undo`` and ``stop`` are requests it answers.
The process takes every answer waiting (up to :data:`BATCH`) in one go: each joins its learner's history, and the
network's steps are taken once, after a learner's last answer of the batch (``train`` False for the others, recorded
with each answer): answers that come faster than a learner learns them one by one cost it one update a batch.
An exception in the process other than a learner's refusal ends it and is kept in ``failed``: the answers stay in
the database and a restart learns them.
"""

from __future__ import annotations

import collections
import copy
import hashlib
import itertools
import multiprocessing
import pickle
import signal
import sys
import threading
import time
from typing import Callable, Optional

import numpy as np

from ..live import DuelingBandit
from .items import kendall_tau

SHARED = "shared"  # the learner of every session (else one an annotator)
BATCH = 32  # answers a learning process takes in one go (the network's steps once a learner), then publishes


def chained(digest: str, seq: int, offer: list, i: int, j: int, choice: int, train: bool = True) -> str:
    """The digest of a learner's answers after it takes answer ``seq`` (the one before: ``digest``), ``train`` as
    :meth:`DuelingBandit.observe`'s."""
    later = "" if train else "|later"
    return hashlib.sha256(f"{digest}|{seq}|{list(map(int, offer))}|{i}|{j}|{choice}{later}".encode()).hexdigest()


def chain_of(answers) -> str:
    """The digest of a learner's answers ``(seq, offer, i, j, choice, train)``, in the order it took them."""
    digest = ""
    for answer in answers:
        digest = chained(digest, *answer)
    return digest


def learner_file(db: str, key: str) -> str:
    """Where learner ``key`` of the database ``db`` is saved."""
    tag = "" if key == SHARED else "-" + hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{db}.learner{tag}.pt"


def sha256_of(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


class Learners:
    """Learners by key over the items ``contexts`` ``[N, d]``; a key not held yet gets ``fresh()``. A learner is saved
    to :func:`learner_file` beside ``db`` every ``save_every`` answers it takes (and by :meth:`save`)."""

    def __init__(self, contexts: np.ndarray, fresh: Callable[[], DuelingBandit], db: str, save_every: int, report):
        self.contexts, self.fresh, self.db, self.save_every, self.report = contexts, fresh, db, save_every, report
        self.bandits: dict = {}
        self.previous: dict = {}  # the scores after each learner's latest answer
        self.chain: dict = {}  # learner -> (number of its last answer learned, digest of its answers in order)
        self.before: dict = {}  # learner -> (its latest answer, the learner's mark, chain and scores before it): undo
        # learner -> the answers it refused, saved with it: a database that did not get to record a refusal (its
        # server killed first) is told by the file, whose chain leaves them out
        self.refused: dict = {}
        self.untrained: dict = {}  # learner -> its answers taken with train False, saved with it (as refused)

    def state(self) -> tuple:
        """What a learning process starts from (no undo: a restart cannot take back an answer)."""
        return self.bandits, self.chain, self.previous, self.refused, self.untrained

    def bandit(self, key: str, bandit: Optional[DuelingBandit] = None) -> DuelingBandit:
        """Learner ``key``; one not held yet is ``bandit``, else a fresh one."""
        if key not in self.bandits:
            self.bandits[key] = bandit or self.fresh()
            self.previous[key] = self.bandits[key].scores(self.contexts)
        return self.bandits[key]

    def learn(self, key: str, seq: int, offer: list, i: int, j: int, choice: int, train: bool = True) -> Optional[str]:
        """Learner ``key`` takes answer ``seq`` (``choice`` 1: item ``offer[i]`` preferred, 2: ``offer[j]``; ``train``
        False: its network's steps wait for a later answer); its reason where it refuses (the learner unchanged)."""
        bandit = self.bandit(key)
        before = (seq, bandit.mark(), self.chain.get(key, (0, "")), self.previous[key])
        try:
            bandit.observe(self.contexts[offer], i, j, int(choice == 1), train=train)
        except (ValueError, FloatingPointError) as err:
            self.refused.setdefault(key, []).append(int(seq))
            self.report("refused", seq, str(err))
            return str(err)
        self.before[key] = before
        self.chain[key] = (seq, chained(self.chain.get(key, (0, ""))[1], seq, offer, i, j, choice, train))
        tau = None
        if train:  # else the ranking as it was: the stability point waits for the steps
            scores = bandit.scores(self.contexts)
            tau, self.previous[key] = kendall_tau(self.previous[key], scores), scores
        else:
            self.untrained.setdefault(key, []).append(int(seq))
        self.report("learned", seq, key, bandit.num_observed, tau, train)
        return None

    def take(self, key: str, seq: int, offer: list, i: int, j: int, choice: int, train: bool = True) -> Optional[str]:
        """:meth:`learn`, then the learner saved every ``save_every`` answers."""
        refused = self.learn(key, seq, offer, i, j, choice, train)
        if refused is None and self.bandits[key].num_observed % self.save_every == 0:
            self.save(key)
        return refused

    def undo(self, key: str, seq: int) -> bool:
        """Learner ``key`` as it was before answer ``seq``, saved; False (nothing changed) where ``seq`` is not the
        last answer it took (it has taken another since, or restarted)."""
        held = self.before.get(key)
        if held is None or held[0] != seq or self.chain.get(key, (0, ""))[0] != seq:
            return False
        _, mark, self.chain[key], self.previous[key] = held
        self.bandits[key].restore(mark)
        if seq in self.untrained.get(key, []):
            self.untrained[key].remove(seq)
        del self.before[key]
        self.save(key)
        return True

    def save(self, key: str) -> None:
        """Save learner ``key`` (atomically) with the chain it holds; reported with the file's sha256."""
        path = learner_file(self.db, key)
        last, digest = self.chain.get(key, (0, ""))
        meta = {"learner": key, "last_answer": last, "digest": digest, "refused": self.refused.get(key, [])}
        meta["untrained"] = self.untrained.get(key, [])
        self.bandits[key].save(path, meta=meta)
        self.report("saved", key, self.bandits[key].num_observed, sha256_of(path), path)


def _learning_process(conn, contexts, spec: tuple, db: str, save_every: int, state: bytes) -> None:
    """A learning process's loop: answers, undos and the stop read from ``conn`` in order; reports and the learners
    as they stand written back (see the module's docstring)."""
    # a Ctrl-C or a stop sent to the whole group (a terminal, timeout, a service manager) is the server's to answer: it
    # sends "stop" (and if it is killed, the pipe's end stops this process)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    import torch

    torch.set_num_threads(1)
    config, dim, seed, objective = spec
    reports: list = []  # sent after the learners they speak of are published: a drained server holds those
    learners = Learners(
        contexts,
        # the catalog's contexts are standardized already (serve/items.py)
        lambda: DuelingBandit.from_config(config, dim=dim, seed=seed, objective=objective, standardize=False),
        db,
        save_every,
        lambda *msg: reports.append(msg),
    )
    learners.bandits, learners.chain, learners.previous, learners.refused, learners.untrained = pickle.loads(state)
    conn.send(("ready",))

    def publish(keys) -> None:
        for key in sorted(keys):
            conn.send(("state", key, pickle.dumps(learners.bandits[key]), learners.bandits[key].num_observed))
        if reports:  # in one message: the server records a run of learned answers in one transaction
            conn.send(("reports", list(reports)))
        reports.clear()

    try:
        while True:
            try:
                batch = [conn.recv()]
                while len(batch) < BATCH and conn.poll():
                    batch.append(conn.recv())
            except EOFError:  # the server is gone: its answers are in the database
                return
            changed = set()
            for n, (kind, *args) in enumerate(batch):
                if kind == "learn":  # the steps after the learner's last answer before a request or the batch's end
                    later = itertools.takewhile(lambda msg: msg[0] == "learn", batch[n + 1 :])
                    learners.take(*args, train=all(msg[1] != args[0] for msg in later))
                    changed.add(args[0])
                    continue
                publish(changed)
                changed = set()
                if kind == "undo":
                    key, seq = args
                    ok = learners.undo(key, seq)
                    publish([key])
                    conn.send(("undone", key, seq, ok))
                elif kind == "stop":
                    for key in learners.bandits:
                        learners.save(key)
                    publish([])
                    conn.send(("stopped",))
                    return
            publish(changed)
    except Exception as err:  # not a learner's refusal (take reports those): the answers stay in the database
        try:
            conn.send(("failed", f"{type(err).__name__}: {err}"))
        except OSError:
            pass


class LearnerProcess:
    """The server's side of a learning process that starts from ``learners``' state and reports to ``record(kind,
    *args)`` (called in a thread of the server); ``spec``: (config, dim, seed, objective) of a fresh learner."""

    def __init__(self, learners: Learners, spec: tuple, record: Callable):
        self.record = record
        self._published: dict = {k: copy.deepcopy(b) for k, b in learners.bandits.items()}
        self._unread: dict = {}  # learners published and not read yet (pickled): read when asked for
        self.observed: dict = {k: b.num_observed for k, b in learners.bandits.items()}  # answers each one holds
        # what questions are chosen on: a second copy of each, which the questions asked since it came join
        # (DuelingBandit.pending), so that people asked before the next learning step get different pairs
        self.asking: dict = {k: copy.deepcopy(b) for k, b in learners.bandits.items()}
        self.changed = threading.Condition()
        self.sent = self.done = 0
        self.failed: Optional[str] = None
        self._stalled_at: Optional[int] = None  # ``done`` when a reply's wait timed out (:attr:`stalled`)
        self.undone: dict = {}
        self.outbox: collections.deque = collections.deque()  # sent in order by a thread of its own: a full pipe
        # never holds a caller (who may hold the database's lock the reports need)
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        state = pickle.dumps(learners.state())
        args = (child, learners.contexts, spec, learners.db, learners.save_every, state)
        self.process = ctx.Process(target=_learning_process, args=args, name="nvldb_pl-learner", daemon=True)
        self.process.start()
        child.close()
        self.stopped = self.ready = False
        self.thread = threading.Thread(target=self._receive, name="nvldb_pl-learner-reports", daemon=True)
        self.thread.start()
        self.sender = threading.Thread(target=self._send_all, name="nvldb_pl-learner-sends", daemon=True)
        self.sender.start()
        with self.changed:  # the process up before the first question (a reply never waits for its start)
            self.changed.wait_for(lambda: self.ready or self.failed is not None)

    @property
    def published(self) -> dict:
        """The learners by key as last published (read from their pickles when first asked for after a batch)."""
        with self.changed:
            for key, data in self._unread.items():
                self._published[key] = pickle.loads(data)
            self._unread.clear()
            return self._published

    @property
    def behind(self) -> int:
        """Answers handed to the process and not yet learned (or refused)."""
        return self.sent - self.done

    def _send(self, msg: tuple) -> None:
        with self.changed:
            self.outbox.append(msg)
            self.changed.notify_all()

    def _send_all(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.outbox or self.failed is not None or self.stopped)
                if not self.outbox:
                    return
                msg = self.outbox.popleft()
            try:
                self.conn.send(msg)
            except OSError:  # the process is gone: _receive says so
                return

    def put(self, key: str, seq: int, offer: list, i: int, j: int, choice: int) -> int:
        """An answer to learn, after those put before it (call it in the order the answers were committed); its
        place in that order, for :meth:`wait_below`."""
        with self.changed:
            if self.failed is None:  # else kept in the database; a restart learns it
                self.sent += 1
                self.outbox.append(("learn", key, seq, offer, i, j, choice))
                self.changed.notify_all()
            return self.sent

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until every answer put is learned and published (or the process failed); False if ``timeout``
        passed first."""
        with self.changed:
            return self.changed.wait_for(lambda: self.behind == 0 or self.failed is not None, timeout)

    def wait_below(self, place: int, most: int, timeout: Optional[float] = None) -> bool:
        """Wait until the answer at ``place`` (:meth:`put`'s) has at most ``most`` answers before it still to learn
        (or the process failed): how a reply holds people who answer faster than the learner learns, first come
        first served, so that every answer is learned within about ``most`` answers' time. A wait of ``timeout``
        seconds that sees no answer learned marks the process stalled (said once on stderr): the replies after it do
        not wait, until it learns again (a stopped process held every reply for ever)."""
        with self.changed:
            if self.stalled:
                return False
            done = self.done
            if self.changed.wait_for(lambda: self.done >= place - most or self.failed is not None, timeout):
                return True
            if self.done == done:
                self._stalled_at = done
                print(
                    f"warning: the learning process learned nothing for {timeout:g} s ({self.behind} answers waiting): "
                    "replies no longer wait for it; the answers are kept",
                    file=sys.stderr,
                    flush=True,
                )
            return False

    @property
    def stalled(self) -> bool:
        """Whether a reply's wait saw the process learn nothing, and it has learned nothing since."""
        return self._stalled_at is not None and self._stalled_at == self.done and self.failed is None

    def undo(self, key: str, seq: int) -> bool:
        """Learner ``key`` as it was before answer ``seq`` (its last), saved and published; False where it has
        taken another since (or the process failed)."""
        self.drain()
        with self.changed:
            if self.failed is not None:
                return False
            self.undone.pop((key, seq), None)
        self._send(("undo", key, seq))
        with self.changed:
            self.changed.wait_for(lambda: (key, seq) in self.undone or self.failed is not None)
            return self.undone.pop((key, seq), False)

    def stop(self, stall_seconds: float = 10.0) -> None:
        """Learn what waits, save every learner, end the process. A process that learns nothing for
        ``stall_seconds`` (stopped, say) is killed instead, said on stderr: its learners stay as last saved, and the
        answers it had not learned are kept (a restart learns them)."""
        if self.process.is_alive() and self.failed is None:
            self._send(("stop",))
            with self.changed:
                idle = 0  # periods of stall_seconds without an answer learned
                while not (self.stopped or self.failed is not None):
                    before = self.behind
                    if not self.changed.wait_for(lambda: self.stopped or self.failed is not None, stall_seconds):
                        idle = idle + 1 if self.behind >= before else 0
                        # answers waiting and none learned, or nothing waiting and no end (saving) for 3 periods
                        if (idle and self.behind) or idle >= 3:
                            print(
                                f"warning: the learning process learned nothing for {stall_seconds:g} s while "
                                f"stopping; ended ({self.behind} answers kept, not yet learned: a restart learns "
                                "them)",
                                file=sys.stderr,
                                flush=True,
                            )
                            self.process.kill()
                            break
        self.process.join(timeout=60)
        self.thread.join(timeout=60)
        self.sender.join(timeout=60)

    def _exit_code(self, seconds: float = 5.0) -> Optional[int]:
        """The ended process's exit code (None if it is still running after ``seconds``). Polled: another thread's
        join may reap the process first, and a join that lost that race returns with the code not yet set."""
        deadline = time.monotonic() + seconds
        self.process.join(timeout=seconds)
        while self.process.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.process.exitcode

    def _record_reports(self, reports: list) -> None:
        """A batch's reports to ``record`` in their order, each run of learned answers as one ``learned_all``."""
        for learned, run in itertools.groupby(reports, key=lambda msg: msg[0] == "learned"):
            if learned:
                self.record("learned_all", [msg[1:] for msg in run])
            else:
                for kind, *args in run:
                    self.record(kind, *args)

    def _receive(self) -> None:
        while True:
            try:
                kind, *args = self.conn.recv()
            except (EOFError, OSError):
                with self.changed:
                    if not self.stopped and self.failed is None:
                        self.failed = f"the learning process ended (exit code {self._exit_code()})"
                        print(f"error: {self.failed}; the answers are kept", file=sys.stderr)
                    self.changed.notify_all()
                return
            if kind == "state":
                asking = pickle.loads(args[1])
                with self.changed:
                    self._unread[args[0]], self.asking[args[0]], self.observed[args[0]] = args[1], asking, args[2]
                continue
            if kind == "reports":
                try:
                    self._record_reports(args[0])
                except Exception as err:  # noqa: BLE001 (a full disk, say: said, and the learner stops taking answers)
                    with self.changed:
                        self.failed = f"recording what it learned failed ({type(err).__name__}: {err})"
                        print(f"error: {self.failed}; the answers are kept, a restart learns them", file=sys.stderr)
                        self.changed.notify_all()
                    self._send(("stop",))
                    return
            with self.changed:
                if kind == "reports":
                    self.done += sum(msg[0] in ("learned", "refused") for msg in args[0])
                elif kind == "undone":
                    self.undone[(args[0], args[1])] = args[2]
                elif kind == "stopped":
                    self.stopped = True
                elif kind == "ready":
                    self.ready = True
                elif kind == "failed":
                    self.failed = args[0]
                    print(f"error: the learner stopped taking answers ({self.failed}); they are kept", file=sys.stderr)
                self.changed.notify_all()
            if kind in ("stopped", "failed"):
                return
