"""The learner in front of real feedback: ask for a pair, tell the answer, without a simulator.

    bandit = DuelingBandit.from_config("configs/live.yaml", dim=5)   # or .from_checkpoint(path)
    i, j = bandit.select(contexts)            # contexts [K, d]: the K items on offer now
    bandit.observe(contexts, i, j, outcome)   # outcome 1: item i was preferred, 0: item j was
    bandit.scores(contexts)                   # estimated utilities f(x_k) [K]: the learned ranking
    bandit.save("bandit.pt")

``objective``: ``regret`` (the default: the learner's own rule, which shows good items, Alg. 1 line 6) or
``rank`` (the pair whose answer tells most about the order of the items on offer: BALD under the posterior over
their utilities that the answers give, :func:`nvldb_pl.maths.posterior.taste_posterior`, linear, quadratic or (from 40
answers) separable in the features as the answers' evidence says; never the pair just asked, and every item on offer shown before any is shown
twice): a study that wants the whole ranking asks ``rank``. Either way the answer is learned by the same update.

One learner (S = 1 seed) of the package, driven through the very methods the Lightning loop
calls each round (``propose``, ``learn``; see :mod:`nvldb_pl.learners.base`): every line of selection,
loss, refit and Gram upkeep is shared, nothing is re-implemented here.

Answers may come late, in batches and in any order. ``select`` changes nothing in the learner
(only the Thompson-sampling draws advance), so several pairs can be shown before any answer;
``observe`` first recomputes, with the current parameters, what the update needs from its pair
(``memo``: Delta phi for the incremental Gram, NDB's gradient difference), then ``learn``s the
duel (appends it and runs one update); an answer that would leave the learner non-finite, or an
interrupt during the update, leaves it as it was before the call. With each answer given at once, this is exactly the loop's round
(``tests/live/test_live.py`` checks a live bandit fed the stream's contexts and answers against a
``fit`` run, selection by selection). VACDB is not offered live: a duel's layer and weight are
decided at selection time for that round only. ``oracle_variance`` needs the true utilities,
which live feedback does not have.

The history grows (doubling) past the configured horizon; a round's cost grows with the number
of answers, as in the paper's loop. Checkpoints are pickles: load only files you trust.
"""

from __future__ import annotations

import copy
import os
from typing import Optional, Sequence

import numpy as np
import torch

from ..maths.checks import typed_args, LINKED_FROM_DATA
from ..machinery.host import atomic_open, keep_freed_memory
from ..learners.base import DuelingLearner
from ..learners.registry import init_args, learner_class, learner_path
from ..migrations import VERSION as MIGRATION_VERSION
from ..maths.posterior import taste_posterior
from ..maths.ranking import check_objective, posterior_pair, question_mask
from .files import FORMAT, as_index, check_seed, config_arguments, read_checkpoint
from .inputs import InputMap, as_contexts


def _check_two(i: int, j: int, what: str) -> None:
    if i == j:
        raise ValueError(f"i, j: both are item {i}; {what} (nothing was recorded)")


def _learner_args(cls: type, args: dict, where: str) -> dict:
    """``args`` checked against ``cls.__init__`` (an unknown name is an error naming it)."""
    accepted = init_args(cls)
    unknown = sorted(set(args) - accepted)
    if unknown:
        raise ValueError(
            f"{where}: {cls.__name__} has no argument(s) {unknown}; it takes {sorted(accepted - set(LINKED_FROM_DATA))}"
        )
    return typed_args(cls, dict(args), where)  # "false" is false, not a true string


def _learn(L, contexts: torch.Tensor, i: int, j: int, outcome: int, train: bool) -> None:
    """Learner ``L`` (one seed) takes the duel (i, j) of ``contexts`` [1, K, d] answered ``outcome`` (Alg. 1 lines
    7-13; ``train`` as :meth:`DuelingBandit.observe`'s), its history grown where full."""
    if L.t >= L.hist_o.shape[-1]:
        L.grow_history(2 * L.hist_o.shape[-1])
    a1, a2 = torch.tensor([int(i)]), torch.tensor([int(j)])
    duel = {"a1": a1, "a2": a2, **L.memo(contexts, a1, a2), "contexts": contexts}
    L.learn({**duel, "o": torch.tensor([float(outcome)]), "du": torch.zeros(1, dtype=torch.float64), "train": train})


