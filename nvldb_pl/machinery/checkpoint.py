"""Checkpoints every N rounds, and the pieces exact resume needs.

Lightning's ``ModelCheckpoint(every_n_train_steps)`` counts optimizer steps (n per round under
manual optimization), so :class:`RoundCheckpoint` counts rounds instead. It writes
``<log dir>/checkpoints/last.ckpt`` through a temporary file beside it (:class:`InPlaceCheckpointIO`),
keeping the checkpoint it replaces as ``last.ckpt.prev``: ``--ckpt_path last`` takes last.ckpt, or,
if that file is damaged (a copy cut short), the previous one, and says so (:mod:`nvldb_pl.cli`). A
save that fails (a full disk) stops the run naming the round last.ckpt still holds.

What a checkpoint holds, and so what resume restores: the learner's buffers (history, Gram
matrices, theta, round counter, per-seed regret metric states), the optimizer state (Adam's
moments), the data module's definition (checked against the resuming config) and the
:class:`~nvldb_pl.loop.callbacks.DuelingLoop` curves. Every random draw is a function of (base seed,
seed id, round), so the stream simply restarts at the saved round: nothing else to restore.

Signals (Ctrl-C, SIGTERM, SLURM's requeue signal) stop a run at the end of a round, saved; never a
save from inside a signal handler, where a round may be half done.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
import threading
from typing import Optional
from weakref import proxy

import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import ModelCheckpoint, Timer
from lightning.pytorch.plugins.io import AsyncCheckpointIO

from .host import CannotWrite, check_folder_can_be_made, write_keeping_previous


class RoundCheckpoint(ModelCheckpoint):
    """Save ``last.ckpt`` after every ``every_n_rounds``-th round and after the last round."""

    announce_stop = True  # a run stopped before its horizon says on stderr where to go on (a CLI run: --ckpt_path)

    def __init__(self, every_n_rounds: int = 50, dirpath: Optional[str] = None):
        if every_n_rounds < 1:
            raise ValueError(f"checkpoint.every_n_rounds: must be >= 1, got {every_n_rounds}")
        if dirpath is not None and os.path.exists(dirpath) and not os.path.isdir(dirpath):
            raise ValueError(f"checkpoint.dirpath: {dirpath} is a file, not a folder")
        super().__init__(dirpath=dirpath, save_last=True, save_top_k=0, enable_version_counter=False)
        self.every_n_rounds = every_n_rounds
        self._dirpath_given = dirpath is not None
        self._saved_round = -1  # the round of the last save by this process
        self.interrupted = 0  # the signal (SIGINT, SIGTERM, SLURM's) that asked to stop after this round; exit 128 + it
        self._previous_handlers: dict = {}
        self._requeue_signal: Optional[int] = None  # SLURM's notice before the time limit (its --signal)
        self._flags = None  # the ranks' process group (gloo, on the host) that agrees on it

    def setup(self, trainer, pl_module, stage: str) -> None:
        """Under SLURM, Lightning's auto-requeue would save ``hpc_ckpt_N.ckpt`` from inside the signal
        handler, in the middle of a round, and the requeued job would go on from it without a word:
        it is turned off, and this callback takes SLURM's signal instead (:meth:`on_train_start`)."""
        super().setup(trainer, pl_module, stage)
        if self._dirpath_given:  # (the default, under trainer.default_root_dir, was checked with it)
            check_folder_can_be_made(str(self.dirpath), "checkpoint.dirpath")  # before training, not at the first save
        self._requeue_signal = slurm_requeue_off(trainer)  # (before the trainer registers its signal handlers)
        refuse_late_writer(trainer.strategy)
        save_in_place(trainer.strategy)

    def on_train_start(self, trainer, pl_module) -> None:
        """One process: the first Ctrl-C (SIGINT), SIGTERM (a cluster's preemption or time limit) or,
        under SLURM, its requeue signal (``#SBATCH --signal=USR1@120``) stops the run at the end of
        the round, saved, so it goes on exactly with ``--ckpt_path last``; after SLURM's signal the job
        is requeued (``scontrol requeue``). A second one goes to the handler from before the run
        (Ctrl-C: KeyboardInterrupt, at once; SIGTERM: Lightning's, at the end of the round). Under
        ``seed_parallel`` the ranks could see a signal in different rounds, so Lightning's handling
        of SIGINT and SIGTERM stays; SLURM's requeue signal is taken here too, and the ranks agree at
        the end of every round (one all-reduce of a host flag over gloo, so a GPU run does not wait for
        its device) on whether any saw it, so all stop at the same round."""
        super().on_train_start(trainer, pl_module)
        self.interrupted = 0
        self._flags = None
        if self._requeue_signal is not None and trainer.world_size > 1 and torch.distributed.is_initialized():
            self._flags = torch.distributed.new_group(backend="gloo")  # a host flag: no wait for a GPU in a round
        if threading.current_thread() is threading.main_thread():
            requeue = () if self._requeue_signal is None else (self._requeue_signal,)
            for signum in ((signal.SIGINT, signal.SIGTERM) if trainer.world_size == 1 else ()) + requeue:
                if signal.getsignal(signum) is not signal.SIG_IGN:  # ignored (a background job's SIGINT): stays so
                    self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if self.interrupted:  # the second one: the handler from before the run takes it (KeyboardInterrupt, ...)
            self._restore_handlers()
            signal.raise_signal(signum)
            return
        self.interrupted = signum
        name, again = (
            ("Ctrl-C", " (press it again to stop at once, losing the rounds since the last checkpoint)")
            if signum == signal.SIGINT
            else (signal.Signals(signum).name, "")
        )
        if signum == self._requeue_signal:
            name, again = f"{name} (SLURM: the job's time is nearly up)", ", then requeueing the job"
        print(f"\n{name}: stopping at the end of this round and saving it{again}", file=sys.stderr)

    def _restore_handlers(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers = {}

    def on_exception(self, trainer, pl_module, exception) -> None:
        """Never a save here (ModelCheckpoint's save_on_exception): a round cut short is not a state
        to resume from."""
        self._restore_handlers()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        t = pl_module.t
        if self._flags is not None:  # did any rank see SLURM's signal?
            seen = torch.tensor([int(self.interrupted == self._requeue_signal)])
            torch.distributed.all_reduce(seen, op=torch.distributed.ReduceOp.MAX, group=self._flags)
            if int(seen):
                self.interrupted = self._requeue_signal
        if self.interrupted:
            trainer.should_stop = True
        # trainer.should_stop: set at this round by trainer.max_time (Lightning's Timer, agreed across
        # processes), by Ctrl-C or SIGTERM, or by a callback; saved here, mid-epoch, a checkpoint resumes like any other
        if t % self.every_n_rounds == 0 or t == pl_module.hparams.rounds or trainer.should_stop:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        """Write ``last.ckpt`` through a temporary file and keep the one it replaces as
        ``last.ckpt.prev`` (what ``--ckpt_path last`` falls back to if last.ckpt is damaged).
        Under ``seed_parallel`` the strategy does this for every rank's file."""
        t = trainer.lightning_module.t
        try:
            if getattr(trainer.strategy, "strategy_name", None) == "seed_parallel":
                super()._save_checkpoint(trainer, filepath)
                self._saved_round = t
                return
            write_keeping_previous(filepath, lambda tmp: trainer.save_checkpoint(tmp, self.save_weights_only))
        except CannotWrite as err:  # a full disk, a quota: the run stops, its last whole checkpoint kept
            kept = (
                f"{err.path} still holds round {self._saved_round}"
                if self._saved_round > 0
                else "no round was saved before it"
            )
            then = "make room, then" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "once it can be written,"
            raise CannotWrite(
                err.path,
                err,
                f"checkpoint: {err.path} cannot be written at round {t} ({err.reason}); "
                f"the run stops there, and {kept}: {then} go on with --ckpt_path "
                f"last",
            ) from err
        self._saved_round = t
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))

    def on_train_end(self, trainer, pl_module) -> None:
        """A run that stopped before its horizon says where it can go on from."""
        self._restore_handlers()
        t, T = pl_module.t, pl_module.hparams.rounds
        if t < T and trainer.is_global_zero:
            timed = (
                " (trainer.max_time counts the time of the earlier runs too)"
                if any(isinstance(c, Timer) for c in trainer.callbacks)
                else ""
            )
            where = (
                f"{self.last_model_path} holds round {self._saved_round}: go on with --ckpt_path last{timed}"
                if self._saved_round > 0
                else "this run saved no checkpoint"
            )
            if self.announce_stop:
                print(f"stopped at round {t} of data.rounds={T}; {where}", file=sys.stderr)
            if self.interrupted == self._requeue_signal and self._saved_round == t:
                print(requeue_slurm_job(), file=sys.stderr)

    def on_train_epoch_end(self, trainer, pl_module) -> None:  # rounds, not epochs, decide
        pass

    def on_validation_end(self, trainer, pl_module) -> None:
        pass


class InPlaceCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO``, but a local file is written where it is asked for, and synced.
    Lightning writes it into the system's temporary folder and then moves it (an fsspec transaction): a
    second copy of every checkpoint, across disks, and a save that fails when that folder is full. Here
    the atomic save is :func:`~nvldb_pl.machinery.host.write_keeping_previous`'s: a temporary name beside
    ``last.ckpt``, renamed once whole."""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        if storage_options is not None or "://" in str(path):  # (remote: Lightning's way)
            return super().save_checkpoint(checkpoint, path, storage_options=storage_options)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        buffer = io.BytesIO()  # (torch's zip writer turns a full disk's OSError into a RuntimeError: write it here)
        torch.save(checkpoint, buffer)
        with open(path, "wb") as fh:
            fh.write(buffer.getbuffer())
            fh.flush()
            os.fsync(fh.fileno())


def refuse_late_writer(strategy) -> None:
    """``AsyncCheckpointIO`` writes in another thread after the save returns, and a round's checkpoint is
    renamed into place as soon as it returns: a ValueError naming it."""
    writer = strategy.checkpoint_io
    if isinstance(writer, AsyncCheckpointIO) or isinstance(getattr(writer, "io", None), AsyncCheckpointIO):
        raise ValueError(
            "trainer.plugins: AsyncCheckpointIO writes a checkpoint in another thread after the save "
            "returns, and a round's checkpoint is renamed into place (last.ckpt, the one before kept as "
            "last.ckpt.prev) as soon as the save returns; leave it out"
        )


def save_in_place(strategy) -> None:
    """Lightning's default checkpoint writer (alone, or inside :class:`~nvldb_pl.machinery.resume.MergedSeeds`) as
    :class:`InPlaceCheckpointIO`; a writer the user chose stays."""
    writer = strategy.checkpoint_io
    if type(writer) is TorchCheckpointIO:
        strategy.checkpoint_io = InPlaceCheckpointIO()
    elif type(getattr(writer, "io", None)) is TorchCheckpointIO:
        writer.io = InPlaceCheckpointIO()


def slurm_requeue_off(trainer) -> Optional[int]:
    """Turn Lightning's SLURM auto-requeue off (it saves from inside its signal handler, mid-round); the
    signal it would have taken, None where it was off or the run is not under SLURM."""
    env = getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)
    if not isinstance(env, SLURMEnvironment) or not env.auto_requeue:
        return None
    env.auto_requeue = False
    return env.requeue_signal


def requeue_slurm_job() -> str:
    """Put this SLURM job back in the queue (as Lightning's auto-requeue does); what happened, in words."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}" if array else os.environ.get("SLURM_JOB_ID", "")
    if not job:
        return "SLURM: no SLURM_JOB_ID, so the job was not requeued; go on with --ckpt_path last"
    try:
        code = subprocess.call(["scontrol", "requeue", job])
    except OSError as err:
        code = f"{type(err).__name__}: {err}"
    if code == 0:
        return f"requeued SLURM job {job}: it goes on from this checkpoint if its command has --ckpt_path last"
    return f"SLURM: scontrol requeue {job} failed ({code}); go on with --ckpt_path last"
