"""``python scripts/main.py fit --config configs/cos.yaml``: the LightningCLI of the package.

The model is any :class:`~nvldb_pl.learners.base.DuelingLearner`: NVLDB by default, or a baseline
chosen with ``--model CoLSTIM`` (a class name of :mod:`nvldb_pl.learners`, or a full import
path); ``--model.<arg>`` sets that class's arguments. One source of truth for what both sides
need: ``data.{dim,arms,rounds,num_seeds,link}`` are linked into the model. ``checkpoint.*``
configures :class:`~nvldb_pl.machinery.checkpoint.RoundCheckpoint` (``last.ckpt`` every 50 rounds by
default, in the run's log dir); ``fit --ckpt_path last`` resumes the newest run under
``default_root_dir`` that has one, logging into that same run's folder. ``loop.*`` configures the :class:`~nvldb_pl.loop.callbacks.DuelingLoop`
callback. Everything a run writes goes under ``trainer.default_root_dir``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Optional

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from . import learners  # noqa: F401  (imports the baseline classes, so that ``--model Name`` finds them)
from .machinery.parallel import (
    end_process_group,
    started_as_first_process,
)  # (importing it registers ``--trainer.strategy seed_parallel``)
from .loop.callbacks import DuelingLoop, ShareCores
from .loop.summary import RunSummary
from .machinery.checkpoint import RoundCheckpoint, slurm_requeue_off
from .loop.data import BanditDataModule
from .loop.module import LearnerModule
from .machinery.devices import threads_for
from .machinery.own_modules import find_own_modules_here
from .machinery.yaml_files import check_config_files, config_paths, upgraded_config_args
from .machinery import run_folders
from .machinery.run_folders import HELD, MADE_FOLDERS, RUN_FOLDERS, WITHOUT_CHECKPOINTS, hold_places, release_run_folder
from .machinery.host import (
    CannotWrite,
    check_folder_writable,
    check_writable,
    claim_new_folder,
    folders_to_make,
    hold_folder,
    software,
    software_text,
)
from .maths.checks import LINKED_FROM_DATA
from .learners.base import DuelingLearner
from .machinery.messages import BanditArgumentParser, end_progress_line, quiet_lightning, rank_prefix, user_message
from .learners.nvldb import NVLDB
from .machinery.own_defaults import class_of, given_keys, restore_own_defaults
from .learners.registry import LEARNERS
from .machinery.resume import (
    MergedSeeds,
    RunConfig,
    last_checkpoint,
    passed_over,
    refuse_missing,
    refuse_occupied,
    refuse_other_kind,
    refuse_rank_file,
    refuse_slurm_leftovers,
    resumed_version,
    run_identity,
    whole_checkpoint,
)
from .loop.run import stopped_by_ctrl_c, tensorboard_logger
from .environments.seeding import shard
from .loop.trainer_checks import check_trainer, launched_processes


PATH_FIELDS = ("trainer.default_root_dir", "checkpoint.dirpath", "data.data_dir", "data.data_file", "ckpt_path")


class PrintVersion(argparse.Action):
    """``--version``: the software, in one line (argparse's own version action wraps it), asked only when given."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(software_text(software()), flush=True)
        parser.exit(0)


class NVLDBCLI(LightningCLI):
    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """``fit`` only: a run is the bandit loop, with no validation, test or predict step."""
        return {"fit": LightningCLI.subcommands()["fit"]}

    def init_parser(self, **kwargs):
        """Lightning's parser, with ``--version``: the software a run's numbers come from (summary.json's ``software``)."""
        parser = super().init_parser(**kwargs)
        parser.add_argument(
            "-V",
            "--version",
            action=PrintVersion,
            help="Print this package's version, git commit, and the versions of torch, lightning, "
            "numpy and Python, and exit.",
        )
        return parser

    def add_core_arguments_to_parser(self, parser) -> None:
        """Lightning's trainer and data module; ``model`` is any :class:`~nvldb_pl.learners.base.DuelingLearner`
        subclass (a plain torch learner, wrapped in :class:`~nvldb_pl.loop.module.LearnerModule` once built)."""
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        parser.set_defaults({"trainer." + k: v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        parser.add_subclass_arguments(DuelingLearner, "model", fail_untyped=False, required=True)
        parser.add_lightning_class_args(self._datamodule_class, "data", subclass_mode=self.subclass_mode_data)

    def instantiate_classes(self) -> None:
        """Lightning's, with the learner wrapped in the one LightningModule that drives every learner."""
        self.config_init = self.parser.instantiate_classes(self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = LearnerModule(self._get(self.config_init, "model"))
        self.trainer = self.instantiate_trainer()

    def add_arguments_to_parser(self, parser) -> None:
        for key in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{key}", f"model.init_args.{key}")
        parser.set_defaults({"model": {"class_path": "nvldb_pl.learners.nvldb.NVLDB"}})
        parser.add_lightning_class_args(DuelingLoop, "loop")
        # a class group, not a callback key: instantiate_trainer adds it unless checkpointing is off
        parser.add_class_arguments(
            RoundCheckpoint, "checkpoint", fail_untyped=False, instantiate=True, sub_configs=True
        )
        parser.add_argument(
            "--threads",
            type=Optional[int],
            default=None,
            help="CPU threads of this run (default: 1 for a small problem, num_seeds x rounds x width^2 below 1e7, "
            "else torch's own choice, shared with the package's other runs on this machine; OMP_NUM_THREADS, where "
            "set, is kept)",
        )

    def parse_arguments(self, parser, args) -> None:
        """Lightning's parsing, then the chosen model class's own defaults for every argument the user did
        not give (jsonargparse would carry NVLDB's over: :mod:`nvldb_pl.machinery.own_defaults`); a seed out of
        numpy's range is refused here, before Lightning seeds with it."""
        argv = list(sys.argv[1:] if args is None else args) if not isinstance(args, dict) else []
        printed = [a for a in argv if a == "--print_config"]  # (with flags, jsonargparse's own print)
        if printed:  # printed after the defaults are put right (jsonargparse prints from inside its parse)
            argv = [a for a in argv if a not in printed]
            if args is None:
                sys.argv[1:] = argv
            else:
                args = argv
        super().parse_arguments(parser, args)
        sub = self.config.get("subcommand")
        cfg = self.config.get(sub) if sub else self.config
        model = cfg.get("model") if cfg is not None else None
        if model is not None and getattr(model, "class_path", None) and model.get("init_args") is not None:
            chosen = class_of(model.class_path)
            if chosen is not None:
                restore_own_defaults(model.init_args, chosen, NVLDB, given_keys(argv, "model"), LINKED_FROM_DATA)
        seed = cfg.get("seed_everything") if cfg is not None else None  # Lightning's message would name no field
        if not isinstance(seed, bool) and isinstance(seed, int) and not 0 <= seed <= 2**32 - 1:
            raise ValueError(
                f"seed_everything: must be between 0 and {2**32 - 1} (the seeds numpy takes), or "
                f"true (a random one) or false, got {seed}"
            )
        if seed is True and cfg is not None:  # "a random one" (Lightning's seed_everything() would give 0)
            cfg["seed_everything"] = random_seed()
        # Lightning's CLI would load an explicit ckpt_path file next (before anything is checked: a damaged or
        # foreign file gives a raw traceback) and let its hyperparameters override the command line silently.
        # It is held back until before_instantiate_classes: the command line stays the config, before_fit checks
        # that the file reads whole, and the learner refuses a checkpoint of another config, naming the fields.
        self.held_ckpt_path = cfg.get("ckpt_path") if sub and cfg is not None else None
        if self.held_ckpt_path is not None:
            cfg["ckpt_path"] = None
        if printed:
            import yaml

            dumped = yaml.safe_load(parser.dump(self.config, skip_check=True, skip_none=False))
            import lightning

            sys.stdout.write(
                f"# lightning.pytorch=={lightning.__version__}\n"
                + yaml.safe_dump(
                    dumped.get(sub, dumped) if sub else dumped,
                    sort_keys=False,
                    allow_unicode=True,
                    default_flow_style=False,
                )
            )
            sys.stdout.flush()
            raise SystemExit(0)

    def before_instantiate_classes(self) -> None:
        """``~`` in a path field (YAML or ``--field=~/x``, where no shell expands it) is the home folder:
        left as it is, Lightning's TensorBoard logger expands it and the checkpoints do not, and a run's
        files would be split between ``$HOME`` and a folder named ``~`` in the working folder."""
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        if getattr(self, "held_ckpt_path", None) is not None:
            cfg["ckpt_path"] = self.held_ckpt_path
        for key in PATH_FIELDS:
            value = cfg.get(key)
            if isinstance(value, str) and value.startswith("~"):
                cfg[key] = os.path.expanduser(value)

    def instantiate_trainer(self, **kwargs):
        section = self.config_init[self.subcommand] if self.subcommand else self.config_init
        threads = threads_for(
            section.get("threads"), self.model.learner.problem_size()
        )  # as the learner measures its run
        if threads is not None:  # a second thread stalls a small run beside another (docs/performance.md)
            torch.set_num_threads(threads)
        # torch's count, chosen for the run: shared with the runs beside it (nvldb_pl/machinery/cores.py)
        self.share_cores = ShareCores.for_choice(threads)
        cfg = section.get("trainer") or {}
        n = check_trainer(cfg)
        if n > 1:  # here, before the processes start: one message, not one per rank
            shard(self.datamodule.spec.num_seeds, self.datamodule.spec.first_seed_id, n, 0)
        root = cfg.get("default_root_dir") or os.getcwd()
        MADE_FOLDERS.extend(folders_to_make(root))  # what check_writable is about to make
        check_writable(root)
        if cfg.get("logger") in (None, True):
            logs = os.path.join(root, "lightning_logs")
            MADE_FOLDERS.extend([logs] if not os.path.exists(logs) else [])
            if os.path.exists(logs) and not os.path.isdir(logs):
                raise ValueError(
                    f"trainer.default_root_dir: {logs} is a file, where the runs' folders go; move it "
                    f"or give another folder"
                )
            ckpt = self.config.get(self.subcommand, {}).get("ckpt_path") if self.subcommand else None
            version = resumed_version(root, ckpt, run_identity(self.config.get(self.subcommand)))
            claimed = version is None and started_as_first_process()
            if claimed:  # a new run: its own folder, even beside another run starting at the same moment
                version = claim_new_folder(logs)
            if version is not None:
                folder = os.path.join(logs, f"version_{version}")
                RUN_FOLDERS.append((folder, claimed))
                if started_as_first_process() and os.path.isdir(folder):  # one process at a time goes on with a run
                    for place in (folder, os.path.join(folder, "checkpoints")):  # found now, not at its first save
                        if not claimed and os.path.isdir(place):
                            check_folder_writable(
                                place,
                                "ckpt_path",
                                "; a run going on writes its checkpoints, curves and logs there: make it writable, or "
                                "copy the run's folder to one that is and go on there",
                            )
                    held = hold_folder(folder)
                    if held is None:
                        raise ValueError(
                            f"ckpt_path: {folder} is being run by another process now (it holds {folder}/.lock); "
                            f"go on with it once that process has ended"
                        )
                    HELD.append((folder, held))
            kwargs["logger"] = tensorboard_logger(root, version)
        # the user's trainer.callbacks, then RoundCheckpoint (its folder: Lightning resolves <log dir>/checkpoints
        # and broadcasts rank 0's). With --trainer.enable_checkpointing false: no RoundCheckpoint, and under SLURM
        # no auto-requeue either (its save from inside the signal handler is the one RoundCheckpoint turns off).
        callbacks = cfg.get("callbacks")
        callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, list) else [callbacks]
        checkpointing = cfg.get("enable_checkpointing") is not False
        kwargs["callbacks"] = callbacks + ([section["checkpoint"]] if checkpointing else [])
        if not checkpointing:
            WITHOUT_CHECKPOINTS.append(True)
        trainer = super().instantiate_trainer(**kwargs)
        if not checkpointing:
            slurm_requeue_off(trainer)
        if getattr(self, "share_cores", None) is not None:
            trainer.callbacks.append(self.share_cores)
        return trainer

    def before_fit(self) -> None:
        """Resolve ``--ckpt_path`` (``last``: the newest run under default_root_dir) to a file that
        reads whole, falling back to the previous checkpoint (under seed_parallel every rank does
        this for its own file, :mod:`nvldb_pl.machinery.parallel`)."""
        cfg = self.config_init[self.subcommand]
        ckpt = cfg.get("ckpt_path")
        strategy = (cfg.get("trainer") or {}).get("strategy", "auto")
        if cfg.get("seed_everything") is False and started_as_first_process():  # Lightning's "do not seed"
            print(
                f"seed_everything=false: every draw of a run (contexts, feedback, initial weights) still comes from "
                f"a base seed, {self.datamodule.spec.base_seed} here; give an integer to choose another",
                file=sys.stderr,
            )
        identity = run_identity(self.config.get(self.subcommand))
        path = last_checkpoint(self.trainer, identity) if ckpt == "last" else ckpt
        if ckpt == "last" and path is None:  # nothing saved yet, or checkpointing off
            ckpt = cfg["ckpt_path"] = None  # a new run (Lightning would warn with a hint that does not apply here)
            if started_as_first_process():
                others = passed_over(self.trainer, identity)  # the runs of other learners or tasks there
                mine = f"; none of a {identity[0]} run on {identity[1]}{others}" if others else ""
                print(
                    f"ckpt_path=last: no checkpoint to go on from under {self.trainer.default_root_dir} (where "
                    f"docs/reproducibility.md says it looks{mine}); starting a new run",
                    file=sys.stderr,
                )
        if not ckpt:  # every rank: none has written anything yet (that starts after the processes meet)
            refuse_occupied(self.trainer)
            refuse_slurm_leftovers(self.trainer)
        else:
            refuse_missing(path)
            refuse_rank_file(path)
        if started_as_first_process():
            hold_places(self.trainer)
        if not ckpt or getattr(strategy, "strategy_name", strategy) == "seed_parallel":
            return
        cfg["ckpt_path"] = whole_checkpoint(path)
        if refuse_other_kind(cfg["ckpt_path"]) > 1:  # saved by several seed_parallel processes: go on in one
            self.trainer.strategy.checkpoint_io = MergedSeeds(self.trainer.strategy.checkpoint_io)


class _Parser(BanditArgumentParser):
    learner_names = tuple(LEARNERS)  # what a wrong --model is told of


def main(args=None) -> NVLDBCLI:
    quiet_lightning()
    return NVLDBCLI(
        DuelingLearner,
        BanditDataModule,
        subclass_mode_model=True,
        parser_class=_Parser,
        seed_everything_default=0,
        save_config_callback=RunConfig,
        save_config_kwargs={"overwrite": True},  # a new run's folder is its own (NVLDBCLI.before_fit); see RunConfig
        trainer_defaults={
            "max_epochs": 1,
            "devices": 1,  # one process unless --trainer.strategy seed_parallel asks for more
            "enable_checkpointing": True,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "enable_model_summary": False,  # the learner's parameter count is one line of no use; true shows it
            "callbacks": [RunSummary(announce=True)],
        },
        args=args,
    )


def random_seed() -> int:
    """``seed_everything: true``'s seed: drawn at random, said on stderr and kept in the run's config.yaml (so the run
    can be made again); a process Lightning starts for the run takes its parent's (PL_GLOBAL_SEED). Refused where a
    launcher started several processes, each of which would draw its own."""
    inherited = os.environ.get("PL_GLOBAL_SEED")
    if os.environ.get("LOCAL_RANK", "0") != "0" and inherited is not None and inherited.isdigit():
        return int(inherited)  # a process Lightning started for the run: its parent's draw
    launched = launched_processes()
    if os.environ.get("NODE_RANK", "0") != "0":
        launched = ("a launch by hand", 2, 1)
    if launched is not None and launched[1] > 1:
        raise ValueError(
            f"seed_everything: true would draw a seed in each of the {launched[1]} processes {launched[0]} started, "
            f"and they must share one; give the seed (an integer)"
        )
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed_everything=true: seed {seed}, drawn at random (kept in the run's config.yaml)", file=sys.stderr)
    return seed


def say_stopped_at_once(how: str) -> None:
    """A run Lightning stopped without a save of the round (a second signal, or no checkpoints): where it can go
    on from, said by the first process only (a terminal's Ctrl-C, a cluster's SIGTERM, reach every rank)."""
    if not started_as_first_process():
        return
    then = (
        "this run saves no checkpoint (trainer.enable_checkpointing false), so it cannot go on"
        if WITHOUT_CHECKPOINTS
        else "go on from the last checkpoint with --ckpt_path last"
    )
    print(f"stopped by {how}; {then}", file=sys.stderr)


def run_cli(argv: list[str] | None = None) -> int:
    """``main`` with a user's view of failure: one ``error: ...`` line on stderr and exit status 2
    for a configuration, data or numerical error, 1 for a file that cannot be written (a full disk);
    130 (Ctrl-C) or 143 (SIGTERM) for a run stopped by that signal at the end of a round, saved
    (:class:`RoundCheckpoint`); 0 on success."""
    find_own_modules_here()  # a class_path of one's own, from the working folder
    run_folders.clear()
    try:
        if argv is None:  # the command line (Lightning warns when args are also given): rewritten in place
            sys.argv[1:] = config_paths(sys.argv[1:])
        else:
            argv = config_paths(argv)
        check_config_files(sys.argv[1:] if argv is None else argv)
        if argv is None:  # an older version's setting names, read as today's
            sys.argv[1:] = upgraded_config_args(sys.argv[1:])
        else:
            argv = upgraded_config_args(argv)
        cli = main(argv)
        stopped = [c.interrupted for c in cli.trainer.callbacks if isinstance(c, RoundCheckpoint) and c.interrupted]
        if stopped:
            return 128 + int(stopped[0])  # 130 for Ctrl-C, 143 for SIGTERM, as a shell reports a signal
    except (ValueError, FileNotFoundError, FloatingPointError, MisconfigurationException, ModuleNotFoundError) as err:
        # MisconfigurationException: Lightning's own refusal of a trainer setting, which names it;
        # ModuleNotFoundError: a package a chosen callback or logger needs (DeviceStatsMonitor: psutil), with its hint
        end_progress_line()
        sys.stderr.write(f"{rank_prefix()}error: {user_message(err)}\n")  # one write: the ranks share the stream
        sys.stderr.flush()
        return 2
    except CannotWrite as err:  # a full disk or a quota, at a checkpoint or a run file: what is kept, named
        end_progress_line()
        sys.stderr.write(f"{rank_prefix()}error: {err}\n")
        sys.stderr.flush()
        return 1
    except SIGTERMException:  # Lightning's own stop at SIGTERM (a second one, under seed_parallel, or no checkpoints)
        say_stopped_at_once("SIGTERM")
        return 128 + signal.SIGTERM
    except SystemExit as stop:  # the argument parser's own errors (unknown key, wrong type)
        if stopped_by_ctrl_c(stop):
            end_progress_line()
            say_stopped_at_once("Ctrl-C at once")
            return 128 + signal.SIGINT
        return stop.code if isinstance(stop.code, int) else 2
    finally:
        release_run_folder()  # after a refusal, or a resume at its own horizon: what Lightning's set-up opened
        end_process_group()
    return 0
