"""What every dueling learner of the package shares: the history, the round counter, the settings, finiteness checks
and timings. NVLDB (:mod:`nvldb_pl.learners.nvldb`) and the baselines (:mod:`nvldb_pl.learners`) subclass it and add
their estimator and selection rule.

A learner is a plain torch algorithm (a ``torch.nn.Module``: its state is its buffers and parameters): it imports
nothing of Lightning. Lightning's loop drives it through one adapter, :class:`nvldb_pl.loop.module.LearnerModule`
(optimizer, device, precision, regret, checkpoint hooks); the live API (:mod:`nvldb_pl.live`) drives it directly.
What runs its optimization is handed in as an :class:`Execution` (an optimizer, a backward, a loss scaler, a runner of
the update's steps): plain torch unless the adapter hands in Lightning's (the precision plugin's backward and
scaler); the learner never calls up into whoever drives it.

The round, as data (no per-round state is kept in attributes between the calls):

1. ``propose(contexts [S, K, d], noise [S, K, K], t) -> duel``: a dict with the pair ``a1``, ``a2``
   ([S] int64) and whatever the update needs from selection time (NVLDB: ``dphi``, the feature
   difference at W_{t-1}); :class:`nvldb_pl.loop.callbacks.DuelingLoop` adds ``contexts``, the outcome
   ``o`` [S] and the true gap ``du`` [S] and puts the duel into the batch as ``batch["duel"]``;
2. ``learn(duel)`` (the adapter's ``training_step``): append the duel to the history (``observe``,
   Alg. 1 line 7), then the learner's ``update(duel)`` (lines 8-13).

The live API (:mod:`nvldb_pl.live`) calls the same ``propose``/``learn``; for an answer that comes
later, ``memo(contexts, a1, a2)`` recomputes the selection-time part at the current parameters.
Every learner holds S independent seeds stacked along the first dimension.

What is not the algorithm lives with the loop: wiring the learner to the data module, refusing a checkpoint of
another config, layout or device, and recording where a run's rounds were computed
(:class:`nvldb_pl.loop.callbacks.DuelingLoop` with :mod:`nvldb_pl.machinery.provenance`).
"""

from __future__ import annotations

import inspect
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from .history import EagerSteps
from .settings import Settings, init_arguments
from ..maths.checks import check, check_linked, check_memory
from ..migrations import upgrade_settings, upgrade_state

SHARED_BUFFERS = ("rounds_done", "reg", "base_seed")  # a learner's tensors without a leading seed dimension


def history_bytes(dim: int, rounds: int, num_seeds: int) -> int:
    """The duel history: S x T x 2 x d float32 contexts, S x T outcomes (f32) and gaps (f64)."""
    return num_seeds * rounds * (2 * dim * 4 + 4 + 8)


def as_pairs(cols: torch.Tensor) -> torch.Tensor:
    """Feature-major duel columns [S, d, 2t] (pair i in columns 2i, 2i+1) -> [S, t, 2, d]."""
    S, d, n = cols.shape
    return cols.transpose(1, 2).reshape(S, n // 2, 2, d)


def duel_gap(pairs: torch.Tensor) -> torch.Tensor:
    """[S, t, 2, p] -> the first item's minus the second's [S, t, p], in float64 (Delta phi_i of the duels)."""
    pairs = pairs.to(torch.float64)
    return pairs[:, :, 0] - pairs[:, :, 1]


def learner_name(cls: type) -> str:
    """The name a learner class is saved and found under: its class name for the package's own learners, else its
    import path (so that a checkpoint or a live save of a user's class finds it again)."""
    return cls.__name__ if cls.__module__.split(".")[0] == "nvldb_pl" else f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True)
