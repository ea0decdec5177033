"""Cross-cutting behaviour of the loop: duels and regret (:class:`DuelingLoop`), a CPU run's share of the cores
(:class:`ShareCores`); the run summary is :mod:`nvldb_pl.loop.summary`'s.

:class:`DuelingLoop` is the environment's side of each round: before the training step it asks
the learner for a pair (``propose``), takes the environment's answer (``BanditDataModule.answer``:
o_t ~ Bernoulli(g(u_a1 - u_a2)) from the round's own uniform, and the round's regret), and puts the answered duel into the batch (``batch["duel"]``, which
``training_step`` learns from) with the round's regret (``batch["regret"]``); after the step it
accumulates that regret. Per-round
curves stay on the device and are written to the logger every ``log_every_n_rounds`` rounds
(x-axis = round), and the progress bar's value is a host tensor, so the hot path has no host synchronisation.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Timer, TQDMProgressBar
import torch

from ..learners.neural import NeuralLearner
from ..machinery import provenance
from ..machinery.cores import AUTO, SharedCores
from ..machinery.history import check_learner_memory
from ..machinery.host import atomic_open, keep_freed_memory


def _mean_std(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and sample std (ddof=1; 0 for a single seed) over the last dimension."""
    std = values.std(dim=-1) if values.shape[-1] > 1 else torch.zeros_like(values[..., 0])
    return values.mean(dim=-1), std


