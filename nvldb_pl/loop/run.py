"""Run one experiment from Python (tests, sweeps, benchmarks): the same pieces as the CLI."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import warnings
from typing import Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ..machinery import devices
from .callbacks import DuelingLoop, ShareCores
from .summary import RunSummary
from ..machinery.checkpoint import RoundCheckpoint
from .data import BanditDataModule
from .module import LearnerModule
from ..machinery.host import claim_new_folder, hold_folder
from ..maths.checks import LINKED_FROM_DATA
from ..learners.base import DuelingLearner
from ..learners.registry import learner_class
from .trainer_checks import launched_processes


def build(data: dict, model: dict, learner: str | type = "NVLDB") -> tuple[BanditDataModule, DuelingLearner]:
    """The data module and a learner (a class, a name of :data:`~nvldb_pl.learners.registry.LEARNERS` or an import path) with
    data's fields linked."""
    if isinstance(learner, str):
        learner = learner_class(learner)
    dm = BanditDataModule(**data)
    linked = {k: dm.link if k == "link" else getattr(dm.spec, k) for k in LINKED_FROM_DATA}
    module = learner(**linked, **model)
    return dm, module


def check_placement(accelerator: str) -> None:
    """Refuse, before anything runs or is written, a device this machine does not have, or a start as one of
    several processes: a script's runs each run in one process, so under torchrun or srun every process ran
    them all (a sweep appended each row once a process)."""
    devices.check_accelerator(accelerator, field="--accelerator", allowed=("cpu", "gpu"))
    launch = launched_processes()
    if launch is not None and launch[1] > 1:
        launcher, world, _ = launch
        script = os.path.basename(sys.argv[0]) or "this script"
        raise ValueError(
            f"{launcher} started {world} processes, and {script} runs each of its runs in one process: "
            f"every process would run them all (the same runs again, into the same files); start it "
            f"without {launcher} (one run's seeds spread over processes: scripts/main.py fit "
            f"--trainer.strategy seed_parallel)"
        )


def tensorboard_logger(root_dir: str, version: Optional[int]) -> TensorBoardLogger:
    """TensorBoard in ``<root_dir>/lightning_logs/version_<version>`` (None: Lightning picks the next),
    as every run of the package lays it out (the CLI's and the scripts')."""
    return TensorBoardLogger(save_dir=root_dir, name="lightning_logs", version=version, default_hp_metric=False)


def _new_run_logger(root_dir: str) -> TensorBoardLogger:
    """:func:`tensorboard_logger` in a version_N claimed before anything is written (two runs started at
    once into one folder get a folder each: :func:`nvldb_pl.machinery.host.claim_new_folder`)."""
    return tensorboard_logger(root_dir, claim_new_folder(os.path.join(root_dir, "lightning_logs")))


def stopped_by_ctrl_c(stop: SystemExit) -> bool:
    """Whether ``stop`` is Lightning's answer to a Ctrl-C inside ``fit``: ``sys.exit(1)``, raised while it
    handles the KeyboardInterrupt (its notice is an info line, which a quiet run does not show)."""
    return isinstance(stop.__context__, KeyboardInterrupt)


def stop_at_ctrl_c_in_one_line(main, script: str) -> None:
    """Run a script's ``main()``; a Ctrl-C (Python's KeyboardInterrupt, or Lightning's ``sys.exit(1)`` for one
    inside ``fit``) ends it with ``<script>: stopped by Ctrl-C`` on stderr and exit 130, not a traceback.
    What the script printed before stays: the diagnostic scripts print each figure as it is measured."""
    try:
        main()
    except (KeyboardInterrupt, SystemExit) as stop:
        if isinstance(stop, SystemExit) and not stopped_by_ctrl_c(stop):
            raise
        print(f"{script}: stopped by Ctrl-C", file=sys.stderr)
        raise SystemExit(130) from None


class RunStopped(Exception):
    """A run stopped by a signal (Ctrl-C's SIGINT, SIGTERM) at the end of a round, saved: ``signum``,
    ``round`` (the rounds played), ``checkpoint`` (the file that holds them); ``where``: set by a caller
    that knows more (the grid's task and method)."""

    def __init__(self, signum: int, round: int, checkpoint: str):
        super().__init__(f"stopped by signal {signum} at round {round}, saved in {checkpoint}")
        self.signum, self.round, self.checkpoint, self.where = signum, round, checkpoint, ""


class RunTerminated(Exception):
    """A run that keeps no checkpoint stopped by SIGTERM (Lightning ends ``fit`` with a SystemExit of no code, which
    would end the process with exit 0 as if it had finished): ``signum``, ``round`` (the rounds played, not kept)."""

    def __init__(self, signum: int, round: int):
        super().__init__(f"stopped by {signal.Signals(signum).name} at round {round}; nothing of it was kept")
        self.signum, self.round = signum, round


class GridCheckpoint(RoundCheckpoint):
    """:class:`RoundCheckpoint` for :func:`run_experiment`, whose caller says how a stopped run goes on
    (:class:`RunStopped`: for ``scripts/reproduce.py``, the same command), not the CLI's ``--ckpt_path``."""

    announce_stop = False