class Execution:
    """What runs a learner's optimization, handed in by whoever drives it (:meth:`DuelingLearner.execute_with`):
    the learner calls these and nothing else of its driver. The default is plain torch (live use).

    ``optimizer``: the optimizer of the learner's parameters (None where it has none); ``backward``: loss -> None
    (None: ``loss.backward()``; under a Trainer the precision plugin's, which scales the loss under 16-mixed);
    ``scaler``: 16-mixed's GradScaler where one scales the loss, else None; ``steps``: ``steps(key, fn) -> fn()``,
    the runner of the update's steps (under the loop a CUDA graph's, :mod:`nvldb_pl.machinery.graphs`);
    ``sync_timings``: on CUDA, synchronize around every timed section (a true time split, for benchmarks);
    ``self_duels``: whether a learner's own test may play an arm against itself (False where a person answers: the
    live API; nobody is asked "A or A?")."""

    optimizer: Any = None
    backward: Optional[Callable[[torch.Tensor], None]] = None
    scaler: Any = None
    steps: Callable = field(default_factory=EagerSteps)
    sync_timings: bool = False
    self_duels: bool = True


@dataclass(frozen=True)
class Estimate:
    """A learner's view of contexts [S, K, d], which its selection rule turns into a pair: utilities ``f`` [S, K] and
    exploration norms ``norm`` [S, K, K] (the learner's ||.||_{V^-1} of each pair's feature difference), with the
    parts a learner keeps for its update (None where it has none): ``phi`` [S, K, p], NVLDB's features phi(x; W);
    ``g`` [S, K, p], NDB's gradients; ``x_norm`` [S, K], the linear learners' ||x_k||_{V^-1}; ``ok`` [S], False where
    V was not positive definite."""

    f: torch.Tensor
    norm: torch.Tensor
    phi: Optional[torch.Tensor] = None
    g: Optional[torch.Tensor] = None
    x_norm: Optional[torch.Tensor] = None
    ok: Optional[torch.Tensor] = None