class DuelingLoop(pl.Callback):
    """Selection and feedback before each training step; regret after it.

    Logged per round (mean and std over seeds): ``regret/cum_avg`` (R^a_t), ``regret/cum_weak``
    (R^w_t) and ``regret/avg_per_round`` (R^a_t / t). With ``save_curves``, the per-round,
    per-seed R^a_t and R^w_t also go to ``curves.csv`` in the log dir at the end of training (``write_curves`` False:
    kept in memory only, :meth:`curves`).
    """

    def __init__(self, log_every_n_rounds: int = 25, save_curves: bool = True, write_curves: bool = True):
        if log_every_n_rounds < 1:
            raise ValueError(f"loop.log_every_n_rounds: must be >= 1, got {log_every_n_rounds}")
        self.log_every_n_rounds = log_every_n_rounds
        self.save_curves, self.write_curves = save_curves, write_curves
        self._curves: list[tuple[list[int], torch.Tensor, torch.Tensor]] = []
        self._unlogged: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self._logged_through: dict[str, int] = {}  # on resume: per tag, rounds the interrupted run already wrote
        self.running_mean = float("nan")

    def state_dict(self) -> dict:
        """The curves so far (and unflushed rounds), so a resumed run writes whole curves."""
        pending = [(r, a.cpu(), w.cpu()) for r, a, w in self._unlogged]
        return {
            "curves": self._curves,
            "pending": pending,
            "running_mean": self.running_mean,
            "save_curves": self.save_curves,
        }

    def load_state_dict(self, state: dict) -> None:
        """Refused: a run going on with another ``save_curves`` than it had (its curves.csv would end, or begin, at the
        round it went on from, beside a summary of every round)."""
        had = bool(state.get("save_curves", bool(state.get("curves"))))  # (older checkpoints: curves kept or not)
        if had != self.save_curves:
            happens = (
                "its curves.csv would stop at the round it goes on from, beside a summary of every round"
                if had
                else "its curves.csv would begin at the round it goes on from"
            )
            raise ValueError(
                f"loop.save_curves: the run was made with save_curves {str(had).lower()}; going on with "
                f"{str(self.save_curves).lower()}, {happens}: give loop.save_curves {str(had).lower()} (or leave it out)"
            )
        self._curves = list(state.get("curves", []))
        self._unlogged = list(state.get("pending", []))
        self.running_mean = state.get("running_mean", float("nan"))

    def setup(self, trainer, module, stage: str) -> None:
        """Before anything runs: the learner wired to the data module (its linked fields checked, this process's
        seeds drawn), the checks a checkpoint to go on from passes (:func:`nvldb_pl.machinery.provenance.check_resume`,
        handed to the learner, which calls it before its state is loaded), and freed memory kept for reuse (speed only)."""
        provenance.refuse_coupled_processes(trainer)
        dm = trainer.datamodule
        learner = module.learner
        if dm is not None and getattr(learner, "variance_mode", None) == "oracle" and dm.preference != dm.link:
            raise ValueError(
                f"model.oracle_variance: the true variance follows data.link={dm.link}, but the environment answers "
                f"by data.preference={dm.preference}; the 'true' sigma would be another model's"
            )
        size = (module.hparams.get("sampler") or {}).get("size")
        if dm is not None and size is not None and size >= dm.spec.rounds:  # (live: the history grows past rounds)
            raise ValueError(
                f"model.sampler.size: {size} >= data.rounds={dm.spec.rounds}: the history never holds more answers, so "
                f"every Adam step takes the whole of it and it would change nothing; give a smaller one, or leave it out"
            )
        if dm is not None and module.t == 0:
            for name in ("dim", "arms", "rounds", "num_seeds"):
                if getattr(dm.spec, name) != module.hparams[name]:
                    raise ValueError(f"model.{name}={module.hparams[name]} but data.{name}={getattr(dm.spec, name)}")
            module.bind_seeds(dm.spec.base_seed, dm.seed_ids)
        self.earlier_parts: list[dict] = []  # the rounds of this run made before this process, by part
        module.resume_check = self._check_resume
        keep_freed_memory()  # a round's temporaries reused, not faulted in again

    def _check_resume(self, module, checkpoint: dict) -> None:
        self.earlier_parts = provenance.check_resume(module, checkpoint, module._trainer)

    def on_save_checkpoint(self, trainer, module, checkpoint) -> None:
        provenance.stamp(module, checkpoint, trainer, getattr(self, "earlier_parts", []))

    def on_load_checkpoint(self, trainer, module, checkpoint) -> None:
        """Resume: the stream restarts after the checkpoint's round (every draw is a function of
        base seed, seed id and round, so nothing else of the stream needs restoring)."""
        if trainer.datamodule is not None:
            trainer.datamodule.start_round = int(checkpoint["state_dict"]["rounds_done"])

    def on_fit_start(self, trainer, module):
        if isinstance(module.learner, NeuralLearner):  # one block of the history's activations must fit at the horizon
            check_learner_memory(module.learner, trainer.num_devices)
        if module.t < module.hparams.rounds:  # (a finished run resumed at its horizon runs nothing anyway, and says so)
            refuse_spent_time_limit(trainer, module.t)

    def on_train_start(self, trainer, module):
        """On resume, find the last round already in this run's TensorBoard events: the rounds
        between the checkpoint and the kill were logged then (with the same values, the resume
        being exact) and are not written twice."""
        self._logged_through = {}
        self._bar_resumed = module.t == 0
        if module.t > 0 and trainer.is_global_zero and trainer.logger is not None and trainer.logger.log_dir:
            # per tag: a kill in the middle of a flush can leave a round written for some tags only
            self._logged_through = logged_rounds(trainer.logger.log_dir)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if not self._bar_resumed:
            self._bar_resumed = resume_bar(trainer, module.hparams.rounds)
        t = module.t + 1
        if batch["round"] != t:
            raise RuntimeError(f"data stream is at round {batch['round']} but the learner expects round {t}")
        x = batch["contexts"]
        module.learner.flag_bad_contexts(x, t)
        duel = module.learner.propose(x, batch["noise"], t)
        answer = trainer.datamodule.answer(batch, duel["a1"], duel["a2"])  # the environment's o_t and regret
        batch["duel"] = {**duel, "contexts": x, "o": answer["o"], "du": answer["du"]}
        batch["regret"] = answer["regret"]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        module.regret.update(*batch["regret"])
        self._unlogged.append((module.t, module.regret.cum_avg.clone(), module.regret.cum_weak.clone()))
        if len(self._unlogged) >= self.log_every_n_rounds or module.t == module.hparams.rounds:
            self.flush(trainer, module)
            # the progress bar's R/t, refreshed when it changes (self.log is not free). A host tensor:
            # Lightning reads every progress-bar value on the host after every batch (its logger connector's
            # on_batch_end), and a float would be put on the module's device: on CUDA a wait for the device a round
            if not trainer.barebones:  # where Lightning warns that self.log does nothing
                module.log("R/t", torch.tensor(self.running_mean, dtype=torch.float32), prog_bar=True, logger=False)

    def on_train_end(self, trainer, module):
        self.flush(trainer, module)
        t, T = module.t, module.hparams.rounds
        if (
            t < T and trainer.is_global_zero and not trainer.checkpoint_callbacks
        ):  # else RoundCheckpoint says where to go on
            print(
                f"stopped at round {t} of data.rounds={T}; this run saves no checkpoint (trainer.enable_checkpointing "
                f"false), so it cannot go on: its summary holds the {t} rounds played",
                file=sys.stderr,
            )
        log_dir = trainer.log_dir  # a collective under several processes: every rank asks
        if self.save_curves and self.write_curves and trainer.is_global_zero and self._curves and log_dir:
            os.makedirs(log_dir, exist_ok=True)
            write_curves_atomic(os.path.join(log_dir, "curves.csv"), trainer.datamodule.spec.seed_ids, self._curves)

    def curves(self) -> tuple[list[int], torch.Tensor]:
        """The rounds flushed so far and R^a_t of every seed at each, [n, S] (with ``save_curves``; else none)."""
        if not self._curves:
            return [], torch.zeros(0, 0, dtype=torch.float64)
        return [r for rounds, _, _ in self._curves for r in rounds], torch.cat([a for _, a, _ in self._curves])

    def flush(self, trainer, module) -> None:
        """Check finiteness, then write the buffered rounds to the logger (step = round).

        With seeds sharded over processes, every rank gathers every rank's flags and curves here
        (the same rounds on every rank), so all ranks stop together and rank 0 logs all seeds.
        """
        if not self._unlogged:
            return
        rounds = [r for r, _, _ in self._unlogged]
        cum_avg = torch.stack([a.to(module.device) for _, a, _ in self._unlogged])  # [B, S_local]
        cum_weak = torch.stack([w.to(module.device) for _, _, w in self._unlogged])
        self._unlogged.clear()
        learner = module.learner
        if trainer.world_size > 1:
            flags = module.all_gather(torch.stack([learner.first_bad_context, learner.first_bad_round]))
            learner.check_finite(flags, trainer.datamodule.spec.seed_ids)
            cum_avg, cum_weak = (
                module.all_gather(x).permute(1, 0, 2).reshape(len(rounds), -1) for x in (cum_avg, cum_weak)
            )  # [B, S] in seed-id order
        else:
            learner.check_finite()
        cum_avg, cum_weak = cum_avg.cpu(), cum_weak.cpu()
        if not (torch.isfinite(cum_avg).all() and torch.isfinite(cum_weak).all()):
            raise FloatingPointError(
                f"non-finite regret between rounds {rounds[0]} and {rounds[-1]}: check the task's utilities"
            )
        if self.save_curves:
            self._curves.append((rounds, cum_avg, cum_weak))
        per_round = cum_avg / torch.tensor(rounds, dtype=torch.float64).unsqueeze(1)
        stats = {
            name: _mean_std(v)
            for name, v in (("cum_avg", cum_avg), ("cum_weak", cum_weak), ("avg_per_round", per_round))
        }
        self.running_mean = float(stats["avg_per_round"][0][-1])
        if not trainer.loggers or trainer.sanity_checking:
            return
        for b, r in enumerate(rounds):
            metrics = {}
            for name, (mean, std) in stats.items():
                metrics[f"regret/{name}_mean"] = float(mean[b])
                metrics[f"regret/{name}_std"] = float(std[b])
            metrics = {k: v for k, v in metrics.items() if r > self._logged_through.get(k, 0)}
            if metrics:
                for logger in trainer.loggers:  # --trainer.logger may name several (TensorBoard, CSV, ...)
                    logger.log_metrics(metrics, step=r)