@contextlib.contextmanager
def lightning_quieted(on: bool):
    """Lightning's info lines and warnings held back inside the block, as they were after it (a script's later
    CLI run, or a notebook's, still says what Lightning says)."""
    if not on:
        yield
        return
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="lightning")
        lightning_log.setLevel(logging.ERROR)
        try:
            yield
        finally:
            lightning_log.setLevel(level)


def run_experiment(
    data: dict,
    model: dict,
    root_dir: Optional[str] = None,
    precision="32-true",
    log_every_n_rounds: int = 50,
    quiet: bool = True,
    learner: str | type = "NVLDB",
    accelerator: str = "cpu",
    sync_timings: bool = True,
    callbacks: tuple = (),
    checkpoint_every: Optional[int] = None,
    resume: Optional[tuple[int, str]] = None,
    threads: Optional[int] | str = None,
    with_curves: bool = False,
) -> tuple[dict, DuelingLearner]:
    """Fit one configuration on one device (``accelerator``: Lightning's name, "cpu" or "gpu");
    returns (summary dict, trained learner). No logger unless root_dir. ``sync_timings``: on CUDA,
    wait for the device around each timed section (a true time split, at a few host waits a round);
    False times the run as the CLI runs it (the split then counts launches only). ``callbacks``: more
    Lightning callbacks, after the loop's own (e.g. ``lab/diagnostics/feature_trace.py``'s trace).
    ``checkpoint_every`` (with root_dir): ``last.ckpt`` every that many rounds (:class:`RoundCheckpoint`),
    and a first Ctrl-C or SIGTERM stops the run at the end of a round, saved, raising :class:`RunStopped`.
    ``resume`` = (N, checkpoint): go on from that checkpoint, logging into ``root_dir``'s version_N.
    ``threads``: CPU threads (torch.set_num_threads); "auto": as the CLI picks them (:func:`devices.cpu_threads`,
    torch's count shared with the runs beside it: :class:`ShareCores`); None: as they are, not shared. ``with_curves``:
    the summary also holds ``curves``, {"rounds": [t, ...], "cum_avg_regret": [[R^a_t of each seed], ...]} (in memory
    only: a folder's run writes them to curves.csv)."""
    check_placement(accelerator)
    devices.check_precision(precision, field="--precision")
    if resume is not None and (root_dir is None or not checkpoint_every):
        raise ValueError("resume: a run goes on from a checkpoint with root_dir and checkpoint_every given")
    dm, module = build(data, model, learner)
    share = []
    if threads is not None:
        n = devices.threads_for(None if threads == "auto" else threads, module.problem_size())
        if n is not None:
            torch.set_num_threads(n)
        # torch's count, chosen for the run: shared with the runs beside it (nvldb_pl/machinery/cores.py)
        share = [ShareCores.for_choice(n)]
    summary = RunSummary(write=root_dir is not None)  # no folder given: write nothing (not even to the cwd)
    with lightning_quieted(quiet):  # Lightning's info lines and warnings, for this run only
        saver = [GridCheckpoint(checkpoint_every)] if checkpoint_every and root_dir is not None else []
        logger = (
            False
            if root_dir is None
            else _new_run_logger(root_dir)
            if resume is None
            else tensorboard_logger(root_dir, resume[0])
        )
        trainer = pl.Trainer(
            max_epochs=1,
            accelerator=accelerator,
            devices=1,
            precision=precision,
            logger=logger,
            default_root_dir=root_dir,
            enable_checkpointing=bool(saver),
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            callbacks=[
                loop := DuelingLoop(
                    log_every_n_rounds,
                    save_curves=root_dir is not None or with_curves,
                    write_curves=root_dir is not None,
                ),
                summary,
                *saver,
                *share,
                *callbacks,
            ],
        )
        handler, held = signal.getsignal(signal.SIGINT), None
        if saver:  # a run another process could go on with (scripts/reproduce.py): held while this one runs
            held = hold_folder(logger.log_dir)
            if held is None:
                raise ValueError(
                    f"{logger.log_dir}: another process is running this run now; let it finish, or stop it"
                )
        try:
            trainer.fit(
                LearnerModule(module, sync_timings), datamodule=dm, ckpt_path=None if resume is None else resume[1]
            )
        except SystemExit as stop:
            if stopped_by_ctrl_c(stop):  # a script says what stopped
                raise KeyboardInterrupt from None
            if isinstance(stop, SIGTERMException) and not saver:  # its caller says what stopped, exit 143
                raise RunTerminated(signal.SIGTERM, module.t) from None
            raise
        finally:
            if handler is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, handler)  # Lightning's shutdown set it to ignored
            if held is not None:
                held.close()
        if saver and saver[0].interrupted:
            raise RunStopped(saver[0].interrupted, module.t, os.path.join(str(saver[0].dirpath), "last.ckpt"))
        if held is not None:  # finished: no process goes on with it, so its lock file goes
            os.remove(held.name)
        if with_curves:
            rounds, R = loop.curves()
            return {**summary.summary, "curves": {"rounds": rounds, "cum_avg_regret": R.tolist()}}, module
        return summary.summary, module