class DuelingLearner(torch.nn.Module):
    """Base class: S seeds' duel history (preallocated), settings and bookkeeping.

    Subclasses implement ``estimate`` (the model: utilities and exploration norms of the offered
    contexts) with a selection rule in ``select`` (or ``propose``, when the update needs something
    from selection time, then also ``memo``), ``update`` and ``init_seed_state``, and set
    ``method`` (the name in summaries and reports).
    """

    method = "learner"
    TIMED = ("select", "train", "refit", "gram")
    SHARED_BUFFERS = SHARED_BUFFERS  # tensors without a leading seed dimension
    HISTORY_BUFFERS = ("hist_xt", "hist_o", "hist_du")  # last dimension: one (hist_xt: two) per duel
    LIVE = True  # usable by nvldb_pl.live.DuelingBandit (answers late, in any order)
    # update honours a duel's train False (learn): the duel joins V, its outcome waits for the next steps
    DEFERS_TRAINING = False
    EXTENDABLE = True  # nothing depends on the horizon T: a run can be resumed with a larger data.rounds

    def __init__(self, dim: int, arms: int, rounds: int, num_seeds: int, link: str):
        super().__init__()
        check_linked(dim, arms, rounds, num_seeds, link)
        check_memory(
            history_bytes(dim, rounds, num_seeds),
            f"history S x T x 2 x d = {num_seeds} x {rounds} x 2 x {dim} and the learner's state",
        )
        S, T, d = num_seeds, rounds, dim
        # (x_{i,a1}, x_{i,a2}) as columns 2i, 2i+1: feature-major, as the networks consume them
        self.register_buffer("hist_xt", torch.zeros(S, d, 2 * T))
        self.register_buffer("hist_o", torch.zeros(S, T))  # o_i
        self.register_buffer("hist_du", torch.zeros(S, T, dtype=torch.float64))  # true Delta u_i (oracle only)
        self.register_buffer("rounds_done", torch.zeros((), dtype=torch.int64))
        self.register_buffer("first_bad_round", torch.zeros(S, dtype=torch.int64))  # 0 = all finite
        self.register_buffer("first_bad_context", torch.zeros(S, dtype=torch.int64))  # NaN/inf from the environment
        self.register_buffer("self_duels", torch.zeros(S, dtype=torch.int64))  # rounds with a1 = a2
        self.register_buffer("base_seed", torch.zeros((), dtype=torch.int64))  # of the streams a learner draws itself
        self.register_buffer("seed_id", torch.arange(S, dtype=torch.int64))
        # host-side mirrors of base_seed and seed_id, for the per-round draws (no device sync);
        # kept in step by init_parameters, take_seeds and every load_state_dict (the hook below)
        self._base_seed, self._seed_ids = 0, list(range(S))
        self.register_load_state_dict_post_hook(DuelingLearner._mirror_seed_buffers)
        self.hparams = Settings()  # what save_hyperparameters keeps
        self.execution = Execution()  # plain torch until one is handed in (execute_with)
        self.timings = {name: 0.0 for name in self.TIMED}
        self._timers_off = False
        self._t = 0  # rounds observed; host-side mirror of the rounds_done buffer (no device sync)
        self.num_local = S  # seeds held by this process (< num_seeds when sharded over processes)

    def save_hyperparameters(self, *args) -> None:
        """Keep the learner's settings as ``self.hparams`` (what a checkpoint or a save records and a run's
        hparams.yaml lists): a dict given; or the named arguments of the calling ``__init__``; or, with no argument,
        every argument of the ``__init__`` calls building this object (a subclass's over its base's), as
        Lightning's method of that name collects them."""
        if len(args) == 1 and isinstance(args[0], dict):
            self.hparams = Settings(args[0])
            return
        given = init_arguments(self, inspect.currentframe().f_back)
        self.hparams = Settings({k: given[k] for k in args} if args else given)

    @property
    def device(self) -> torch.device:
        """Where the learner's state is (its round counter's device)."""
        return self.rounds_done.device

    # ------------------------------------------------------------------ set-up
    def init_seed_state(self, base_seed: int, seed_ids: list[int]) -> None:
        """Draw each seed's initial parameters from its own stream (override when there are any)."""

    def init_parameters(self, base_seed: int, seed_ids: list[int]) -> None:
        check(len(seed_ids) == self.num_local, "num_seeds", f"{len(seed_ids)} seed ids for {self.num_local} seeds")
        self.init_seed_state(base_seed, list(seed_ids))
        self.base_seed.fill_(int(base_seed))
        self.seed_id.copy_(torch.tensor(seed_ids, dtype=torch.int64))
        self._base_seed, self._seed_ids = int(base_seed), [int(i) for i in seed_ids]

    @classmethod
    def lineage(cls) -> tuple[str, ...]:
        """The package's learner classes this one is or derives from, by name (the migration table's keys)."""
        return tuple(c.__name__ for c in cls.__mro__ if c.__module__.split(".")[0] == "nvldb_pl")

    def upgraded_state(self, state_dict: dict, since: int | None = None) -> dict:
        """A saved state written at migration version ``since`` (None: before the table) in this version's terms:
        the keys no longer kept left out, the renamed ones under their new names (:mod:`nvldb_pl.migrations`)."""
        return upgrade_state(state_dict, self.lineage(), since)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """torch's, on :meth:`upgraded_state` (a state an older version saved loads)."""
        return super().load_state_dict(self.upgraded_state(state_dict), strict=strict, assign=assign)

    @staticmethod
    def _mirror_seed_buffers(module, incompatible_keys) -> None:
        """After load_state_dict: read the loaded round counter, base_seed and seed_id buffers once (a sync at load
        time), then :meth:`after_load`."""
        module._base_seed, module._seed_ids = int(module.base_seed), module.seed_id.tolist()
        module._t = int(module.rounds_done)
        module.after_load()

    def after_load(self) -> None:
        """After a state was loaded: drop what was derived from the state before (nothing here)."""

    def bind_seeds(self, base_seed: int, seed_ids: list[int]) -> None:
        """Before round 1: this process's seeds (a share of them under ``seed_parallel``) and their initial draw."""
        if len(seed_ids) != self.num_local:  # seeds sharded over processes: keep this rank's share
            self.take_seeds(list(range(len(seed_ids))))  # every slot still holds the same initial value
        self.init_parameters(base_seed, seed_ids)

    @torch.no_grad()
    def take_seeds(self, index: list[int]) -> None:
        """Keep only the seeds at positions ``index`` of every per-seed buffer and parameter
        (e.g. one trained seed of a checkpoint, for live use). Optimizer state is not touched."""
        old = self.num_local
        for mod in self.modules():
            for name, buf in list(mod.named_buffers(recurse=False)):
                if name not in self.SHARED_BUFFERS and buf.dim() > 0 and buf.shape[0] == old:
                    setattr(mod, name, buf[index].clone())  # a registered buffer stays registered
            for name, par in list(mod.named_parameters(recurse=False)):
                if par.shape[0] == old:
                    setattr(mod, name, torch.nn.Parameter(par.data[index].clone(), requires_grad=par.requires_grad))
        self.num_local = len(index)
        self._seed_ids = [self._seed_ids[i] for i in index]

    @staticmethod
    def _padded(name: str, buf: torch.Tensor, capacity: int) -> torch.Tensor:
        """History buffer ``name`` with room for ``capacity`` duels (zeros after its own columns)."""
        per_duel = 2 if name == "hist_xt" else 1
        if buf.shape[-1] >= per_duel * capacity:
            return buf
        new = buf.new_zeros(*buf.shape[:-1], per_duel * capacity)
        new[..., : buf.shape[-1]] = buf
        return new

    def _pad_history(self, state_dict: dict, capacity: int) -> None:
        """A checkpoint's history buffers, padded to ``capacity`` duels (a longer run)."""
        for name in self.HISTORY_BUFFERS:
            if name in state_dict:
                state_dict[name] = self._padded(name, state_dict[name], capacity)

    @torch.no_grad()
    def grow_history(self, capacity: int) -> None:
        """Make room for ``capacity`` duels in every history buffer (live use past the preallocated T)."""
        for name in self.HISTORY_BUFFERS:
            setattr(self, name, self._padded(name, getattr(self, name), capacity))

    def execute_with(self, execution: Execution) -> None:
        """Run the optimization through ``execution`` from now on (Lightning's adapter when a fit is set up, the live
        API with the learner's own optimizer)."""
        self.execution = execution

    def optimizer(self):
        """The optimizer handed in (Lightning's under a Trainer, else the one :meth:`attach_optimizer` made)."""
        return self.execution.optimizer

    def attach_optimizer(self, state: dict | None = None, self_duels: bool = True) -> None:
        """Drive the learner with plain torch and its own optimizer (live use: ``self_duels`` False), optionally with a
        saved state."""
        opt = self.make_optimizer()
        if opt is not None and state is not None:
            opt.load_state_dict(state)
            self.settle_optimizer(opt)
        self.execute_with(Execution(optimizer=opt, self_duels=self_duels))

    def settle_optimizer(self, opt) -> None:
        """After a saved state was loaded into ``opt``: its execution settings as this run makes them
        (the state may come from a run on another device, whose settings it carries). Nothing here."""

    def backprop(self, loss: torch.Tensor) -> None:
        """Backpropagate as the execution handed in says (under a Trainer: Lightning's precision plugin, its scaler)."""
        if self.execution.backward is None:
            loss.backward()
        else:
            self.execution.backward(loss)

    def scores(self, contexts: torch.Tensor) -> torch.Tensor:
        """The estimated utilities f(x_k) [S, K] of contexts [S, K, d] (a learned ranking)."""
        raise NotImplementedError

    def estimate(self, contexts: torch.Tensor) -> Estimate:
        """The model's view of contexts [S, K, d] (:class:`Estimate`), which its selection rule turns into a pair
        (see :meth:`propose`)."""
        raise NotImplementedError(f"{type(self).__name__} has no model estimate")

    def memo(self, contexts: torch.Tensor, a1: torch.Tensor, a2: torch.Tensor) -> dict:
        """What :meth:`propose` adds to the duel for the update, recomputed for the pair (a1, a2)
        of ``contexts`` [S, K, d] at the current parameters (live use, where answers come late
        and in any order). Nothing here."""
        return {}

    def live_feature_units(self) -> torch.Tensor | None:
        """[S]: how many units of the learned representation phi are positive on at least one context
        played so far (None: the learner has no learned representation)."""
        return None

    def make_optimizer(self):
        """The optimizer of the learner's parameters (None: it has none, it fits in closed form or by its own
        solver)."""
        return None

    def execution_notes(self, scaled: bool) -> list[tuple[str, str]]:
        """Before a run, under a loss scaler or not (16-mixed): what to tell its user, as (``info``/``warning``,
        text) pairs; a ValueError naming the field where the learner cannot run so. Nothing here."""
        return []

    def problem_size(self) -> int:
        """S x T x m^2: how much arithmetic a run of this learner makes, which picks its CPU threads (one for a
        small problem: a second thread stalls it). m = 32 here, the default network's width."""
        return self.num_local * self.hparams["rounds"] * 32 * 32

    @property
    def seed_ids(self) -> list[int]:
        """The seed ids this learner holds (the ``seed_id`` buffer's host mirror: it follows
        ``init_parameters``, ``take_seeds`` and ``load_state_dict``, and reading it costs no sync)."""
        return list(self._seed_ids)

    @property
    def t(self) -> int:
        """Rounds observed so far (the current round once ``observe`` has run)."""
        return self._t

    def upgrade_checkpoint(self, checkpoint: dict) -> None:
        """A checkpoint in this version's terms, in place (:mod:`nvldb_pl.migrations`, from the version it records):
        the settings it predates as they were then, its state by :meth:`upgraded_state`."""
        since = checkpoint.get("format_version")
        name = checkpoint.get("learner", type(self).__name__)
        hparams = upgrade_settings(checkpoint.get("hyper_parameters", {}), (name, *self.lineage()), since)
        if hparams or "hyper_parameters" in checkpoint:
            checkpoint["hyper_parameters"] = hparams
        checkpoint["state_dict"] = self.upgraded_state(checkpoint["state_dict"], since)

    @contextmanager
    def _timed(self, name: str):
        """Wall time of a section; on CUDA it only counts launches unless the execution's ``sync_timings``.
        Sections inside :meth:`_untimed` are not counted (their time is in the enclosing one)."""
        if self._timers_off:
            yield
            return
        sync = self.execution.sync_timings and self.device.type == "cuda"
        if sync:
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        yield
        if sync:
            torch.cuda.synchronize(self.device)
        self.timings[name] += time.perf_counter() - start

    @contextmanager
    def _untimed(self):
        """No section timed inside (a CUDA graph's capture: its replays cannot time their parts)."""
        was, self._timers_off = self._timers_off, True
        try:
            yield
        finally:
            self._timers_off = was

    # ------------------------------------------------------------------ the round
    def select(self, contexts: torch.Tensor, noise: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(a1, a2) [S] for round t from contexts [S, K, d] and the round's normals [S, K, K]."""
        duel = self.propose(contexts, noise, t)
        return duel["a1"], duel["a2"]

    def propose(self, contexts: torch.Tensor, noise: torch.Tensor, t: int) -> dict:
        """Round t's duel so far: ``{"a1": [S], "a2": [S], ...what update needs from selection}``."""
        if type(self).select is DuelingLearner.select:
            raise NotImplementedError(f"{type(self).__name__} implements neither select nor propose")
        a1, a2 = self.select(contexts, noise, t)
        return {"a1": a1, "a2": a2}

    def learn(self, duel: dict) -> None:
        """One answered duel (keys ``contexts`` [S, K, d], ``a1``, ``a2``, ``o`` [S], ``du`` [S] and
        :meth:`propose`'s extras): append it to the history, then update (Alg. 1 lines 7-13). An optional
        ``train`` False asks the update to put off its costly part (the network's steps) to a later duel, as
        where answers come faster than they can be learned; a learner may ignore it (and train)."""
        self.observe(duel["contexts"], duel["a1"], duel["a2"], duel["o"], duel["du"])
        self.update(duel)

    def update(self, duel: dict) -> None:
        """The learner's update after round t's duel was appended (t = ``self.t``)."""
        raise NotImplementedError

    @torch.no_grad()
    def observe(
        self, contexts: torch.Tensor, a1: torch.Tensor, a2: torch.Tensor, o: torch.Tensor, du: torch.Tensor
    ) -> None:
        """Append round t's duel (x_a1, x_a2, o_t) to the history (Alg. 1 line 7)."""
        i = self.t
        rows = torch.arange(contexts.shape[0], device=contexts.device)
        self.hist_xt[:, :, 2 * i] = contexts[rows, a1]
        self.hist_xt[:, :, 2 * i + 1] = contexts[rows, a2]
        self.hist_o[:, i] = o.to(self.hist_o.dtype)
        self.hist_du[:, i] = du.to(torch.float64)
        self.self_duels += a1 == a2  # an arm dueled with itself: no information (Delta phi = 0)
        self.rounds_done += 1
        self._t += 1

    def history(self, t: int | None = None) -> torch.Tensor:
        """The duels so far as [S, t, 2, d]: (x_{i,a1}, x_{i,a2}) for i < t."""
        return as_pairs(self.hist_xt[:, :, : 2 * (self.t if t is None else t)])

    def _flag_bad(self, bad: torch.Tensor, t: int) -> None:
        """Remember the first round at which a seed went non-finite (checked by the callback)."""
        self.first_bad_round = torch.where(bad & (self.first_bad_round == 0), t, self.first_bad_round)

    @torch.no_grad()
    def flag_bad_contexts(self, contexts: torch.Tensor, t: int) -> None:
        """Remember (no host sync) seeds whose round-t contexts hold NaN or inf."""
        bad = ~torch.isfinite(contexts).flatten(1).all(dim=1)
        self.first_bad_context = torch.where(bad & (self.first_bad_context == 0), t, self.first_bad_context)

    def check_finite(self, gathered: torch.Tensor | None = None, seed_ids: list[int] | None = None) -> None:
        """Raise, naming seeds and rounds, if a context, loss, parameter or Gram matrix went non-finite.

        ``gathered`` [W, 2, S_local]: every rank's (first_bad_context, first_bad_round), so that all
        ranks raise together (with ``seed_ids`` the global ids in rank order).
        """
        if gathered is None:
            ctx, bad, ids = self.first_bad_context.cpu(), self.first_bad_round.cpu(), self.seed_ids
        else:
            g = gathered.cpu()
            ctx, bad, ids = g[:, 0].reshape(-1), g[:, 1].reshape(-1), seed_ids

        def where(first_round: torch.Tensor) -> str:
            return ", ".join(f"seed {ids[i]} at round {int(r)}" for i, r in enumerate(first_round) if r > 0)

        if bool((ctx > 0).any()):
            raise FloatingPointError(f"non-finite (NaN or inf) context from the environment: {where(ctx)}")
        if bool((bad > 0).any()):
            raise FloatingPointError(
                f"non-finite loss, theta or Gram matrix: {where(bad)}. Lower model.lr, raise model.epsilon or "
                f"model.lam, or check the task's utilities."
            )
