"""What a page's learners have learned, as the ranking page and the exports show it (:class:`Rankings`, a mixin of
:class:`nvldb_pl.serve.annotation.Annotation`): the items best first with a probability of beating an average item
and its band, from the posterior over the item utilities given the learned answers (the default) or from the
learner's own estimate.
"""

from __future__ import annotations

import threading
from typing import Optional

import numpy as np
import torch

from ..maths.posterior import posterior_ranking_view, taste_posterior
from ..maths.ranking import ranking_view
from .worker import SHARED

RANKINGS = ("posterior", "learner")  # what the learned ranking shows (Annotation's ``ranking``)


class Rankings:
    """Needs the annotation's ``items``, ``store``, ``bandits``, ``lock``, ``ranking_from``, ``show_ranking``,
    ``learner_of``, ``counts`` and ``_item``; :meth:`_init_rankings` makes its own state."""

    def _init_rankings(self) -> None:
        self._fitting = threading.RLock()  # one taste fit at a time: the warm starts and kept fits are shared
        self._taste_cache: dict = {}  # what a fit was made from -> its posterior (the newest 8)
        self._taste_modes: dict = {}  # (learner, link) -> the modes a fit starts from
        self._fitted: dict = {}  # learner -> the rows and posterior a question was last chosen from

    def learner_for_view(self, sid: Optional[str]) -> str:
        """The learner whose ranking a view shows: a session's (checked: one of this server's, not withdrawn), else
        everyone's."""
        return self.learner_of(sid) if sid is not None else SHARED

    def shows_ranking(self) -> bool:
        """Whether annotators see the learned ranking: ``show_ranking``, or where None, unless the study has invites
        (a study's participants answer without seeing what everyone's answers made)."""
        return self.show_ranking if self.show_ranking is not None else not self.store.has_invites()

    def ranking(self, key: str = SHARED) -> dict:
        """The items best first, with their probability of beating an item of average utility and its band
        (``vs_average``, ``low``, ``high``), the answers each was compared in (``compared``), how settled the whole
        order is (``settled``: the expected share of pairs in the order shown) and the stability of the learner's
        ranking (``settle``: Kendall tau between its rankings before and after each answer). ``score``, the bands
        and ``settled``: the posterior over the item utilities given learner ``key``'s learned answers (90% bands:
        :func:`nvldb_pl.maths.posterior.posterior_ranking_view`), or with ``ranking`` ``learner`` the learner's own
        estimate (:func:`nvldb_pl.maths.ranking.ranking_view`)."""
        N = len(self.items.names)
        learned = [row for row in self.store.to_learn(key) if row[5] == 1]
        with self.lock:
            if self.ranking_from == "posterior" and key in self.bandits:
                scores, view = self._posterior_view(learned, self.bandits[key].learner.hparams["link"])
            else:
                scores = self.bandits[key].scores(self.items.contexts) if key in self.bandits else np.zeros(N)
                view = self._view(key)
        compared = np.zeros(N, dtype=int)
        for _, offer, i, j, _, _, _ in learned:
            compared[offer[i]] += 1
            compared[offer[j]] += 1
        order = np.argsort(-scores, kind="stable")
        rows = []
        for r, k in enumerate(order):
            row = {"rank": r + 1, **self._item(k), "score": float(scores[k]), "compared": int(compared[k])}
            if view is not None:
                row.update({name: float(view[name][k]) for name in ("vs_average", "low", "high")})
            rows.append(row)
        return {
            "ranking": rows,
            "settled": None if view is None else view["settled"],
            "settle": [{"answers": n, "tau": t} for n, t in self.store.taus(key)],
            **self.counts(key),
        }

    def taste_for_question(self, key: str) -> tuple:
        """(background; the server's lock not held) Learner ``key``'s rows to learn and the taste posterior a question
        is chosen from: fitted to these rows, or where another request is fitting one now, the one fitted last (a
        question waits for no fit, as it waits for no learning step; the answers since are still masked by the
        caller)."""
        if not self._fitting.acquire(blocking=False):
            fitted = self._fitted.get(key)
            if fitted is not None:
                return fitted
            self._fitting.acquire()  # no fit of this learner's yet: wait for one
        try:
            rows = self.store.to_learn(key)
            self._fitted[key] = rows, self.taste_of(key, rows)
            return self._fitted[key]
        finally:
            self._fitting.release()

    def taste_of(self, key: str, learned: Optional[list] = None, link: Optional[str] = None):
        """The taste posterior of learner ``key``'s answers (``learned``: these rows of the store's) over every item's
        own features (the file's values: :func:`nvldb_pl.maths.posterior.taste_posterior`): f [N], cov [N, N] and
        each feature map's weight. Kept for the answers it was made from: the questions asked between two answers
        read it once; each fit starts from the modes of the learner's fit before. One fit at a time."""
        rows = self.store.to_learn(key) if learned is None else learned
        link = link or self.link
        made_from = (key, link, len(rows), sum(r[0] for r in rows), rows[-1][0] if rows else 0)
        cache = self._taste_cache
        with self._fitting:
            if made_from not in cache:
                raw = self.items.raw
                first = raw[np.array([offer[i] for _, offer, i, j, *_ in rows], dtype=np.int64)]
                second = raw[np.array([offer[j] for _, offer, i, j, *_ in rows], dtype=np.int64)]
                o = torch.tensor([float(choice == 1) for *_, choice, _, _ in rows], dtype=torch.float64)
                if len(cache) >= 8:  # the newest kept
                    cache.pop(next(iter(cache)))
                modes = self._taste_modes.setdefault((key, link), {})
                cache[made_from] = taste_posterior(raw, first, second, o, link, modes=modes)
            return cache[made_from]

    def _posterior_view(self, learned: list, link: str) -> tuple[np.ndarray, dict]:
        """The posterior means [N] and view of every item from the learned answers (seq, offer, i, j, choice, ...)."""
        f, cov_f, _ = self.taste_of(None, learned, link)
        view = posterior_ranking_view(f, cov_f, link)
        return f.numpy(), {k: (v.numpy() if torch.is_tensor(v) else v) for k, v in view.items()}

    def _view(self, key: str) -> Optional[dict]:
        """(self.lock held) :func:`ranking_view` of learner ``key`` over every item; None where it gives no estimate
        (no learner yet, or one without widths)."""
        if key not in self.bandits:
            return None
        learner = self.bandits[key].learner
        try:
            est = learner.estimate(torch.as_tensor(self.items.contexts, dtype=torch.float32).unsqueeze(0))
        except NotImplementedError:
            return None
        hp = learner.hparams
        view = ranking_view(est.f[0].double(), est.norm[0].double(), float(hp.get("beta") or 1.0), hp["link"])
        return {k: (v.cpu().numpy() if torch.is_tensor(v) else v) for k, v in view.items()}