def refuse_spent_time_limit(trainer, t: int) -> None:
    """``trainer.max_time`` already used up (Lightning's Timer counts it over every part of a run, the earlier
    ones read from the checkpoint; or a zero limit): Lightning would skip training without a word and exit 0,
    a requeued cluster job ending as if done. A ValueError naming the field, on every rank (rank 0's clock)."""
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
    if timer is None or timer.time_remaining() is None:  # no max_time
        return
    # before round 1 the time used is what the checkpoint's Timer state holds (0 for a new run)
    used, left = trainer.strategy.broadcast((timer.time_elapsed(), timer.time_remaining()))
    if left > 0:
        return
    limit = (
        timedelta(seconds=round(used + left)) if used + left >= 0 else f"{used + left:g} s"
    )  # (not '-1 day, 23:59:00')
    if t == 0:
        raise ValueError(f"trainer.max_time: {limit} leaves no time to play a round; give a positive duration, or none")
    raise ValueError(
        f"trainer.max_time: the earlier parts of this run have used {timedelta(seconds=round(used))} of "
        f"its {limit} (Lightning counts max_time over every part of a run), so no round would be played; "
        f"to go on from round {t}, give a larger one, or none"
    )


def logged_rounds(log_dir: str) -> dict[str, int]:
    """Per scalar tag, the largest step in the TensorBoard event files of ``log_dir`` ({} if none)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not os.path.isdir(log_dir):
        return {}
    acc = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: max(e.step for e in acc.Scalars(tag)) for tag in acc.Tags().get("scalars", [])}


def write_curves_atomic(path: str, seed_ids: list[int], blocks) -> None:
    """``round,seed,cum_avg_regret,cum_weak_regret``, one row per round and seed."""
    with atomic_open(path) as fh:
        fh.write("round,seed,cum_avg_regret,cum_weak_regret\n")
        for rounds, cum_avg, cum_weak in blocks:
            for b, r in enumerate(rounds):
                for s, seed in enumerate(seed_ids):
                    fh.write(f"{r},{seed},{float(cum_avg[b, s]):.6g},{float(cum_weak[b, s]):.6g}\n")


def resume_bar(trainer, rounds: int) -> bool:
    """A resumed run's progress bar, which Lightning starts mid-epoch without its length ("45/?"), given the
    horizon and its epoch's name, as a run from round 0 shows them. True once done (or no TQDM bar to fix)."""
    bar = trainer.progress_bar_callback
    if not isinstance(bar, TQDMProgressBar) or not bar.is_enabled:
        return True
    try:
        line = bar.train_progress_bar
    except TypeError:  # not made yet
        return False
    line.total = rounds
    line.set_description(f"Epoch {trainer.current_epoch}")
    return True


