"""A run's files on resume: what ``--ckpt_path`` names, whether it reads whole and is a fit run's,
where a new run may write, and the config record each invocation leaves.

``--ckpt_path last`` is the newest ``last.ckpt`` where :class:`~nvldb_pl.machinery.checkpoint.RoundCheckpoint`
saves; a damaged one falls back to its ``.prev``; a checkpoint several ``seed_parallel`` processes
saved goes on in one process as the merge of their seeds (:mod:`nvldb_pl.machinery.shards`). A new run never
writes over another run's files, and ``config.yaml`` stays the config a run started with.
"""

from __future__ import annotations

import glob
import os
import socket
import struct
import sys

import torch
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.cli import SaveConfigCallback

from . import shards
from .checkpoint import RoundCheckpoint
from .host import checkpoint_problem


class RunConfig(SaveConfigCallback):
    """``config.yaml`` in the run's folder: the config the run started with. A resume keeps it and
    writes its own config beside it, ``config.resumed_at_round_<t>.yaml`` (t: the round it went on
    from). Either is written when training starts, after every set-up check (the callbacks', the
    learner's, the checkpoint's): a run refused before that writes nothing there."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._run_dir = trainer.log_dir  # a collective under several processes: every rank asks

    def on_train_start(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero or self.already_saved:
            return
        if pl_module.t >= pl_module.hparams.rounds:  # a finished run resumed at its own horizon: nothing runs
            return
        name = "config.yaml" if pl_module.t == 0 else f"config.resumed_at_round_{pl_module.t}.yaml"
        config = self.config.clone()
        if config.get("ckpt_path"):
            config.ckpt_path = str(trainer.ckpt_path or config.ckpt_path)  # the file it went on from ("last" resolved)
        os.makedirs(self._run_dir, exist_ok=True)
        self.parser.save(
            config, os.path.join(self._run_dir, name), skip_none=False, overwrite=True, multifile=self.multifile
        )
        self.already_saved = True


class MergedSeeds(CheckpointIO):
    """Reads a checkpoint that several ``seed_parallel`` processes saved as one of all their seeds
    (:func:`nvldb_pl.machinery.shards.load_merged`), for a run that goes on in one process; writes as ``io``."""

    def __init__(self, io: CheckpointIO):
        self.io = io

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        return shards.load_share(str(path), lambda p: self.io.load_checkpoint(p, weights_only=weights_only), 1, 0)

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.io.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def remove_checkpoint(self, path):
        self.io.remove_checkpoint(path)


RUN_FILES = ("config.yaml", "summary.json", "curves.csv")  # what a run writes into its log folder


def drop_empty_event_files(folder: str) -> None:
    """Remove the TensorBoard event files this process opened in ``folder`` that hold nothing but
    their header: Lightning opens the writer in its set-up, before the checkpoint is read, so a
    refused resume (or a run refused in set-up) would leave one behind. A file holding any event
    more (a run stopped after it logged) stays."""
    mine = f".{socket.gethostname()}.{os.getpid()}."  # torch names them events.out.tfevents.<time>.<host>.<pid>.<n>
    for path in glob.glob(os.path.join(glob.escape(folder), "events.out.tfevents.*")):
        if mine in os.path.basename(path) and event_records(path) <= 1:
            os.remove(path)


def event_records(path: str) -> int:
    """The number of records in a TFRecord file (each: length u64, its CRC u32, data, the data's CRC u32)."""
    count = 0
    with open(path, "rb") as fh:
        while len(head := fh.read(12)) == 12:
            fh.seek(struct.unpack("<Q", head[:8])[0] + 4, os.SEEK_CUR)
            count += 1
    return count


def refuse_occupied(trainer) -> None:
    """A new run must not write over another run's files: its log folder (``default_root_dir`` itself
    with ``--trainer.logger false``; the default logger gives every run a new ``version_N``) and its
    checkpoint folder must hold none. Raise naming the field that chose the folder."""
    saver = next((c for c in trainer.callbacks if isinstance(c, RoundCheckpoint)), None)
    log_dir = trainer.log_dir or trainer.default_root_dir
    places = [("trainer.default_root_dir" if not trainer.loggers else "trainer.logger", log_dir, RUN_FILES)]
    if saver is not None:
        field = "checkpoint.dirpath" if saver.dirpath else places[0][0]
        places.append(
            (field, str(saver.dirpath or os.path.join(log_dir, "checkpoints")), ("last.ckpt", "last.ckpt.prev"))
        )
    for field, folder, names in places:
        found = [n for n in names if os.path.isfile(os.path.join(folder, n))]
        if found:
            raise ValueError(
                f"{field}: {folder} already holds another run's {', '.join(found)}; a new run would write "
                f"over it: go on with that run with --ckpt_path last, or give the new one another folder"
            )


def refuse_slurm_leftovers(trainer) -> None:
    """A new run under SLURM: Lightning would go on, without a word, from an ``hpc_ckpt_N.ckpt`` in
    ``default_root_dir`` (what its auto-requeue saved from inside a signal handler, maybe in the middle
    of a round; :class:`RoundCheckpoint` turns that off). A ValueError naming the file."""
    if not SLURMEnvironment.detect():
        return
    found = sorted(glob.glob(os.path.join(trainer.default_root_dir, "hpc_ckpt_*.ckpt")))
    if found:
        raise ValueError(
            f"trainer.default_root_dir: {found[-1]} is a checkpoint Lightning's SLURM auto-requeue wrote "
            f"from inside its signal handler, maybe in the middle of a round, and Lightning would go on "
            f"from it without a word; go on from the run's own checkpoint with --ckpt_path last, or move "
            f"the hpc_ckpt files out of {trainer.default_root_dir}"
        )


def last_checkpoint(trainer, identity: tuple[str, str] | None = None) -> str | None:
    """The ``last.ckpt`` that ``--ckpt_path last`` names: in the folder :class:`RoundCheckpoint`
    writes to, which is ``checkpoint.dirpath`` if set, else ``<logger save_dir>/<name>/version_N/
    checkpoints`` of the newest N holding one (any logger with versions; the default TensorBoard one
    is ``<default_root_dir>/lightning_logs``), else, with ``--trainer.logger false``,
    ``<default_root_dir>/checkpoints``. None where no checkpoint (nor its ``.prev``) is there yet. A run
    going on with ``--trainer.enable_checkpointing false`` (no RoundCheckpoint) looks in those default folders."""
    saver = next((c for c in trainer.callbacks if isinstance(c, RoundCheckpoint)), None)
    if saver is not None and saver.dirpath:
        folder = str(saver.dirpath)
    elif not trainer.loggers:
        folder = os.path.join(trainer.default_root_dir, "checkpoints")
    else:
        logger = trainer.loggers[0]
        version = newest_version(
            os.path.join(logger.save_dir or trainer.default_root_dir, str(logger.name or "")), identity
        )
        if version is None:
            return None
        folder = os.path.join(version, "checkpoints")
    return os.path.join(folder, "last.ckpt") if has_checkpoint(folder) else None


def has_checkpoint(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, f)) for f in ("last.ckpt", "last.ckpt.prev"))


