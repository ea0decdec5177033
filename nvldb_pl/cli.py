"""``python scripts/main.py fit --config configs/cos.yaml``: the LightningCLI of the package.

The model is any :class:`~nvldb_pl.learner.DuelingLearner`: NVLDB by default, or a baseline
chosen with ``--model CoLSTIM`` (a class name of :mod:`nvldb_pl.baselines`, or a full import
path); ``--model.<arg>`` sets that class's arguments. One source of truth for what both sides
need: ``data.{dim,arms,rounds,num_seeds,link}`` are linked into the model. ``loop.*`` configures the :class:`~nvldb_pl.callbacks.DuelingLoop`
callback. Everything a run writes goes under ``trainer.default_root_dir``.
"""
from __future__ import annotations

import os

from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import TensorBoardLogger

from . import baselines  # noqa: F401  (registers the baseline classes for ``--model Name``)
from .callbacks import DuelingLoop, RunSummary
from .data import BanditDataModule
from .learner import LINKED_FROM_DATA, DuelingLearner


class NVLDBCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        for key in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{key}", f"model.init_args.{key}")
        parser.set_defaults({"model": {"class_path": "nvldb_pl.module.NVLDB"}})
        parser.add_lightning_class_args(DuelingLoop, "loop")

    def instantiate_trainer(self, **kwargs):
        cfg = self._get(self.config_init, "trainer", default={})
        if cfg.get("logger") in (None, True):
            root = cfg.get("default_root_dir") or os.getcwd()
            kwargs["logger"] = TensorBoardLogger(save_dir=root, name="lightning_logs", default_hp_metric=False)
        return super().instantiate_trainer(**kwargs)


def main(args=None) -> NVLDBCLI:
    return NVLDBCLI(
        DuelingLearner,
        BanditDataModule,
        subclass_mode_model=True,
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={
            "max_epochs": 1,
            "enable_checkpointing": False,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "callbacks": [RunSummary()],
        },
        args=args,
    )
