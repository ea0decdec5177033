"""Ask a person "A or B?" about items of a small built-in catalog, learn, and show the learned ranking.

    python scripts/duel.py                          # interactive: answer 1 or 2 (q or Ctrl-C stops)
    python scripts/duel.py --answers answers.txt    # answers from a file, one per line: 1, 2 or q
    python scripts/duel.py --simulate               # a simulated person with a hidden taste
    python scripts/duel.py --questions 30 --save me.pt   # ... and keep the learner (answers also in me.pt.answers)
    python scripts/duel.py --load me.pt             # go on from a saved learner
    python scripts/duel.py --catalog train --simulate --objective rank   # trips of real data, a person fitted to them

Each question offers ``--offer`` random items of the catalog (the round's context set X_t); the
learner (``configs/live.yaml`` by default: NVLDB-UCB-ASYM with distinct arms) picks the two to
show through :class:`nvldb_pl.live.DuelingBandit`, the same code as the simulated experiments.
Item contexts: the catalog's features standardized over the catalog, each item scaled to unit norm.
"""

import argparse
import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
import time

import numpy as np


from ..machinery.host import CannotWrite, open_text
from ..machinery.own_modules import find_own_modules_here
from ..machinery.yaml_files import shipped_config
from ..live import DuelingBandit, rank
from .items import FEATURES, builtin_catalog, kendall_tau
from .db_files import hold

TASTE = np.array([1.0, -0.5, 0.8, -1.0, -0.7])  # the simulated person's hidden weights per feature


def catalog(seed: int = 2026) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(names, raw features [N, 5] in [0, 1] with one decimal, contexts [N, 5] of unit norm)."""
    c = builtin_catalog(seed)
    return c.names, c.raw, c.contexts


class Catalog:
    """What ``--catalog`` offers: names, raw features (as shown), the learner's contexts, and the simulated person's
    utility of raw features. ``builtin``: 12 made-up items, the person a hidden linear taste (TASTE). ``train``: 20
    trips of Ecdat's Train data (price in cents of guilders, minutes, changes, comfort 0 best), the person the
    conditional logit fitted to the travellers' real choices (:mod:`nvldb_pl.environments.train_choices`)."""

    def __init__(self, name: str, seed: int):
        if name == "train":
            from ..environments import train_choices as tc

            self.names, self.raw, self.contexts, _ = tc.catalog(20, seed)
            self.features, self.beta = ("price", "time", "change", "comfort"), tc.fit()[0] * tc.UNITS
        else:
            self.names, self.raw, self.contexts = catalog()
            self.features, self.beta = FEATURES, TASTE

    def utility(self, raw: np.ndarray) -> np.ndarray:
        return raw @ self.beta

    def describe(self, k: int) -> str:
        return f"{self.names[k]:<8s} " + "  ".join(f"{f} {v:g}" for f, v in zip(self.features, self.raw[k]))


def describe(name: str, raw: np.ndarray) -> str:
    return f"{name:<8s} " + "  ".join(f"{f} {v:.1f}" for f, v in zip(FEATURES, raw))