def run_identity(config) -> tuple[str, str] | None:
    """(learner class name, task) of a fit config (a mapping or a jsonargparse Namespace; None where it names
    neither): what ``--ckpt_path last`` matches a run's folder by."""
    get = lambda c, k: c.get(k) if hasattr(c, "get") else None  # noqa: E731
    model, data = get(config, "model"), get(config, "data")
    path = get(model, "class_path") if model is not None else None
    task = get(data, "task") if data is not None else None
    if not isinstance(path, str) or not isinstance(task, str):
        return None
    return path.rpartition(".")[2], task


def _identity_of(version: str) -> tuple[str, str] | None:
    """The (learner, task) a run's folder was made with, from its config.yaml (None where it cannot be read)."""
    import yaml

    try:
        with open(os.path.join(version, "config.yaml"), encoding="utf-8") as fh:
            return run_identity(yaml.safe_load(fh))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def newest_version(logs: str, identity: tuple[str, str] | None = None) -> str | None:
    """The ``<logs>/version_N`` folder of largest N that holds a checkpoint (or its ``.prev``) and, given
    ``identity`` (:func:`run_identity` of this call), was made with the same learner and task (a folder whose
    config.yaml says neither is taken, as before this was checked): ``--ckpt_path last`` after a baseline's run in
    the same folder goes on with this learner's run, not the baseline's."""
    found = sorted(
        (
            d
            for d in glob.glob(os.path.join(logs, "version_*"))
            if d.rsplit("_", 1)[1].isdigit() and has_checkpoint(os.path.join(d, "checkpoints"))
        ),
        key=lambda d: int(d.rsplit("_", 1)[1]),
        reverse=True,
    )
    for d in found:
        if identity is None or _identity_of(d) in (None, identity):
            return d
    return None


def passed_over(trainer, identity: tuple[str, str] | None) -> str:
    """Where ``--ckpt_path last`` found no run of this learner and task: the runs with a checkpoint it passed over
    under the logger's folder, as ``", passed over version_1 (CoLSTIM on cos), version_0 (NVLDB on cos)"`` (empty
    where there were none)."""
    if identity is None or not trainer.loggers:
        return ""
    logger = trainer.loggers[0]
    logs = os.path.join(logger.save_dir or trainer.default_root_dir, str(logger.name or ""))
    found = sorted(
        (d for d in glob.glob(os.path.join(logs, "version_*")) if d.rsplit("_", 1)[1].isdigit()),
        key=lambda d: int(d.rsplit("_", 1)[1]),
        reverse=True,
    )
    others = [
        (d, _identity_of(d))
        for d in found
        if has_checkpoint(os.path.join(d, "checkpoints")) and _identity_of(d) not in (None, identity)
    ]
    if not others:
        return ""
    return ", passed over " + ", ".join(f"{os.path.basename(d)} ({who[0]} on {who[1]})" for d, who in others)