class ShareCores(pl.Callback):
    """A CPU run's share of the machine's cores (:mod:`nvldb_pl.machinery.cores`), taken before each round.

    ``auto``: take a share of what the other runs leave (at most the count the run started with); else keep the
    count it started with, registered so that the auto runs beside it count it."""

    def __init__(self, auto: bool = True, folder=None, every_s: float = 2.0):
        self.auto, self.folder, self.every_s = auto, folder, every_s
        self.used: list[int] = []
        self._cores = None

    @classmethod
    def for_choice(cls, chosen) -> "ShareCores":
        """For a run whose thread count ``devices.cpu_threads`` chose: a share where it left torch's own count
        (None) and OMP_NUM_THREADS does not set it, else the count kept."""
        return cls(auto=chosen is None and not os.environ.get("OMP_NUM_THREADS"))

    def on_train_start(self, trainer, module):
        if module.device.type != "cpu":
            return
        self._start = torch.get_num_threads()
        threads = AUTO if self.auto else self._start
        self._cores = SharedCores(threads, self._start, self.folder, every_s=self.every_s)
        self._cores.join()
        self.used = [self._start]

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self._cores is None:
            return
        n = self._cores.share()
        if n != self.used[-1]:  # the count last set: no call into torch on a round that keeps it
            torch.set_num_threads(n)  # results do not depend on it: only the speed does
            self.used.append(n)

    def on_train_end(self, trainer, module):
        self._leave()

    def on_exception(self, trainer, module, exception):
        self._leave()

    def _leave(self):
        if self._cores is not None:
            self._cores.leave()
            self._cores = None
            torch.set_num_threads(self._start)
