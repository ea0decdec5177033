"""One LightningModule for every learner: :class:`LearnerModule` drives a plain torch learner
(:class:`nvldb_pl.learners.base.DuelingLearner`) in Lightning's loop.

The learner is the algorithm (propose, learn, its state); this adapter owns what Lightning needs of a module: the
optimizer (the learner makes it, Lightning's strategy and precision plugin step it), the device (the learner is its
submodule), the regret metric, the checkpoint hooks (``learner`` and ``format_version`` written, an older checkpoint
upgraded through :mod:`nvldb_pl.migrations`, the loop's checks before the state loads) and ``training_step``, which
learns the duel :class:`nvldb_pl.loop.callbacks.DuelingLoop` put into the batch.

A checkpoint's ``state_dict`` is the learner's own keys, unprefixed, beside the metric's ``regret.*``, as when the
learner was itself the module: files written before and after read alike.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from ..environments.regret import PREFIX, CumulativeRegret, split_state
from ..learners.base import DuelingLearner, Execution, learner_name
from ..machinery import graphs
from ..migrations import VERSION as MIGRATION_VERSION


class LearnerModule(pl.LightningModule):
    """``learner`` in Lightning's loop (manual optimization: the learner takes its own steps).

    ``hparams`` are the learner's settings as it was wrapped (what the checkpoint and the logger's hparams.yaml
    record); ``resume_check(module, checkpoint)``, handed over by the loop, checks a checkpoint before its state
    loads; ``sync_timings``: on CUDA, the learner's timed sections synchronized (a true time split, benchmarks).

    The learner is handed Lightning's execution when the fit is set up (:meth:`setup`: ``manual_backward``, the
    precision plugin's GradScaler, a CUDA graph's runner for the graphed pass) and its optimizer when training starts
    (the strategy's, through which a step goes); it keeps them after the fit. It calls nothing of this module."""

    def __init__(self, learner: DuelingLearner, sync_timings: bool = False):
        super().__init__()
        self.learner = learner
        self.automatic_optimization = False
        self.regret = CumulativeRegret(learner.seed_ids)
        self.resume_check: Optional[Callable[["LearnerModule", dict], None]] = None
        self.sync_timings = sync_timings
        self.save_hyperparameters(dict(learner.hparams))  # the learner's settings, as the checkpoint and logger record

    @property
    def t(self) -> int:
        """Rounds the learner has observed (no device sync)."""
        return self.learner.t

    def bind_seeds(self, base_seed: int, seed_ids: list[int]) -> None:
        """Before round 1: the learner's seeds (this process's share) drawn; the regret kept for those seeds."""
        self.learner.bind_seeds(base_seed, seed_ids)
        self.regret = CumulativeRegret(list(seed_ids)).to(self.device)

    # ------------------------------------------------------------------ Lightning's module
    def setup(self, stage: str) -> None:
        """Hand the learner Lightning's execution (its optimizer follows in :meth:`on_train_start`)."""
        scaler = getattr(getattr(self.trainer, "precision_plugin", None), "scaler", None)
        steps = graphs.CapturedSteps()  # used where history_pass is graphed on a CUDA device
        self.learner.execute_with(
            Execution(backward=self.manual_backward, scaler=scaler, steps=steps, sync_timings=self.sync_timings)
        )

    def configure_optimizers(self):
        return self.learner.make_optimizer()

    def training_step(self, batch: dict, batch_idx: int):
        """Learn the duel the loop put into the batch (``batch["duel"]``, Alg. 1 lines 7-13)."""
        self.learner.learn(batch["duel"])
        return None

    def on_fit_start(self) -> None:
        for kind, text in self.learner.execution_notes(self.learner.execution.scaler is not None):
            (rank_zero_warn if kind == "warning" else rank_zero_info)(text)

    def on_train_start(self) -> None:
        opt = self.optimizers(use_pl_optimizer=False)
        if opt is not None and not isinstance(opt, list):
            self.learner.settle_optimizer(opt)
        self.learner.execute_with(replace(self.learner.execution, optimizer=self.optimizers()))

    # ------------------------------------------------------------------ the state, as a checkpoint holds it
    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        out = self.learner.state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        return self.regret.state_dict(destination=out, prefix=prefix + PREFIX, keep_vars=keep_vars)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        learner, regret = split_state(state_dict)
        mine = self.learner.load_state_dict(learner, strict=strict, assign=assign)
        theirs = self.regret.load_state_dict(regret, strict=strict, assign=assign)
        return type(mine)(  # torch's (missing_keys, unexpected_keys)
            mine.missing_keys + [PREFIX + k for k in theirs.missing_keys],
            mine.unexpected_keys + [PREFIX + k for k in theirs.unexpected_keys],
        )

    def on_load_checkpoint(self, checkpoint) -> None:
        """Before the state loads: the checkpoint in this version's terms (the learner's part), then the loop's
        checks (another config, run layout or device refused; a longer horizon's history padded)."""
        learner, regret = split_state(checkpoint["state_dict"])
        checkpoint["state_dict"] = learner
        self.learner.upgrade_checkpoint(checkpoint)
        checkpoint["state_dict"].update({PREFIX + k: v for k, v in regret.items()})
        if self.resume_check is not None:
            self.resume_check(self, checkpoint)

    def on_save_checkpoint(self, checkpoint) -> None:
        checkpoint["learner"] = learner_name(type(self.learner))  # a user's class by its import path
        checkpoint["format_version"] = MIGRATION_VERSION  # the migrations it needs no longer