# Lightning's other ckpt_path words, and why they name nothing here
OTHER_WORDS = {
    "best": "a bandit run keeps no best checkpoint: it has no validation metric to rank one by",
    "hpc": "Lightning's SLURM requeue checkpoint, which a run here does not write: a run stopped by "
    "SIGTERM or SLURM's requeue signal saves its last.ckpt",
    "registry": "Lightning's model registry, which a run here does not use",
}


def refuse_missing(path: str) -> None:
    """A ``--ckpt_path`` that names no file (nor its ``.prev``), or a folder: a ValueError naming it, with
    what it may name instead (Lightning's words ``best``, ``hpc``, ``registry`` included)."""
    if os.path.isdir(path):  # e.g. a run's checkpoints/ folder
        inside = os.path.join(path, "last.ckpt")
        hint = f"give {inside}" if has_checkpoint(path) else "give last or a checkpoint's path"
        raise ValueError(f"ckpt_path: {path} is a folder, not a checkpoint file; {hint}")
    if os.path.exists(path) or os.path.exists(f"{path}.prev"):
        return
    why = OTHER_WORDS.get(str(path).split(":", 1)[0])
    raise ValueError(
        f"ckpt_path: {path}: no such file{f' ({why})' if why else ''}; give last (the newest run's "
        f"checkpoint under trainer.default_root_dir) or a checkpoint's path"
    )


def refuse_rank_file(path: str) -> None:
    """``--ckpt_path`` naming one rank's file of a ``seed_parallel`` run (``last.ckpt.rank1`` or its ``.prev``):
    it holds that rank's seeds only, and the run goes on from its ``last.ckpt`` (every rank's file, merged).
    A ValueError naming both."""
    name = os.path.basename(str(path))
    head, _, tail = name.removesuffix(".prev").rpartition(".rank")
    if not head or not tail.isdigit():
        return
    base = os.path.join(os.path.dirname(str(path)), head)
    if os.path.exists(base) or os.path.exists(f"{base}.prev"):
        raise ValueError(
            f"ckpt_path: {path} is rank {tail}'s share of the seeds of a seed_parallel run; give {base}, "
            f"which goes on with every rank's seeds (in any number of processes)"
        )


def whole_checkpoint(path: str, field: str = "ckpt_path") -> str:
    """``path`` if it reads whole, else the previous checkpoint next to it (saying so on stderr);
    a ValueError naming both files when neither does. ``field`` heads each message: the option that named
    the file (``ckpt_path``), or ``""`` where none did (a grid run found by ``scripts/reproduce.py``)."""
    problem = checkpoint_problem(path) if os.path.exists(path) else "missing"
    head = f"{field}: " if field else ""
    if problem is None:
        return path
    prev = f"{path}.prev"
    if os.path.exists(prev) and checkpoint_problem(prev) is None:
        print(f"{head}{path} cannot be read ({problem}); resuming from the previous checkpoint {prev}", file=sys.stderr)
        return prev
    if not os.path.exists(prev) and os.path.basename(path) != "last.ckpt":  # some other file, named by path
        raise ValueError(f"{head}{path} cannot be read as a checkpoint ({problem}); give last or a fit run's last.ckpt")
    raise ValueError(
        f"{head}{path} cannot be read ({problem}) and there is no whole previous checkpoint ({prev}) to resume from"
    )


def refuse_other_kind(path: str) -> int:
    """A whole file that is not a ``fit`` run's checkpoint (a live ask/tell save, another program's
    archive): a ValueError naming the file, before Lightning reads it. Else the number of processes
    the run that saved it had."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception as err:  # noqa: BLE001 (a zip that is not torch's)
        raise ValueError(f"ckpt_path: {path} is not a torch checkpoint ({type(err).__name__}: {err})") from None
    if not isinstance(ckpt, dict) or "pytorch-lightning_version" not in ckpt or "state_dict" not in ckpt:
        live = isinstance(ckpt, dict) and str(ckpt.get("format", "")).startswith("nvldb_pl.live")
        what = (
            "a live ask/tell save (DuelingBandit.save); DuelingBandit.from_checkpoint reads it"
            if live
            else "not a checkpoint of a fit run (no Lightning state in it)"
        )
        raise ValueError(f"ckpt_path: {path} is {what}; --ckpt_path takes a fit run's last.ckpt")
    return shards.saved_processes(ckpt, path)


def resumed_version(root: str, ckpt_path, identity: tuple[str, str] | None = None) -> int | None:
    """The TensorBoard version to log into: that of the run being resumed, else None (a new one).

    ``last``: the newest ``lightning_logs/version_N`` with ``checkpoints/last.ckpt`` (of this learner and task,
    ``identity``: :func:`newest_version`); a path
    inside ``<root>/lightning_logs/version_N/``: that N.
    """
    logs = os.path.join(root, "lightning_logs")
    if ckpt_path == "last":
        version = newest_version(logs, identity)
        return None if version is None else int(version.rsplit("_", 1)[1])
    if ckpt_path:
        rel = os.path.relpath(os.path.abspath(ckpt_path), os.path.abspath(logs))
        head = rel.split(os.sep)[0]
        if not rel.startswith("..") and head.startswith("version_") and head[8:].isdigit():
            return int(head[8:])
    return None