class DuelingBandit:
    """Ask/tell use of one learner. Build it with :meth:`create`, :meth:`from_config` or
    :meth:`from_checkpoint`; all arrays are per call: contexts [K, d] (K may change between calls)."""

    def __init__(
        self,
        learner: DuelingLearner,
        seed: int = 0,
        generator_state: Optional[torch.Tensor] = None,
        optimizer_state: Optional[dict] = None,
        objective: str = "regret",
        standardize: bool = False,
        input_map: Optional[dict] = None,
    ):
        self.objective = check_objective(objective)
        if type(standardize) is not bool:
            raise ValueError(f"standardize: must be True or False, got {standardize!r}")
        self.standardize = standardize  # the learner sees every context through input_map (:mod:`.inputs`)
        self.input_map = InputMap.from_state(input_map) if standardize else None
        self.saved_meta: Optional[dict] = None  # what the file it was loaded from recorded beside it (save's meta)
        keep_freed_memory()  # an answer's temporaries reused, not faulted in again (speed only)
        if objective == "rank" and type(learner).estimate is DuelingLearner.estimate:
            raise ValueError(
                f"objective: rank reads the learner's estimate (utilities and widths), which "
                f"{type(learner).__name__} has not; use NVLDB, NDB, CoLSTIM or MaxInP"
            )
        if not type(learner).LIVE:
            raise ValueError(
                f"model: {type(learner).__name__} cannot be used live (its update needs the "
                f"selection of the same round); use NVLDB, NDB, CoLSTIM, MaxInP or RandomPair"
            )
        if getattr(learner, "variance_mode", None) == "oracle":
            raise ValueError("model.oracle_variance: needs the true utilities, which live feedback does not have")
        if learner.num_local != 1:
            raise ValueError(f"model: a live bandit holds one seed, this learner holds {learner.num_local}")
        self.learner = learner
        if learner.hparams.get("distinct_arms") is False:
            raise ValueError(
                "model.distinct_arms: false lets the rule pick an item against itself, which no person can answer; "
                "a live bandit needs true (the default)"
            )
        self.seed = int(seed)
        # a fit's default may self-duel where sure; a person is never asked "A or A?"
        learner.attach_optimizer(optimizer_state, self_duels=False)
        self._gen = torch.Generator().manual_seed(self.seed)  # Thompson-sampling draws
        if generator_state is not None:
            self._gen.set_state(generator_state)
        self._made_up: set[int] = set()  # history rows of pending questions (a made-up outcome: not an answer)

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        learner: str = "NVLDB",
        dim: int = 5,
        horizon: int = 1000,
        link: str = "logistic",
        seed: int = 0,
        objective: str = "regret",
        standardize: bool = True,
        items=None,
        **model,
    ) -> "DuelingBandit":
        """A fresh learner (a name of :data:`nvldb_pl.learners.registry.LEARNERS`, or the import path of one's own
        :class:`~nvldb_pl.learners.base.DuelingLearner` subclass) with its initial parameters drawn
        from ``seed``'s stream (as seed id 0 of a run with base seed ``seed``). ``horizon``: the
        T the learner plans for (preallocation; CoLSTIM's and the linear widths' log T). ``objective``:
        ``regret`` or ``rank`` (the module's doc). ``standardize``: the learner sees each feature standardized by a
        map fitted on ``items`` [N, d] (the catalog) where given, else on the first call's contexts, then frozen
        (:mod:`nvldb_pl.live.inputs`); False: the contexts as given (already on one scale)."""
        check_seed(seed)
        check_objective(objective)
        if items is not None and standardize is not True:
            raise ValueError("items: they fit the standardizing map; with standardize false they would change nothing")
        cls_ = learner_class(learner)
        args = _learner_args(cls_, model, "model")
        module = cls_(dim=dim, arms=2, rounds=horizon, num_seeds=1, link=link, **args)
        module.init_parameters(seed, [0])
        fitted = None if items is None else InputMap.fitted(as_contexts(items, dim)).state()
        return cls(module, seed, objective=objective, standardize=standardize, input_map=fitted)

    @classmethod
    def from_config(
        cls,
        config,
        dim: Optional[int] = None,
        horizon: Optional[int] = None,
        seed: Optional[int] = None,
        objective: str = "regret",
        standardize: bool = True,
        items=None,
    ) -> "DuelingBandit":
        """From a YAML file (or its dict) in the format of ``configs/*.yaml``: ``model`` (NVLDB's
        arguments, or ``class_path`` + ``init_args``), ``data.dim``, ``data.link``,
        ``data.rounds`` (the horizon) and ``seed_everything``; keyword arguments override them (``standardize``,
        ``items``: :meth:`create`'s)."""
        args, where = config_arguments(config, dim, horizon, seed)
        try:
            return cls.create(objective=objective, standardize=standardize, items=items, **args)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None

    @classmethod
    def from_checkpoint(cls, path: str, seed_index: int = 0, objective: Optional[str] = None) -> "DuelingBandit":
        """From :meth:`save`'s file, or from a ``fit`` run's ``last.ckpt`` (then seed ``seed_index``
        of its S seeds: its network, Gram matrix, optimizer state and history go on learning). ``objective``:
        ``None`` keeps the save's (``regret`` for a fit checkpoint)."""
        args, meta = read_checkpoint(path, seed_index, objective)
        bandit = cls(**args)
        bandit.saved_meta = meta
        return bandit

    # ------------------------------------------------------------------ ask / tell
    @property
    def dim(self) -> int:
        return int(self.learner.hparams.dim)

    @property
    def num_observed(self) -> int:
        """Answers learned from so far."""
        return self.learner.t

    def select(self, contexts, noise: Optional[torch.Tensor] = None) -> tuple[int, int]:
        """The pair (i, j) to show from ``contexts`` [K, d] (Alg. 1 line 6). ``noise`` [1, K, K]
        standard normals replaces this bandit's own Thompson-sampling draw (tests)."""
        x = self._contexts(contexts)
        K = x.shape[0]
        if noise is None:
            noise = torch.randn(1, K, K, generator=self._gen, dtype=torch.float64)
        if self.objective == "rank":  # the most informative pair about the order (the module's doc)
            return self._rank_question(x)
        L = self.learner
        flags = (L.first_bad_round.clone(), L.first_bad_context.clone())
        try:
            a1, a2 = L.select(x.unsqueeze(0), noise, L.t + 1)
            L.check_finite()
        except FloatingPointError as err:  # these contexts only: the learner as it was, usable
            L.first_bad_round.copy_(flags[0])
            L.first_bad_context.copy_(flags[1])
            raise ValueError(
                f"contexts: the learner's estimate of these items is not finite ({str(err).split(':')[0]}); "
                f"rescale the features (nothing changed)"
            ) from None
        return int(a1[0]), int(a2[0])

    def _rank_question(self, x: torch.Tensor) -> tuple[int, int]:
        """(objective rank) The pair of largest BALD under the taste posterior of the answers so far over the items
        x [K, d] (:func:`nvldb_pl.maths.posterior.taste_posterior`), never the pair just asked and, while an item of
        x was never shown, one with such an item (:func:`nvldb_pl.maths.ranking.question_mask`)."""
        L = self.learner
        t = L.t
        pairs = L.history()[0].to(torch.float64).cpu()  # [t, 2, d]: answered and pending pairs
        answered = [r for r in range(t) if r not in self._made_up]
        o = L.hist_o[0, :t].to(torch.float64).cpu()[answered]
        f, cov, _ = taste_posterior(x, pairs[answered, 0], pairs[answered, 1], o, str(L.hparams["link"]))
        rows = x.to(pairs.dtype).cpu()
        same = (rows.unsqueeze(1).unsqueeze(1) == pairs.unsqueeze(0)).all(dim=-1)  # [K, t, 2]: item k is pair r's
        last = None
        if t:
            first, second = torch.nonzero(same[:, -1, 0]), torch.nonzero(same[:, -1, 1])
            if len(first) and len(second):
                last = (int(first[0]), int(second[0]))
        return posterior_pair(f, cov, question_mask(same.flatten(1).any(dim=1), last))

    def observe(self, contexts, i: int, j: int, outcome, train: bool = True) -> None:
        """Learn from one answer: ``outcome`` 1 (or True) if item i of ``contexts`` was preferred
        to item j, 0 if j was (Alg. 1 lines 7-13). Pairs may be answered in any order. ``train`` False: the
        answer joins the history and V, and the network's steps wait for the next answer observed with
        ``train`` True (answers coming faster than they can be learned one by one; NVLDB and NDB put them
        off, other learners train anyway). The same answers with the same ``train`` give the same learner."""
        if type(train) is not bool:
            raise ValueError(f"train: must be True or False, got {train!r}")
        x, i, j = self._checked_items(contexts, i, j)
        if torch.is_tensor(outcome):
            if outcome.numel() != 1:
                raise ValueError(f"outcome: one answer, 1 or 0; got a tensor of shape {list(outcome.shape)}")
            outcome = outcome.item()
        if isinstance(outcome, np.ndarray):
            if outcome.size != 1:
                raise ValueError(f"outcome: one answer, 1 or 0; got an array of shape {list(outcome.shape)}")
            outcome = outcome.item()
        if isinstance(outcome, (bool, np.bool_)):
            outcome = int(outcome)
        if outcome not in (0, 1):
            raise ValueError(f"outcome: must be 1 (item i preferred) or 0 (item j preferred), got {outcome!r}")
        _check_two(i, j, "an answer compares two different items")
        self.learner = self._learned(x, i, j, outcome, train, "learning from this answer")
        self._made_up.discard(self.learner.t - 1)  # this row is an answer (a pending one there was restored away)

    def pending(self, contexts, i: int, j: int, in_place: bool = False) -> None:
        """Pair (i, j) of ``contexts`` [K, d] asked and not answered yet: it joins this bandit's V as a duel whose
        steps wait (``observe``'s ``train`` False; V's weight reads the estimate, not the outcome), so that pairs
        chosen on it next look elsewhere, as GP-BUCB's hallucinated observations do for a batch. For a copy the
        answers never reach (the page's questions between two learning steps): its history holds a made-up
        outcome. A learner that cannot put off its steps (``DEFERS_TRAINING`` False) is left as it is. Checked as
        :meth:`observe` is (contexts, the two indices, a learner left finite and able to choose), nothing changed
        where refused. ``in_place``: the duel joins this learner itself, with no copy and no probe (a bandit that is
        itself a disposable copy, as the page's between two learning steps); a learner left with a non-finite tensor
        is refused after the fact, and the bandit is then to be thrown away."""
        x, i, j = self._checked_items(contexts, i, j)
        _check_two(i, j, "a question compares two different items")
        if not type(self.learner).DEFERS_TRAINING:
            return
        self._made_up.add(self.learner.t)  # the row it takes: its outcome is made up
        if not in_place:
            self.learner = self._learned(x, i, j, 0, False, "this pending question")
            return
        try:
            _learn(self.learner, x.unsqueeze(0), i, j, 0, False)
            self.learner.check_finite()
            state = self.learner.state_dict()  # every tensor it holds finite (no probe: a look at each)
            bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
            if bad:
                raise FloatingPointError(f"non-finite {', '.join(bad)}")
        except (FloatingPointError, torch.linalg.LinAlgError) as err:
            raise ValueError(f"contexts: this pending question left the learner non-finite ({err})") from None

    def _contexts(self, contexts, min_items: int = 2) -> torch.Tensor:
        """contexts [K, d] checked (:func:`_as_contexts`) and, under ``standardize``, mapped as the learner reads them:
        the first call of two contexts or more fits the map (:class:`nvldb_pl.live.inputs.InputMap`), frozen then."""
        x = as_contexts(contexts, self.dim, min_items)
        if self.standardize and self.input_map is None and x.shape[0] >= 2:
            self.input_map = InputMap.fitted(x)
        return x if self.input_map is None else self.input_map(x)

    def _checked_items(self, contexts, i, j) -> tuple:
        """contexts [K, d] checked and mapped (:meth:`_contexts`) and i, j item indices in [0, K), as ints."""
        x = self._contexts(contexts)
        K = x.shape[0]
        for name, k in (("i", i), ("j", j)):
            index = as_index(k)
            if index is None or not 0 <= index < K:
                raise ValueError(f"{name}: must be an item index in [0, {K}), got {k!r}")
        return x, as_index(i), as_index(j)

    def _learned(self, x: torch.Tensor, i: int, j: int, outcome: int, train: bool, what: str):
        """A copy of the learner that has learned the duel (i, j) of x [K, d], probed: finite, and able to choose on
        these contexts; the learner as it was stays whole (a refusal, an interrupt halfway, restore)."""
        K = x.shape[0]
        L = copy.deepcopy(self.learner)
        contexts = x.unsqueeze(0)
        try:
            _learn(L, contexts, i, j, outcome, train)
            L.check_finite()  # before the probe: a non-finite update is named as such
            # the next selection must be possible too: a probe on these contexts (no Thompson draw spent)
            L.select(contexts, torch.zeros(1, K, K, dtype=torch.float64), L.t + 1)
            L.check_finite()
            if not bool(torch.isfinite(L.scores(contexts)).all()):
                raise FloatingPointError("non-finite estimated utilities")
        except (FloatingPointError, torch.linalg.LinAlgError) as err:
            raise ValueError(
                f"contexts: {what} would leave the learner non-finite ({err}); nothing was recorded, the learner is "
                f"as before"
            ) from None
        return L

    def mark(self) -> tuple:
        """The bandit as it stands, to go back to with :meth:`restore`: its learner (which :meth:`observe` never
        changes in place: it learns on a copy, so a mark costs no copy) and the state of its Thompson draws."""
        return self.learner, self._gen.get_state()

    def restore(self, mark: tuple) -> None:
        """The bandit as it was at ``mark`` (:meth:`mark`'s): every answer observed since forgotten."""
        self.learner, draws = mark
        self._gen.set_state(draws)

    def scores(self, contexts) -> np.ndarray:
        """Estimated utilities f(x_k) of ``contexts`` [K, d] (K >= 1): sort them for the learned ranking."""
        x = self._contexts(contexts, min_items=1)
        f = self.learner.scores(x.unsqueeze(0))[0].cpu().numpy()
        if not np.all(np.isfinite(f)):
            bad = [int(k) for k in np.nonzero(~np.isfinite(f))[0]]
            raise ValueError(
                f"contexts: the learner's estimate of item(s) {bad} is not finite; rescale the features (nothing changed)"
            )
        return f

    # ------------------------------------------------------------------ persistence
    def save(self, path: str, meta: Optional[dict] = None) -> None:
        """Everything needed to go on exactly where this bandit stands (written atomically); ``meta``: what the
        caller records with it (a JSON-like dict, given back as :attr:`saved_meta` by :meth:`from_checkpoint`)."""
        L = self.learner
        L.check_finite()  # never a broken state over a good file
        opt = L.optimizer()
        payload = {
            "format": FORMAT,
            "format_version": MIGRATION_VERSION,
            "learner": learner_path(type(L)),
            "hparams": dict(L.hparams),
            "state_dict": L.state_dict(),
            "optimizer": opt.state_dict() if opt is not None else None,
            "generator": self._gen.get_state(),
            "seed": self.seed,
            "objective": self.objective,
            "standardize": self.standardize,
            "input_map": None if self.input_map is None else self.input_map.state(),
            **({"meta": dict(meta)} if meta is not None else {}),
        }
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{path}: folder {folder} does not exist")
        if os.path.isdir(path):
            raise IsADirectoryError(f"{path}: a folder; give a file name in it")
        with atomic_open(path, "wb") as fh:
            torch.save(payload, fh)


def rank(bandit: DuelingBandit, contexts, names: Sequence[str]) -> list[tuple[str, float]]:
    """(name, estimated utility) of every item, best first."""
    s = bandit.scores(contexts)
    return [(names[k], float(s[k])) for k in np.argsort(-s, kind="stable")]
