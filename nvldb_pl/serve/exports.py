"""The researcher's exports of :class:`~.annotation.Annotation`: every answer (rows, CSV), how far the answers agree,
the Bradley-Terry table from the answers alone, and a learner's ranking as CSV. A mixin: it reads the annotation's
``store``, ``items``, ``attention`` and ``ranking``; every text cell passes :func:`~.study.csv_cell`."""

from __future__ import annotations

import csv
import io
import itertools
import json

import numpy as np

from ..maths.ranking import bradley_terry
from .study import csv_cell
from .worker import SHARED


class Exports:
    """What the researcher downloads (mixed into :class:`~.annotation.Annotation`)."""

    ANSWER_FIELDS = (
        "answer",
        "session",
        "annotator",
        "learner",
        "first",
        "second",
        "choice",
        "preferred",
        "answered_unix",
        "learned",
        "undone_unix",
        "seconds",
        "check",
    )

    def answer_rows(self) -> list[dict]:
        """Every answer, in the order given, as :data:`ANSWER_FIELDS`: a session named by its number (its id, which
        lets one answer in it, never leaves the server), ``first`` the item shown on the left, ``seconds`` from the
        question's being asked to its answer (the time a person took, the page's round trip included), ``check``
        ``attention`` or ``repeat`` for a check's answer (learned by no one), "" for a question the learner chose, None
        where asked before the server recorded it."""
        number = self.store.session_numbers()
        rows = []
        for seq, sid, annotator, key, offer, i, j, choice, t, learned, undone, asked, purpose in self.store.answers():
            offer = json.loads(offer)
            a, b = self.items.names[offer[i]], self.items.names[offer[j]]
            values = (
                seq,
                number.get(sid),
                annotator,
                f"session {number.get(key)}" if key in number else key,  # a learner of one session: its number
                a,
                b,
                choice,
                {1: a, 2: b}.get(choice),
                round(t, 3),
                learned,
                None if undone is None else round(undone, 3),
                round(t - asked, 3),
                purpose,
            )
            rows.append(dict(zip(self.ANSWER_FIELDS, values)))
        return rows

    def answers_csv(self) -> str:
        """:meth:`answer_rows` as CSV, text cells neutralized (:func:`csv_cell`)."""
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(self.ANSWER_FIELDS)
        text = ("annotator", "learner", "first", "second", "preferred", "check")
        for row in self.answer_rows():
            w.writerow(
                [
                    csv_cell(v)
                    if k in text
                    else ""
                    if v is None
                    else f"{v:.3f}"
                    if k in ("answered_unix", "undone_unix", "seconds")
                    else v
                    for k, v in row.items()
                ]
            )
        return out.getvalue()

    def _preferences(self) -> list[dict]:
        """:meth:`answer_rows` that say a preference: choice 1 or 2, not undone; each with ``is_check`` (an attention
        or repeat check's answer; asked before checks were recorded: an answer on an attention pair)."""
        names = self.items.names
        known = {frozenset((names[a], names[b])) for a, b in self.attention}
        rows = [r for r in self.answer_rows() if r["choice"] in (1, 2) and r["undone_unix"] is None]
        for r in rows:
            old = r["check"] is None and frozenset((r["first"], r["second"])) in known
            r["is_check"] = bool(r["check"]) or old
        return rows

    def reliability(self) -> dict:
        """How far the answers agree (undone ones left out). ``sessions``: per session, its answers with a choice,
        its "can't decide" (``skips``), how many answered a pair it had answered before (``repeats``, as
        ``repeat_every`` asks or by chance) and how many of those it answered as the first time (``consistent``), and
        with ``attention`` its answers to the attention checks (``attention``), how many the known way
        (``attentive``) and ``failed_checks``, those answered the other way (a person to look at). ``between``: over
        the pairs of items that two or more sessions answered to questions the learner chose (no check: every
        session is asked those alike), each pair of sessions' first answers: how many (``compared``), how many agree
        (``agreeing``), and over how many pairs of items (``pairs``). Each session also says whether it started with
        its person's consent (``consented``) and reached its goal (``completed``: its answers with a choice; None
        without a goal)."""
        names = self.items.names
        known = {frozenset((names[a], names[b])): names[a] for a, b in self.attention}  # pair -> the known answer
        first: dict = {}  # (session, item pair) -> the item preferred the first time
        shared: dict = {}  # (session, item pair) -> the first preference on a question the learner chose
        per: dict = {}

        def row_of(r):
            fresh = {"session": r["session"], "annotator": r["annotator"], "answers": 0, "skips": 0, "repeats": 0}
            fresh.update(consistent=0, **({"attention": 0, "attentive": 0, "failed_checks": 0} if known else {}))
            return per.setdefault(r["session"], fresh)

        for r in self.answer_rows():
            if r["choice"] == 0 and r["undone_unix"] is None:
                row_of(r)["skips"] += 1
        for r in self._preferences():
            n, row = r["session"], row_of(r)
            row["answers"] += 1
            pair = frozenset((r["first"], r["second"]))
            if r["is_check"] and pair in known:  # an attention check
                row["attention"] += 1
                row["attentive"] += int(r["preferred"] == known[pair])
                row["failed_checks"] += int(r["preferred"] != known[pair])
            if (n, pair) in first:
                row["repeats"] += 1
                row["consistent"] += int(first[n, pair] == r["preferred"])
            else:
                first[n, pair] = r["preferred"]
            if not r["is_check"]:
                shared.setdefault((n, pair), r["preferred"])
        by_pair: dict = {}
        for (n, pair), preferred in shared.items():
            by_pair.setdefault(pair, []).append(preferred)
        compared = agreeing = pairs = 0
        for answers in by_pair.values():
            pairs += len(answers) > 1
            for x, y in itertools.combinations(answers, 2):
                compared += 1
                agreeing += int(x == y)
        consented, goal = self.store.consented(), getattr(self, "goal", None)
        for sid, n in self.store.session_numbers().items():
            if n in per:
                per[n]["consented"] = sid in consented
                per[n]["completed"] = None if goal is None else self.store.count_decided(sid) >= goal
        sessions = sorted(per.values(), key=lambda r: r["session"])
        return {"sessions": sessions, "between": {"compared": compared, "agreeing": agreeing, "pairs": pairs}}

    def bradley_terry_csv(self) -> str:
        """Each item's Bradley-Terry strength from the answers alone (:func:`~nvldb_pl.maths.ranking.bradley_terry`:
        no features; "can't decide", undone answers and the checks' answers left out): rank, name, log-strength, wins,
        comparisons."""
        index = {n: k for k, n in enumerate(self.items.names)}
        pairs = [
            (index[r["preferred"]], index[r["second"] if r["preferred"] == r["first"] else r["first"]])
            for r in self._preferences()
            if not r["is_check"]
        ]
        strength = bradley_terry(len(index), pairs)
        wins, seen = np.zeros(len(index), dtype=int), np.zeros(len(index), dtype=int)
        for w_, l_ in pairs:
            wins[w_] += 1
            seen[w_] += 1
            seen[l_] += 1
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["rank", "name", "log_strength", "wins", "comparisons"])
        for r, k in enumerate(np.argsort(-strength, kind="stable"), 1):
            w.writerow([r, csv_cell(self.items.names[k]), f"{strength[k]:.6f}", int(wins[k]), int(seen[k])])
        return out.getvalue()

    def ranking_csv(self, key: str = SHARED) -> str:
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["rank", "name", "score", "p_beats_average", "p_low", "p_high", "compared"])
        for row in self.ranking(key)["ranking"]:
            p = [f"{row[k]:.4f}" if k in row else "" for k in ("vs_average", "low", "high")]
            w.writerow([row["rank"], csv_cell(row["name"]), f"{row['score']:.6f}", *p, row["compared"]])
        return out.getvalue()