class Journal:
    """Every answer appended to ``path`` as it is given (flushed and synced), in the --answers format, after a header
    that records the session's settings (``# session: {...}``: seed, catalog, objective, offer, the config's path
    and sha256, --load and its answers before): ``--answers PATH`` with those settings gives the answers again after
    any end of the process, and a call with other settings is refused (:func:`check_replay`). One session a journal:
    a journal already at ``path`` is kept aside (``path.1``, ...) first."""

    def __init__(self, path: str, settings: dict):
        self.path = path
        kept = None
        if os.path.exists(path):
            kept = next(f"{path}.{n}" for n in range(1, 10**6) if not os.path.exists(f"{path}.{n}"))
        try:
            if kept:
                os.replace(path, kept)
            self.fh = open(path, "x", encoding="utf-8")
        except OSError as err:
            raise ValueError(f"--save: cannot write its answers journal {path} ({err.strerror})") from None
        self.kept = kept
        command = " ".join(
            f"--{k} {v}"
            for k, v in settings.items()
            if k in ("seed", "catalog", "objective", "offer", "config", "load") and v is not None
        )
        self.fh.write(f"{JOURNAL_HEAD}{command}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        self.fh.write(f"{SESSION}{json.dumps(settings, sort_keys=True)}\n")
        self._sync()

    def add(self, answer: int) -> None:
        self.fh.write(f"{answer}\n")
        self._sync()

    def _sync(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())


SESSION = "# session: "  # a journal's header line of the settings its answers were given under
JOURNAL_HEAD = "# scripts/duel.py "  # a journal's first line: the command its session was


def check_replay(path: str, sessions: list, settings: dict, journal: bool = False) -> str | None:
    """Answers read from a journal (``sessions``: its ``# session:`` headers) are given again under the settings they
    were given under, or refused naming the first that differs: another catalog, objective, offer, seed, config or
    learner to start from would ask other questions and build another learner from the same answers. A journal
    (``journal``: its first line is the one :class:`Journal` writes) without a session line is refused; a file of
    answers alone gets the line to say that it is replayed under this call's settings."""
    if not sessions:
        if journal:
            raise ValueError(
                f"--answers: {path} is a scripts/duel.py journal without its '{SESSION.strip()}' line (edited, or cut "
                f"short): the settings its answers were given under are unknown; put the line back, or copy the "
                f"answers alone into a file of their own to give them under this call's settings"
            )
        shown = {k: settings.get(k) for k in ("catalog", "objective", "offer", "seed")}
        return f"--answers: {path} records no settings; its answers are given under this call's {json.dumps(shown)}"
    if len(sessions) > 1:
        raise ValueError(
            f"--answers: {path} holds {len(sessions)} sessions' answers (a journal appended to by an older version); "
            f"each was given to the learner its session started from: split it at its '{SESSION.strip()}' lines and "
            f"give each part with its own settings"
        )
    had = sessions[0]
    for key in ("catalog", "objective", "offer", "seed", "load", "answers_before", "config_sha256"):
        if key in had and had[key] != settings.get(key):
            name = {"config_sha256": "config", "answers_before": "load"}.get(key, key)
            shown = {k: had.get(k) for k in ("seed", "catalog", "objective", "offer", "config", "load")}
            raise ValueError(
                f"--answers: {path} was given with {name} {had.get(name)!r} (this call: {settings.get(name)!r}); "
                f"its answers replayed under other settings would build another learner: give the journal's "
                f"settings {json.dumps(shown)}"
                + (
                    f" (the learner loaded then held {had['answers_before']} answers, this one {settings.get(key)})"
                    if key == "answers_before"
                    else ""
                )
            )


@contextlib.contextmanager
def deferred_interrupt():
    """Ctrl-C (SIGINT) inside the block is held until the block ends, then raised as KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    previous = signal.signal(signal.SIGINT, lambda sig, frame: held.append(sig))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


class Answers:
    """Where answers come from: the terminal, a file (checked line by line) or a simulated person."""

    def __init__(self, path=None, simulate=False, stdin=None, out=None, person=None):
        self.lines, self.path, self.simulate, self.sessions, self.journal = None, path, simulate, [], False
        self.person = person or (lambda raw: raw @ TASTE)  # the simulated person's utility of raw features
        self.stdin, self.out = stdin or sys.stdin, out or sys.stdout
        if path is None and not simulate and self.stdin is None:  # started with its input closed (<&-)
            raise ValueError("standard input is closed: answer in a terminal, or give --answers FILE or --simulate")
        if path is not None:
            if os.path.isdir(path):
                raise ValueError(f"--answers: {path} is a folder; give a text file of answers")
            if not os.path.isfile(path):
                raise FileNotFoundError(f"--answers: {path}: no such file")
            with open_text(path, "--answers") as fh:
                raw = list(enumerate(fh, 1))
            self.sessions = []
            self.journal = any(line.startswith(JOURNAL_HEAD) for _, line in raw[:1])  # Journal's first line
            for n, line in raw:
                if line.startswith(SESSION):
                    try:
                        self.sessions.append(json.loads(line[len(SESSION) :]))
                    except json.JSONDecodeError:
                        raise ValueError(f"--answers: {path} line {n}: a session header that is not JSON") from None
            self.lines = [(n, s.split("#", 1)[0].strip()) for n, s in raw]
            self.lines = [(n, s) for n, s in self.lines if s]
            for n, s in self.lines:
                if s not in ("1", "2", "q"):
                    raise ValueError(f"--answers: {path} line {n}: expected 1, 2 or q, got {s!r}")

    def next(self, raw_i, raw_j):
        """1 if the first item shown is preferred, 0 if the second, None to stop."""
        if self.simulate:
            return int(self.person(raw_i) > self.person(raw_j))
        if self.lines is not None:
            if not self.lines:
                return None
            s = self.lines.pop(0)[1]
        else:
            while True:
                self.out.write("1 or 2 (q stops)? ")
                self.out.flush()
                try:
                    s = self.stdin.readline()
                except KeyboardInterrupt:  # Ctrl-C stops like q: the ranking is shown, --save keeps the answers
                    self.out.write("\n")
                    return None
                if not s:  # end of input
                    return None
                s = s.strip().lower()
                if s in ("1", "2", "q"):
                    break
                self.out.write(f"please type 1, 2 or q, not {s!r}\n")
        return None if s == "q" else int(s == "1")


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def parser() -> argparse.ArgumentParser:
    """The terminal duel's options (``--help`` lists them with their defaults)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--answers", type=os.path.expanduser, help="read answers from this file (1, 2 or q per line; # comments)"
    )
    src.add_argument("--simulate", action="store_true", help="a simulated person answers (hidden taste)")
    p.add_argument("--questions", type=int, default=20, help="at most this many questions (default 20)")
    p.add_argument(
        "--offer", type=int, default=None, help="items offered per question, K (default 4; objective rank: every item)"
    )
    p.add_argument(
        "--objective",
        choices=["regret", "rank"],
        default=None,
        help="regret (the learner's own rule: good items asked most; the default) or rank (the pair of every item "
        "that tells most about the whole order); with --load, default the saved learner's",
    )
    p.add_argument(
        "--config",
        default=shipped_config("live"),
        type=os.path.expanduser,
    )
    p.add_argument("--load", type=os.path.expanduser, help="go on from a learner saved with --save")
    p.add_argument("--save", type=os.path.expanduser, help="save the learner here at the end")
    p.add_argument("--seed", type=int, default=0, help="which items are offered, and the learner's seed")
    p.add_argument(
        "--catalog",
        choices=["builtin", "train"],
        default="builtin",
        help="builtin (12 made-up items) or train (20 trips of the Train data; --simulate: the person fitted to the "
        "travellers' real choices; --seed picks the trips)",
    )
    return p


