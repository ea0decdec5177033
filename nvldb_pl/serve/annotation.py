"""People answer "A or B?" about a catalog's items; learners pick the pairs and learn from every answer.

No web code here: :class:`Annotation` is what the HTTP routes of :mod:`.app` call, and what tests
drive directly. One learner (:class:`nvldb_pl.live.DuelingBandit`, so the same ``select`` and
``observe`` as the simulated experiments) takes every session's answers, or, with
``per_annotator``, one learner an annotator (a session without an annotator name is its own). The learners
take the answers in the order committed: in the reply (the default), or (``background``) in a process of their own
(:mod:`.worker`), the questions then chosen on the learners as they last published themselves; answers may come late
and in any order.

Nothing is lost: an answer is committed to the :class:`~.store.Store` before it is learned from, and
the learners are saved every ``save_every`` answers (and on :meth:`close`). A learner's file records the last
answer it holds (its number in the database) and a digest of every answer it learned, in order. On start, each
learner is rebuilt from its file where the database holds the same answers up to that one (else from the config)
and then takes, in the order given, every answer after those: the state an uninterrupted server would have
reached. A file that holds answers the database does not (the database lost acknowledged answers, or is another
study's) is refused in one line before anything is written.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import re
import secrets
import threading
import uuid
from typing import Optional

import numpy as np
import torch

from ..live import DuelingBandit
from ..maths.ranking import check_objective, posterior_pair, question_mask
from .exports import Exports
from .items import Catalog
from .rankings import RANKINGS, Rankings
from .restore import Restore
from .store import Store
from .study import check_attention, check_completion, check_consent, check_name, clip, is_name
from .worker import SHARED, LearnerProcess, Learners, learner_file

MOST_BEHIND = 20  # answers a background learner may lag before a reply waits for it (a batch's learning or so)
STALL_SECONDS = 10.0  # a reply's longest wait for a learner that learns nothing (then no reply waits, until it does)
SESSION_ID = re.compile(r"[0-9a-f]{32}")  # what new_session hands out (uuid4's hex)


class BadRequest(ValueError):
    """A request that changes nothing: ``status`` is the HTTP status to answer with (4xx)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Annotation(Exports, Restore, Rankings):
    """The catalog ``items``, the answers in ``store``, the learners built from ``config`` (a path).

    ``offer``: items offered a question, drawn at random (the learner picks two of them; capped at the
    number of items), ``None`` = all; ``seed``: the
    learners' seed and the offers' draws; ``objective``: ``regret`` (the learner's own rule: good items shown
    most) or ``rank`` (the most informative pair of every item about the whole order; ``offer`` must then be
    ``None``, :mod:`nvldb_pl.maths.ranking`). ``ranking``: what the learned ranking shows, ``posterior`` (the
    posterior over the item utilities given the learned answers, linear in the items' features, with its 90% bands:
    :mod:`nvldb_pl.maths.posterior`) or ``learner`` (the learner's own estimate and its exploration widths, as
    before). ``show_ranking``: whether annotators see it (None: unless the study has invites; the researcher always
    does). ``stall_seconds``: a reply's longest wait for a background learner that learns nothing (stopped, say):
    after it no reply waits until it learns again, and the counts say ``stalled``. ``completion_code`` and
    ``completion_url``: what a person who reached ``questions_per_person`` answers with a choice ("can't decide"
    counts for none) is given to show they did (the code a study site such as Prolific or MTurk checks, and the link
    back to it); ``completion_code_failed``: instead, for one who answered every attention check the other way (a
    study site's code for that outcome; without it such a person is given no code). ``consent_text``: what a person agrees
    to before their first question (plain text; a session starts only with their consent, recorded).
    ``balance_sides``: the learner's first pick shown on the left or the right at random (seeded by the question),
    so that a person's leaning to one side does not pass for a preference (the default); False: always on the left.
    ``repeat_every``: every that many questions of a session, one it answered before (not a check), its sides swapped
    (learned by no one: :meth:`reliability` counts how often a person answers a pair again the same).
    ``attention``: pairs ``"BETTER>WORSE"`` of item names whose answer is known, one asked every ``attention_every``
    questions (default 10), in turn, sides at random (learned by no one, in no ranking: :meth:`reliability` counts
    how many a person answered the known way). Refuses a
    ``store`` made with other items, config, seed, offer or objective."""

    def __init__(
        self,
        items: Catalog,
        store: Store,
        config: str,
        seed: int = 0,
        offer: Optional[int] = 4,
        per_annotator: bool = False,
        save_every: int = 10,
        objective: str = "regret",
        questions_per_person: Optional[int] = None,
        background: bool = False,
        most_behind: int = MOST_BEHIND,
        ranking: str = "posterior",
        show_ranking: Optional[bool] = None,
        stall_seconds: float = STALL_SECONDS,
        completion_code: Optional[str] = None,
        completion_url: Optional[str] = None,
        completion_code_failed: Optional[str] = None,
        max_sessions: Optional[int] = None,
        max_sessions_per_client: Optional[int] = None,
        consent_text: Optional[str] = None,
        balance_sides: bool = True,
        repeat_every: Optional[int] = None,
        attention: Optional[list] = None,
        attention_every: Optional[int] = None,
    ):
        N = len(items.names)
        check_objective(objective, "--objective")
        if ranking not in RANKINGS:
            raise ValueError(f"--ranking: {ranking!r} is not one of {list(RANKINGS)}")
        self.ranking_from = ranking
        self.show_ranking = show_ranking
        self.stall_seconds = stall_seconds
        self.completion = check_completion(completion_code, completion_url, questions_per_person)
        self.completion_failed = None  # the code alone: the study site's link carries the other code
        if completion_code_failed is not None:
            if not attention:
                raise ValueError("--completion-code-failed: the code for failed attention checks; give --attention")
            try:
                self.completion_failed = check_completion(completion_code_failed, None, questions_per_person)
            except ValueError as err:
                raise ValueError(str(err).replace("--completion-code:", "--completion-code-failed:")) from None
        self.consent_text = check_consent(consent_text)
        self.balance_sides = bool(balance_sides)
        if repeat_every is not None and (type(repeat_every) is not int or repeat_every < 2):
            raise ValueError(
                f"--repeat-every: an integer >= 2 (every that many questions one repeats), got {clip(repeat_every)}"
            )
        self.repeat_every = repeat_every
        self.attention, self.attention_every = check_attention(attention, attention_every, items.names)
        if offer is not None and (isinstance(offer, bool) or not isinstance(offer, int) or offer < 2):
            raise ValueError(f"--offer: must be an integer >= 2 (items offered a question), got {offer!r}")
        if objective == "rank" and offer is not None and offer < N:
            raise ValueError(
                f"--offer: objective rank chooses the pair among every item (it learns the whole order); "
                f"--offer {offer} would not take effect, leave it out (or give --objective regret)"
            )
        if save_every < 1:
            raise ValueError(f"--save-every: must be >= 1, got {save_every}")
        if seed < 0:
            raise ValueError(f"--seed: must be >= 0, got {seed}")
        if questions_per_person is not None and (type(questions_per_person) is not int or questions_per_person < 1):
            raise ValueError(f"--questions-per-person: must be an integer >= 1, got {clip(questions_per_person)}")
        self.goal = questions_per_person
        for flag, value in (("--max-sessions", max_sessions), ("--max-sessions-per-client", max_sessions_per_client)):
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"{flag}: must be an integer >= 1, got {clip(value)}")
        self.max_sessions, self.max_sessions_per_client = max_sessions, max_sessions_per_client
        self._client_sessions: dict = {}  # client address -> sessions it started since this server started
        if type(most_behind) is not int or most_behind < 0:
            raise ValueError(f"--most-behind: must be an integer >= 0, got {clip(most_behind)}")
        self.most_behind = most_behind
        self.items, self.store, self.config, self.seed = items, store, config, int(seed)
        self.offer, self.per_annotator, self.save_every = min(offer or N, N), bool(per_annotator), int(save_every)
        with open(config, "rb") as fh:
            config_text = fh.read().decode("utf-8", "replace")
        self.objective = objective
        self._fresh()  # the config builds a learner: a bad one is refused now (nothing claimed), not at a question
        if store.meta() and "objective" not in store.meta() and objective != "regret":  # made before objectives
            raise ValueError(
                f"--db: {store.path} was made with objective = 'regret', this server has {objective!r}; "
                f"start with those, or give another --db"
            )
        store.claim(
            {
                "items_sha256": items.sha256,
                "config": config_text,
                "seed": self.seed,
                "offer": self.offer,
                "per_annotator": self.per_annotator,
                "objective": objective,
            }
        )
        self.lock = threading.RLock()  # the server's learners (the database has its own)
        self.undo_lock = threading.Lock()  # one undo at a time
        self._init_rankings()
        self.learners = Learners(items.contexts, self._fresh, store.path, self.save_every, self._record)
        self.link = str(self._fresh().learner.hparams["link"])  # the answers' link g: the taste posterior's
        self.repeats_avoided = 0  # questions where the learner's pick was the pair just asked (objective regret)
        files = self._learner_files()  # checked, every one, before anything is written
        self.restored = {k: self._restore(k, files.get(k)) for k in store.learners()}
        # background: a reply waits for no learning; the learners take the answers in order, in a process
        spec = (config, items.contexts.shape[1], self.seed, objective)
        self.worker = LearnerProcess(self.learners, spec, self._record) if background else None

    # ------------------------------------------------------------------ learners
    def snapshot_path(self, key: str) -> str:
        return learner_file(self.store.path, key)

    @property
    def bandits(self) -> dict:
        """The learners by key as the server holds them: the learners themselves, or (background) their copies as
        the learning process last published them."""
        return self.learners.bandits if self.worker is None else self.worker.published

    def _record(self, kind: str, *args) -> None:
        """What the learners did, in the database (:class:`.worker.Learners`' reports)."""
        {
            "learned": self.store.learned,
            "learned_all": self.store.learned_all,  # a run of a batch's learned answers, in one transaction
            "refused": self.store.refused,
            "saved": self.store.set_snapshot,
        }[kind](*args)

    def _fresh(self) -> DuelingBandit:
        return DuelingBandit.from_config(  # the catalog's contexts are standardized already (items.py)
            self.config, dim=self.items.contexts.shape[1], seed=self.seed, objective=self.objective, standardize=False
        )

    def close(self) -> None:
        """Learn what waits, then save every learner."""
        if self.worker is not None:
            self.worker.stop(self.stall_seconds)
            return
        with self.lock:
            for key in self.learners.bandits:
                self.learners.save(key)

    # ------------------------------------------------------------------ sessions, questions, answers
    def invite(self, annotator: str) -> str:
        """Invite ``annotator``: the secret of their link (only its sha256 is kept; a second invite replaces the first).
        Once a study has invites, a session starts only from one."""
        check_name(annotator, "--invite")
        secret = secrets.token_urlsafe(18)
        self.store.add_invite(annotator.strip(), hashlib.sha256(secret.encode()).hexdigest())
        return secret

    def new_session(
        self, annotator: Optional[str] = None, invite: Optional[str] = None, consent=None, client: Optional[str] = None
    ) -> str:
        """A session; with ``invite`` (a secret of :meth:`invite`), its annotator's. Refused: an unknown invite, once
        the study has invites a session without one (nobody answers as another by naming them), where the study
        asks for consent (``consent_text``), a session without ``consent`` True (recorded with the text's digest), and
        without an invite, one past ``max_sessions`` in all or past ``max_sessions_per_client`` from ``client`` (its
        address; counted since this server started) (429)."""
        if self.consent_text is not None and consent is not True:
            raise BadRequest(403, "consent: this study asks for the person's consent first (the page shows its text)")
        if self.consent_text is None and consent is not None:
            raise BadRequest(422, "consent: this study asks for none; leave it out")
        secret = None
        if invite is not None:
            secret = hashlib.sha256(invite.encode()).hexdigest() if isinstance(invite, str) else None
            name = self.store.invited(secret) if secret else None
            if name is None:
                raise BadRequest(
                    403, "invite: not an invite of this study (or withdrawn); open the link the researcher gave you"
                )
            if annotator is not None and annotator != name:
                raise BadRequest(422, "annotator: an invite names its annotator; leave annotator out")
            annotator = name
        elif self.store.has_invites():
            raise BadRequest(403, "invite: this study's annotators are invited; open the link the researcher gave you")
        if annotator is not None and not is_name(annotator):
            raise BadRequest(
                422, "annotator: a name of 1 to 100 printable characters (no control or direction marks), or none"
            )
        # an invite's link starts one session, its goal once: opened again (another tab, device), the same one
        with self.lock:
            started = self.store.invite_session(secret) if secret else None
            if started is not None:
                return started
            if secret is None and self.max_sessions is not None and self.store.count_sessions() >= self.max_sessions:
                raise BadRequest(429, f"session: this study has its {self.max_sessions} sessions; no more start")
            started_here = self._client_sessions.get(client, 0)
            if (
                secret is None
                and self.max_sessions_per_client is not None
                and started_here >= self.max_sessions_per_client
            ):
                raise BadRequest(
                    429,
                    f"session: {self.max_sessions_per_client} sessions were started from this address; no more start",
                )
            self._client_sessions[client] = started_here + 1
            sid = uuid.uuid4().hex
            agreed = hashlib.sha256(self.consent_text.encode()).hexdigest() if self.consent_text is not None else None
            self.store.add_session(sid, annotator.strip() if annotator else None, secret, agreed)
        return sid

    def withdraw(self, annotator: str) -> None:
        """Withdraw ``annotator``'s invite: their link starts nothing more and their session answers no more (its
        answers stay). Refused: a name without an invite."""
        if not self.store.withdraw_invite(annotator):
            raise ValueError(f"--withdraw: {clip(annotator)} has no invite in this study")

    def _session(self, sid) -> tuple:
        found = self.store.session(sid) if isinstance(sid, str) and SESSION_ID.fullmatch(sid) else None
        if found is None:
            raise BadRequest(404, "session: not a session of this server; start one with POST /api/session")
        sid, annotator, withdrawn = found
        if withdrawn:
            raise BadRequest(
                403, "session: its invite was replaced or withdrawn; open the link the researcher gave you"
            )
        return sid, annotator

    def learner_of(self, sid: str) -> str:
        _, annotator = self._session(sid)
        return (annotator or sid) if self.per_annotator else SHARED

    def _item(self, k: int) -> dict:
        it = self.items
        return {
            "index": int(k),
            "name": it.names[k],
            "text": it.text[k] if it.text else None,
            "image": it.image[k] if it.image else None,
            "features": {f: float(v) for f, v in zip(it.features, it.raw[k])},
        }

    def question(self, sid: str) -> dict:
        """The session's unanswered question if it has one, else a new one the learner picks (background: on the
        learner as last published, never waiting for a learning step)."""
        key = self.learner_of(sid)
        fitted = None  # (background, objective rank) the posterior it is chosen from, fitted outside the lock
        if self.worker is not None and self.objective == "rank":
            fitted = self.taste_for_question(key)
        with self.lock:  # (questions are numbered one at a time)
            if self.goal is not None and self.store.count_decided(sid) >= self.goal:
                # the person has answered all they were asked (with a choice: "can't decide" is no answer): with the
                # study's completion code (and link), or with --completion-code-failed where they answered every
                # attention check the other way
                failed = self.failed_checks(sid)
                code = self.completion_failed if failed else self.completion
                return {"done": True, **self.counts(key, sid), **({"completion": code} if code else {})}
            pending = self.store.pending(sid)
            if pending is None:
                qn = self.store.last_question() + 1
                N = len(self.items.names)
                rng = np.random.default_rng([self.seed, qn])
                offer = (
                    sorted(rng.choice(N, size=self.offer, replace=False).tolist()) if self.offer < N else list(range(N))
                )
                # this question's number in the session (asked of the database only where a check needs it)
                asked = self.store.count_questions(sid) + 1 if self.repeat_every or self.attention else 0
                purpose = ""  # a question the learner chose (a check's answer is learned by no one)
                if self.attention and asked % self.attention_every == 0:
                    # an attention check: a pair whose answer is known, its sides at random
                    better, worse = self.attention[(asked // self.attention_every - 1) % len(self.attention)]
                    offer, i, j, purpose = list(range(N)), better, worse, "attention"
                    if rng.random() < 0.5:
                        i, j = j, i
                elif (
                    self.repeat_every and asked % self.repeat_every == 0 and (earlier := self.store.answered_pairs(sid))
                ):
                    # a consistency check: a pair the person answered, asked again with its sides swapped
                    offer, j, i = earlier[int(rng.integers(len(earlier)))]
                    purpose = "repeat"
                elif self.objective == "rank":  # offer: every item
                    i, j = self._rank_question(key, sid, fitted)
                else:
                    i, j = self._select(key, offer)
                    last = self.store.last_pair(sid)
                    if last is not None and {offer[i], offer[j]} == set(last):  # the pair just asked, again
                        i, j = self._instead_of_repeat(key, sid, offer)
                if self.balance_sides and rng.random() < 0.5:  # the learner's first pick on the right half the time
                    i, j = j, i  # (stored as shown: answers and exports name the left item first)
                pending = (self.store.add_question(sid, key, offer, i, j, purpose), offer, i, j)
        qid, offer, i, j = pending
        return {"question": qid, "first": self._item(offer[i]), "second": self._item(offer[j]), **self.counts(key, sid)}

    def _rank_question(self, key: str, sid: str, fitted: Optional[tuple] = None) -> tuple:
        """(self.lock held; objective rank) The pair of largest BALD under the taste posterior of learner ``key``'s
        answers over every item's own features (:meth:`taste_of`; ``fitted``: the rows and posterior of
        :meth:`taste_for_question`), never the pair this session was just asked nor one out to someone else and not
        answered yet, and while items were never compared, a pair of them
        (:func:`nvldb_pl.maths.ranking.question_mask`)."""
        if fitted is None:
            rows = self.store.to_learn(key)
            fitted = rows, self.taste_of(key, rows)
        rows, (f, cov, _) = fitted
        shown = torch.zeros(len(self.items.names), dtype=torch.bool)
        shown[list({offer[k] for _, offer, i, j, *_ in rows for k in (i, j)})] = True
        last = self.store.last_pair(sid)
        return posterior_pair(f, cov, question_mask(shown, last, self.store.open_pairs(key)))

    def _instead_of_repeat(self, key: str, sid: str, offer: list) -> tuple:
        """(self.lock held) The learner's pick was the pair this session was just asked: the most informative other
        pair of ``offer`` under the taste posterior instead (counted in the status, ``repeats_avoided``)."""
        self.repeats_avoided += 1
        f, cov, _ = self.taste_of(key)
        shown = torch.ones(len(offer), dtype=torch.bool)  # the learner's choice of items stands; only the pair moves
        last = self.store.last_pair(sid)
        return posterior_pair(f[offer], cov[offer][:, offer], question_mask(shown, tuple(offer.index(k) for k in last)))

    def _select(self, key: str, offer: list) -> tuple:
        """(self.lock held) The pair learner ``key`` picks among ``offer``: on the learner itself, or (background) on
        its copy as last published, which the questions asked since join (a learner with no answer yet: a fresh
        one, as the learning process makes)."""
        if self.worker is None:
            return self.learners.bandit(key).select(self.items.contexts[offer])
        if key not in self.worker.asking:
            fresh = self._fresh()
            self.worker.published[key], self.worker.asking[key] = fresh, copy.deepcopy(fresh)
        bandit = self.worker.asking[key]
        i, j = bandit.select(self.items.contexts[offer])
        try:  # the next question looks elsewhere until the answers come (on this throwaway copy itself: no copy)
            bandit.pending(self.items.contexts[offer], i, j, in_place=True)
        except ValueError:  # the copy is spoilt: the learner as last published asks the next question
            self.worker.asking[key] = copy.deepcopy(self.worker.published[key])
        return i, j

    def answer(self, sid: str, qid, choice) -> dict:
        """Record ``choice`` (1: the first item shown, 2: the second, 0: can't decide) to question ``qid`` of
        session ``sid``, then learn from it. Refused (nothing changed): an unknown session or question, another
        session's question, one already answered, a choice not 0, 1 or 2."""
        if type(qid) is not int:
            raise BadRequest(422, f"question: a question number, got {clip(qid)}")
        if type(choice) is not int or choice not in (0, 1, 2):
            raise BadRequest(422, f"choice: 1 (the first item), 2 (the second) or 0 (can't decide), got {clip(choice)}")

        def check():  # in the transaction that commits it (a group's: store.add_answer)
            return self._check(sid, qid)

        if self.worker is not None:  # committed and handed on in the database's order; the reply waits for no learning

            def hand_on(seq, q):  # a check's answer (q[4]) is learned by no one
                return self.worker.put(q[0], seq, q[1], q[2], q[3], choice) if choice and not q[4] else 0

            seq, (key, *_), place = self.store.add_answer(qid, sid, choice, check, hand_on)
            # committed: the reply waits only where the learner lags far behind
            self.worker.wait_below(place, self.most_behind, self.stall_seconds)
            return {"answer": seq, "refused": None, **self.counts(key, sid)}
        with self.lock:  # committed and learned in one: the learner takes the answers in the database's order
            seq, (key, offer, i, j, purpose), _ = self.store.add_answer(qid, sid, choice, check)
            refused = self.learners.take(key, seq, offer, i, j, choice) if choice and not purpose else None
            return {"answer": seq, "refused": refused, **self.counts(key, sid)}

    def _check(self, sid: str, qid: int) -> tuple:
        """Question ``qid`` of session ``sid`` open to an answer (the database's lock held: in the transaction that
        commits it); (learner, offer, i, j, purpose: "" or the check it is)."""
        self._session(sid)
        q = self.store.question(qid) if 0 < qid < 2**63 else None  # (SQLite's integers: below 2^63)
        if q is None:
            raise BadRequest(404, f"question: {qid} was never asked")
        session, key, offer, i, j, answered, purpose = q
        if session != sid:
            raise BadRequest(403, f"question: {qid} was asked in another session")
        if answered:
            raise BadRequest(409, f"question: {qid} is already answered")
        return key, offer, i, j, purpose

    def undo(self, sid: str) -> dict:
        """Take back the session's last answer: kept in the database as undone, learned from by no one (its learner
        as it was before it), and its pair asked again. Refused where nothing is left to undo, or where the learner
        has learned another answer since (another person's, with one learner for all)."""
        self._session(sid)
        if self.worker is not None and not self.worker.drain(self.stall_seconds):  # the answer learned first
            raise BadRequest(
                503, f"undo: the learner has learned nothing for {self.stall_seconds:g} s; take it back a little later"
            )
        with self.undo_lock, self.lock if self.worker is None else contextlib.nullcontext():
            last = self.store.last_answer(sid)
            if last is None:
                raise BadRequest(409, "undo: this session has no answer to take back")
            seq, qid, key, choice, learned = last
            # first the learner without it (saved), then the database: a crash between keeps it whole
            if learned == 1 and not (self.learners.undo if self.worker is None else self.worker.undo)(key, seq):
                raise BadRequest(
                    409,
                    "undo: the learner has moved on since (another answer, or a restart); it can no longer be undone",
                )
            self.store.undo(seq)
            _, _, offer, i, j, _, purpose = self.store.question(qid)
            self.store.add_question(sid, key, offer, i, j, purpose)  # the same pair, asked again
            return {"undone": seq, **self.counts(key, sid)}

    def failed_checks(self, sid: str) -> bool:
        """The session answered at least one attention check and every one the other way."""
        if not self.attention:
            return False
        better = {frozenset(pair): pair[0] for pair in self.attention}
        answers = self.store.check_answers(sid, "attention")
        wrong = [
            (offer[i] if c == 1 else offer[j]) != better[frozenset((offer[i], offer[j]))] for offer, i, j, c in answers
        ]
        return bool(wrong) and all(wrong)

    def counts(self, key: str, sid: Optional[str] = None) -> dict:
        """Answers kept in all, answers ``key``'s learner holds, and (a session given) the session's own and its
        goal (None: no end)."""
        if self.worker is not None:
            learned = self.worker.observed.get(key, 0)
        else:
            learned = self.learners.bandits[key].num_observed if key in self.learners.bandits else 0
        out = {"answers": self.store.count_answers(), "learned": learned}
        out["behind"] = self.worker.behind if self.worker is not None else 0  # answers kept, not yet learned
        if self.worker is not None:  # the page says which: a learner that stopped, or that learns nothing for now
            out.update(failed=self.worker.failed, stalled=self.worker.stalled)
        if sid is not None:
            yours = self.store.count_answers(sid) if self.goal is None else self.store.count_decided(sid)
            out.update(yours=yours, goal=self.goal)
        return out
