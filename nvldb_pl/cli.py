"""``python scripts/main.py fit --config configs/cos.yaml``: the LightningCLI of the package.

The model is any :class:`~nvldb_pl.learner.DuelingLearner`: NVLDB by default, or a baseline
chosen with ``--model CoLSTIM`` (a class name of :mod:`nvldb_pl.baselines`, or a full import
path); ``--model.<arg>`` sets that class's arguments. One source of truth for what both sides
need: ``data.{dim,arms,rounds,num_seeds,link}`` are linked into the model. ``checkpoint.*``
configures :class:`~nvldb_pl.checkpoint.RoundCheckpoint` (``last.ckpt`` every 50 rounds by
default, in the run's log dir); ``fit --ckpt_path last`` resumes the newest run under
``default_root_dir`` that has one, logging into that same run's folder. ``loop.*`` configures the :class:`~nvldb_pl.callbacks.DuelingLoop`
callback. Everything a run writes goes under ``trainer.default_root_dir``.
"""
from __future__ import annotations

import glob
import os
import sys
import warnings

from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import TensorBoardLogger

from . import baselines  # noqa: F401  (registers the baseline classes for ``--model Name``)
from . import parallel  # noqa: F401  (registers ``--trainer.strategy seed_parallel``)
from .callbacks import DuelingLoop, RunSummary
from .checkpoint import RoundCheckpoint
from .data import BanditDataModule
from .host import check_writable
from .learner import LINKED_FROM_DATA, DuelingLearner


# Warnings from inside Lightning that a user of this package can do nothing about, filtered by
# their exact text (every other warning still shows):
# - Lightning's own use of torch's pytree API, deprecated in torch 2.13 (no code of ours involved);
# - "IterableDataset has __len__": it concerns worker processes, and RoundStream is always loaded
#   with num_workers=0 (its __len__ gives Lightning the horizon T, which resume relies on).
QUIET = (r".*isinstance\(treespec, LeafSpec\)` is deprecated", r"Your `IterableDataset` has `__len__` defined")


def quiet_lightning() -> None:
    for message in QUIET:
        warnings.filterwarnings("ignore", message=message)


class NVLDBCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        for key in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{key}", f"model.init_args.{key}")
        parser.set_defaults({"model": {"class_path": "nvldb_pl.module.NVLDB"}})
        parser.add_lightning_class_args(DuelingLoop, "loop")
        parser.add_lightning_class_args(RoundCheckpoint, "checkpoint")

    def instantiate_trainer(self, **kwargs):
        cfg = self._get(self.config_init, "trainer", default={})
        root = cfg.get("default_root_dir") or os.getcwd()
        check_writable(root)
        if cfg.get("logger") in (None, True):
            ckpt = self.config.get(self.subcommand, {}).get("ckpt_path") if self.subcommand else None
            version = resumed_version(root, ckpt)
            kwargs["logger"] = TensorBoardLogger(save_dir=root, name="lightning_logs", version=version,
                                                          default_hp_metric=False)
        # RoundCheckpoint's folder: Lightning resolves <log dir>/checkpoints and broadcasts rank 0's
        return super().instantiate_trainer(**kwargs)


def resumed_version(root: str, ckpt_path) -> int | None:
    """The TensorBoard version to log into: that of the run being resumed, else None (a new one).

    ``last``: the newest ``lightning_logs/version_N`` with ``checkpoints/last.ckpt``; a path
    inside ``<root>/lightning_logs/version_N/``: that N.
    """
    logs = os.path.join(root, "lightning_logs")
    if ckpt_path == "last":
        found = [d for d in glob.glob(os.path.join(logs, "version_*"))
                 if os.path.isfile(os.path.join(d, "checkpoints", "last.ckpt"))]
        if found:
            return max(int(d.rsplit("_", 1)[1]) for d in found)
        return None
    if ckpt_path:
        rel = os.path.relpath(os.path.abspath(ckpt_path), os.path.abspath(logs))
        head = rel.split(os.sep)[0]
        if not rel.startswith("..") and head.startswith("version_") and head[8:].isdigit():
            return int(head[8:])
    return None


def main(args=None) -> NVLDBCLI:
    quiet_lightning()
    return NVLDBCLI(
        DuelingLearner,
        BanditDataModule,
        subclass_mode_model=True,
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={
            "max_epochs": 1,
            "enable_checkpointing": True,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "callbacks": [RunSummary()],
        },
        args=args,
    )


def run_cli(argv: list[str] | None = None) -> int:
    """``main`` with a user's view of failure: one ``error: ...`` line on stderr and exit status 2
    for a configuration, data or numerical error; 0 on success."""
    try:
        main(argv)
    except (ValueError, FileNotFoundError, FloatingPointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SystemExit as stop:  # the argument parser's own errors (unknown key, wrong type)
        return stop.code if isinstance(stop.code, int) else 2
    return 0