def main(argv=None, stdin=None, out=None) -> int:
    find_own_modules_here()  # a class_path of one's own, from the working folder
    out = out or sys.stdout
    a = parser().parse_args(argv)
    held = None  # --save's lock, released when the session ends
    try:
        if a.questions < 0:
            raise ValueError(f"--questions: must be >= 0, got {a.questions}")
        if a.seed < 0:  # (it was refused as the config file's error)
            raise ValueError(f"--seed: must be >= 0, got {a.seed}")
        cat = Catalog(a.catalog, a.seed)
        names, raw, contexts = cat.names, cat.raw, cat.contexts
        if a.objective == "rank" and a.offer is not None and a.offer < len(names):
            raise ValueError(
                f"--offer: objective rank chooses the pair among every item (it learns the whole order); "
                f"--offer {a.offer} would not take effect, leave it out (or give --objective regret)"
            )
        offer_size = a.offer if a.offer is not None else (len(names) if a.objective == "rank" else 4)
        if not 2 <= offer_size <= len(names):
            raise ValueError(f"--offer: must be between 2 and {len(names)}, got {a.offer}")
        answers = Answers(a.answers, a.simulate, stdin, out, cat.utility)
        if a.save:  # before the questions: a person's answers must not be lost to a bad path at the end
            folder = os.path.dirname(os.path.abspath(a.save))
            if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
                raise ValueError(
                    f"--save: {a.save}: folder {folder} "
                    f"{'does not exist' if not os.path.isdir(folder) else 'is not writable'}"
                )
            if os.path.isdir(a.save):
                raise ValueError(f"--save: {a.save} is a folder; give a file name in it")
        if a.load:
            bandit = DuelingBandit.from_checkpoint(a.load, objective=a.objective)
            if bandit.dim != contexts.shape[1]:
                raise ValueError(f"--load: {a.load} has dim {bandit.dim}, the catalog has {contexts.shape[1]} features")
        else:
            bandit = DuelingBandit.from_config(  # the catalog's contexts are standardized already
                a.config, dim=contexts.shape[1], seed=a.seed, objective=a.objective or "regret", standardize=False
            )
        settings = {  # what shapes the questions and the learner: a journal records it, a replay must match it
            "seed": a.seed,
            "catalog": a.catalog,
            "objective": bandit.objective,
            "offer": offer_size,
            "config": None if a.load else os.path.abspath(a.config),
            "config_sha256": None if a.load else _sha256(a.config),
            "load": os.path.abspath(a.load) if a.load else None,
            "answers_before": bandit.num_observed,
        }
        if a.answers:
            note = check_replay(a.answers, answers.sessions, settings, answers.journal)
            if note:
                print(f"note: {note}", file=sys.stderr)
        rng = np.random.default_rng([a.seed, bandit.num_observed])
        asked, given = 0, []
        journal = None
        if a.save:
            held = hold(
                f"{a.save}.lock",
                f"--save: {a.save} is in use by another session ({{holder}}); two sessions on one --save would "
                f"interleave one answers journal: stop it, or give another --save",
            )
            journal_path = a.save + ".answers"
            reread = a.answers and os.path.exists(journal_path) and os.path.samefile(a.answers, journal_path)
            journal = Journal(journal_path, settings)  # the journal there, read or not, kept aside whole
            if reread:
                out.write(f"--answers is --save's journal: it is kept as {journal.kept}; a new journal starts\n")
        try:
            while asked < a.questions:
                offer = rng.choice(len(names), size=offer_size, replace=False)
                i, j = bandit.select(contexts[offer])
                out.write(
                    f"\nQuestion {asked + 1}: which do you prefer?\n  1) {cat.describe(offer[i])}\n"
                    f"  2) {cat.describe(offer[j])}\n"
                )
                o = answers.next(raw[offer[i]], raw[offer[j]])
                if o is None:
                    break
                if a.simulate or a.answers:
                    out.write(f"answer: {1 if o else 2}\n")
                if journal is not None:
                    journal.add(1 if o else 2)  # on disk before the learner takes it
                with deferred_interrupt():  # Ctrl-C here stops after this answer is learned, not halfway
                    bandit.observe(contexts[offer], i, j, o)
                given.append(1 if o else 2)
                asked += 1
        except KeyboardInterrupt:  # stops like q: the ranking is shown, --save keeps the answers
            out.write("\ninterrupted\n")
        out.write(f"\nLearned ranking after {bandit.num_observed} answers (estimated utility):\n")
        ranking = rank(bandit, contexts, names)
        for n, (name, score) in enumerate(ranking, 1):
            out.write(f"{n:3d}. {cat.describe(names.index(name))}   {score:+.3f}\n")
        if a.simulate:
            tau = kendall_tau(bandit.scores(contexts), cat.utility(raw))
            out.write(f"Kendall tau against the simulated person's hidden taste: {tau:.2f}\n")
        if a.save:
            try:
                bandit.save(a.save)
            except CannotWrite as err:  # a full disk: the answers stay, to be given again from a file
                print(
                    f"error: {err}; this session's answers, to give again with --answers FILE (one a line, the "
                    f"same --seed{' and --load' if a.load else ''}): {' '.join(map(str, given))}",
                    file=sys.stderr,
                )
                return 1
            out.write(f"saved the learner to {a.save}\n")
    except (ValueError, FileNotFoundError, FloatingPointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        if held is not None:
            held.close()
    return 0
