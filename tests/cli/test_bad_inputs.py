"""The bad-input table of the README, one row each: a clear message naming the field or file,
a non-zero exit, and nothing earlier overwritten. Runs the CLI in-process (nvldb_pl.cli.run_cli)."""

import importlib.util
import json
import os

import lightning.pytorch as pl
import pytest
import torch

from nvldb_pl.cli import run_cli
from nvldb_pl.loop.module import LearnerModule
from tests.helpers.runs import fit_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COS = os.path.join(ROOT, "configs", "cos.yaml")
QUICK = [
    "--data.rounds=6",
    "--data.num_seeds=2",
    "--model.network.width=4",
    "--model.grad_steps=1",
    "--trainer.enable_progress_bar=false",
]

# (argument, what the message must name); each is one row of the README's table
ROWS = [
    ("--data.arms=1", "data.arms"),
    ("--data.dim=0", "data.dim"),
    ("--data.rounds=0", "data.rounds"),
    ("--data.num_seeds=0", "data.num_seeds"),
    ("--data.rounds=abc", "data.rounds: expected an integer, got abc"),
    # values the parser refuses: one line naming the field (was argparse's usage of every option, then
    # jsonargparse's report of every type of a Union the value did not match)
    ("--model.network.width=32.0", "model.network.width: expected an integer, got 32.0"),
    # a size past memory: refused before allocating (was torch's "Overflow when unpacking long long", no field)
    (
        "--model.network.width=99999999999999999999",
        "model.network.width / model.network.depth: this config preallocates about",
    ),
    ("--model.network.bias=maybe", "model.network.bias: expected true or false; got maybe"),
    ("--model.widht=3", "model.widht: not an option of nvldb_pl.NVLDB"),
    ("--model=NDB --model.variance_aware=false", "model.variance_aware: not an option of nvldb_pl.learners.NDB"),
    ("--trainer.logger=foo.Bar", "trainer.logger: foo.Bar: No module named 'foo'"),
    ("--data.dimm=3", "unrecognized arguments: --data.dimm=3"),
    ("--data.task=sine", "data.task"),
    ("--data.seed=-3", "data.seed: must be an integer between 0 and 4294967295"),
    ("--data.dim=1", "data.dim: with dim=1 every arm of cos has the same utility in every round"),  # ended "0.000"
    (
        "--model.sampler.weighting=recency",
        "model.sampler.weighting: recency weights the rows of a bounded training set",
    ),
    (
        "--model.oracle_variance=true --data.preference=deterministic",
        "model.oracle_variance: the true variance follows",
    ),  # was numpy's, naming no field
    ("--data.task=magic --data.dim=20 --data.arms=2 --data.data_file=/tmp", "data.data_file: /tmp is a folder"),
    ("--data.link=cauchy", "data.link"),
    ("--data.preference=coin", "data.preference"),
    ("--data.sampling=disjoint", "data.sampling"),
    ("--model.lr=-0.1", "model.lr"),
    ("--model.lam=0", "model.lam"),
    ("--model.epsilon=-1", "model.epsilon"),
    ("--model.beta=0", "model.beta"),
    # YAML's .inf and .nan are floats too: a beta of .inf ran to its end (exit 0), a lam of .inf stopped at round 1
    # saying "non-finite ... raise model.lam"
    ("--model.beta=.inf", "model.beta: must be a finite number > 0, got inf"),
    ("--model.lam=.inf", "model.lam: must be a finite number > 0, got inf"),
    ("--model.lr=.nan", "model.lr: must be a finite number > 0, got nan"),
    ("--model.w_reg=.inf", "model.w_reg: must be a finite number >= 0, got inf"),
    # finite, beyond float32 (the learner's): a RuntimeError traceback from the first Adam step
    (
        "--model.w_reg=1e300",
        "model.w_reg: must be at most 3.403e+38 (float32's largest, in which the learner computes)",
    ),
    ("--model.lr=1e300", "model.lr: must be at most 3.403e+38"),
    ("--model=NDB --model.beta=.inf", "model.beta: must be a finite number > 0"),
    ("--model=CoLSTIM --model.lam=.nan", "model.lam: must be a finite number > 0"),
    ("--model=VACDB --model.beta=.inf", "model.beta: must be a finite number > 0"),
    ("--model=MaxInP --model.beta=.inf", "model.beta: must be a finite number > 0"),
    ("--seed_everything=-1", "seed_everything: must be between 0 and 4294967295"),  # was numpy's bounds, no field
    ("--model.strategy=ucb_best", "model.strategy"),
    ("--model.network.width=0", "model.network.width"),
    ("--model.network.depth=1", "model.network.depth"),
    ("--model.grad_steps=-1", "model.grad_steps"),
    ("--model.gram_mode=lazy", "model.gram_mode"),
    ("--model.network.init=xavier", "model.network.init"),
    ("--model=Oracle", "model: Oracle is not a learner: give one of NVLDB, NDB, CoLSTIM, VACDB, MaxInP, RandomPair"),
    ("--checkpoint.every_n_rounds=0", "checkpoint.every_n_rounds"),
    ("--loop.log_every_n_rounds=0", "loop.log_every_n_rounds"),
    ("--data.num_seeds=100000 --data.rounds=1000000", "preallocates about"),
    ("--data.arms=100000", "data.arms / data.num_seeds: this config preallocates about"),  # the K x K arrays
    ("--trainer.max_epochs=3", "trainer.max_epochs=3: a run is one pass"),
    ("--trainer.max_steps=10", "trainer.max_steps=10"),
    ("--trainer.limit_train_batches=5", "trainer.limit_train_batches=5"),
    ("--trainer.accumulate_grad_batches=2", "trainer.accumulate_grad_batches=2"),
    ("--trainer.devices=2 --trainer.accelerator=cpu", "add --trainer.strategy seed_parallel"),
    ("--trainer.num_nodes=2 --trainer.accelerator=cpu", "coupling the seeds"),
    ("--trainer.fast_dev_run=true", "trainer.fast_dev_run=True: a run is one pass"),
    # no validation loop: beyond the horizon it was Lightning's refusal after the run's folder was made, else ignored
    ("--trainer.val_check_interval=5000", "trainer.val_check_interval=5000: a run has no validation loop"),
    ("--trainer.val_check_interval=2", "trainer.val_check_interval=2: a run has no validation loop"),
    ("--trainer.check_val_every_n_epoch=3", "trainer.check_val_every_n_epoch=3: a run has no validation loop"),
    ("--trainer.limit_val_batches=5", "trainer.limit_val_batches=5.0: a run has no validation loop"),
    ("--trainer.num_sanity_val_steps=2", "trainer.num_sanity_val_steps=2: a run has no validation loop"),
    ("--trainer.devices=0", "trainer.devices='0': a run needs at least one device"),
    ("--trainer.num_nodes=0", "trainer.num_nodes=0: the number of machines"),  # Lightning's message named no field
    ("--trainer.num_nodes=-2 --trainer.strategy=seed_parallel", "trainer.num_nodes=-2: the number of machines"),
    ("--trainer.devices=-1 --trainer.accelerator=cpu", "trainer.devices='-1': -1 means every GPU"),
    (
        "--trainer.devices=[0,1] --trainer.strategy=seed_parallel --trainer.accelerator=cpu",
        "trainer.devices=[0, 1]: a list picks GPUs by index, and this run is on the CPU; give a number of processes (2)",
    ),
    ("--trainer.accelerator=tpu", "trainer.accelerator='tpu': this package runs on auto, cpu, gpu, cuda"),
    ("--trainer.precision=64-true", "trainer.precision='64-true': choose 32-true, bf16-mixed or 16-mixed"),
    ("--trainer.precision=bf16-true", "trainer.precision='bf16-true'"),
    # Lightning's refusal said "or switch to automatic optimization", which a user cannot do here
    ("--trainer.gradient_clip_val=1.0", "trainer.gradient_clip_val=1.0: each round's update is the learner's own"),
    # Lightning refused the settings barebones cannot take one a try (this run's defaults: three tries)
    (
        "--trainer.barebones=true",
        "trainer.barebones=True: Lightning runs it only with logging, checkpoints, the "
        "progress bar and the model summary off; add --trainer.enable_checkpointing false --trainer.logger false "
        "--trainer.log_every_n_steps 0",
    ),
    ("--trainer.strategy=fsdp", "trainer.strategy='fsdp': shards one network's parameters over devices"),
    ("--trainer.strategy=deepspeed_stage_2", "trainer.strategy='deepspeed_stage_2': shards one network's"),
    ("--trainer.strategy=xla", "trainer.strategy='xla': a TPU (XLA) strategy"),  # was a raw ModuleNotFoundError
    ("--trainer.strategy=single_tpu", "trainer.strategy='single_tpu': a TPU (XLA) strategy"),  # a raw TypeError
    # Lightning callbacks that cannot do their job in a bandit run: refused by class and reason before anything runs
    ("--trainer.callbacks+=LearningRateFinder", "trainer.callbacks: LearningRateFinder runs trial steps"),  # KeyError
    ("--trainer.callbacks+=BatchSizeFinder", "trainer.callbacks: BatchSizeFinder runs trial steps"),
    (
        "--trainer.callbacks+=EarlyStopping --trainer.callbacks.monitor=x",  # a traceback after every round had run
        "trainer.callbacks: EarlyStopping checks its metric at the end of an epoch",
    ),
    ("--trainer.callbacks+=SpikeDetection", "trainer.callbacks: SpikeDetection watches the one loss"),  # KeyError
    (
        "--trainer.callbacks+=ModelPruning --trainer.callbacks.pruning_fn=l1_unstructured",
        "trainer.callbacks: ModelPruning prunes",
    ),  # torch.cat(): expected a non-empty list, after the run's files were made
    (
        "--trainer.callbacks+=StochasticWeightAveraging --trainer.callbacks.swa_lrs=0.01",
        "trainer.callbacks: StochasticWeightAveraging averages",
    ),  # ran, and did nothing
    ("--trainer.callbacks+=EMAWeightAveraging", "trainer.callbacks: EMAWeightAveraging keeps an average"),
    (
        "--trainer.callbacks+=GradientAccumulationScheduler --trainer.callbacks.scheduling={\"0\":2}",
        "trainer.callbacks: GradientAccumulationScheduler accumulates",
    ),
    ("--trainer.callbacks+=BackboneFinetuning", "trainer.callbacks: BackboneFinetuning freezes"),
    (
        "--trainer.callbacks+=OnExceptionCheckpoint --trainer.callbacks.dirpath=/tmp",
        "OnExceptionCheckpoint saves in the middle",
    ),
    (
        "--trainer.callbacks+=nvldb_pl.machinery.checkpoint.RoundCheckpoint",  # a traceback at the first save, rounds in
        "trainer.callbacks: RoundCheckpoint is the run's own callback, already there; set it through checkpoint.",
    ),
    (
        "--trainer.callbacks+=nvldb_pl.loop.callbacks.DuelingLoop",
        "trainer.callbacks: DuelingLoop is the run's own callback",
    ),
    (
        "--trainer.callbacks+=Timer",
        "trainer.callbacks: Timer's <Interval.step: 'step'> cannot be written into the run's "
        "config.yaml; a time limit is --trainer.max_time",
    ),  # jsonargparse's Union report
]


@pytest.mark.filterwarnings(
    "ignore:\\s*Unable to serialize instance"
)  # jsonargparse, parsing ModelPruning's and SWA's values
@pytest.mark.parametrize("arg,names", ROWS, ids=[r[0] for r in ROWS])
def test_bad_config_value_exits_non_zero_naming_the_field(arg, names, tmp_path, capsys):
    code = run_cli(fit_args(tmp_path, *QUICK, *arg.split()))
    err = capsys.readouterr().err
    assert code != 0
    assert names in err, err[-2000:]
    # one line, not a dump of the model's arguments (jsonargparse's Union report), argparse's usage or a traceback
    assert any(line.startswith("error: ") and names in line for line in err.splitlines()), err[-2000:]
    assert "Given value" not in err and "usage:" not in err and "Traceback" not in err, err[-2000:]
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("*.ckpt"))
    assert not (tmp_path / "lightning_logs").exists()  # the run folder it claimed, and lightning_logs, removed again


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_a_logger_whose_package_is_missing_is_named_with_the_cause(tmp_path, capsys):
    """It said `Problem with given class_path '...WandbLogger':; Expected a <class 'collections.abc.Iterable'>;
    Expected a <class 'bool'>`: the other types the value did not match, not why the logger failed."""
    code = run_cli(fit_args(tmp_path, *QUICK, "--trainer.logger=lightning.pytorch.loggers.WandbLogger"))
    err = capsys.readouterr().err
    assert (
        code == 2
        and "error: Problem with given class_path 'lightning.pytorch.loggers.WandbLogger': Requirement 'wandb" in err
        and "Expected a <class" not in err
    ), err[-2000:]


@pytest.mark.skipif(importlib.util.find_spec("psutil") is not None, reason="psutil is installed here")
def test_a_callback_whose_package_is_missing_is_one_line(tmp_path, capsys):
    """DeviceStatsMonitor without psutil ended in a ModuleNotFoundError traceback at the run's start."""
    code = run_cli(fit_args(tmp_path, *QUICK, "--trainer.callbacks+=DeviceStatsMonitor"))
    err = capsys.readouterr().err
    assert code == 2 and "error: `DeviceStatsMonitor` cannot log CPU stats as `psutil` is not installed" in err, err[
        -2000:
    ]
    assert "Traceback" not in err and not list(tmp_path.rglob("summary.json"))


@pytest.mark.parametrize("subcommand", ["test", "validate", "predict"])
def test_only_fit_is_a_subcommand(subcommand, tmp_path, capsys):
    """A run is the bandit loop: Lightning's other subcommands have no step to run here."""
    assert run_cli([subcommand, "--config", COS, f"--trainer.default_root_dir={tmp_path}"]) == 2
    assert f"invalid choice: '{subcommand}' (choose from 'fit')" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_unwritable_log_dir_is_named(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code = run_cli(["fit", "--config", COS, *QUICK, f"--trainer.default_root_dir={blocker}/sub"])
    assert code == 2 and "trainer.default_root_dir" in capsys.readouterr().err
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("where", ["checkpoint.dirpath", "lightning_logs"])
def test_a_file_where_a_folder_goes_is_named(where, tmp_path, capsys):
    blocker = tmp_path / ("ck" if where == "checkpoint.dirpath" else "lightning_logs")
    blocker.write_text("not a folder")
    extra = [f"--checkpoint.dirpath={blocker}"] if where == "checkpoint.dirpath" else []
    code = run_cli(fit_args(tmp_path, *QUICK, *extra))
    err = capsys.readouterr().err
    field = "checkpoint.dirpath" if where == "checkpoint.dirpath" else "trainer.default_root_dir"
    assert code == 2 and f"error: {field}: {blocker} is a file" in err and "Traceback" not in err, err[-2000:]
    assert blocker.read_text() == "not a folder"


def test_a_file_that_is_not_a_fit_checkpoint_is_refused_naming_it(tmp_path, capsys):
    from nvldb_pl.live import DuelingBandit

    live, other = tmp_path / "live.pt", tmp_path / "other.pt"
    bandit = DuelingBandit.create(dim=5, horizon=10)
    x = torch.randn(5, 5)
    bandit.observe(x, *bandit.select(x), 1)
    bandit.save(str(live))
    torch.save({"weights": torch.zeros(3)}, other)
    for path, what in (
        (live, "is a live ask/tell save (DuelingBandit.save); DuelingBandit.from_checkpoint reads it"),
        (other, "is not a checkpoint of a fit run"),
    ):
        code = run_cli(fit_args(tmp_path, *QUICK, f"--ckpt_path={path}"))
        err = capsys.readouterr().err
        assert code == 2 and f"error: ckpt_path: {path} {what}" in err and "Traceback" not in err, err[-2000:]
    assert not list(tmp_path.glob("lightning_logs/version_*"))


@pytest.mark.parametrize(
    "given",
    ["a run's checkpoints folder", "an empty folder", "a config file", "a rank's file", "a rank's previous file"],
)
def test_a_ckpt_path_naming_a_folder_or_another_file_says_what_to_give(given, tmp_path, capsys):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    if given == "a run's checkpoints folder":
        (folder / "last.ckpt").write_bytes(b"(stands for a checkpoint: only its name is looked at)")
        path, said = folder, f"ckpt_path: {folder} is a folder, not a checkpoint file; give {folder / 'last.ckpt'}"
    elif given == "an empty folder":
        path, said = folder, f"ckpt_path: {folder} is a folder, not a checkpoint file; give last or a checkpoint's path"
    elif given == "a config file":
        path, said = COS, f"ckpt_path: {COS} cannot be read as a checkpoint (BadZipFile"
    else:  # seed_parallel's rank 1 file: its seeds only
        for name in ("last.ckpt", "last.ckpt.rank1", "last.ckpt.rank1.prev"):
            (folder / name).write_bytes(b"(stands for a checkpoint: only its name is looked at)")
        path = folder / ("last.ckpt.rank1" if given == "a rank's file" else "last.ckpt.rank1.prev")
        said = (
            f"ckpt_path: {path} is rank 1's share of the seeds of a seed_parallel run; give {folder / 'last.ckpt'}, "
            f"which goes on with every rank's seeds"
        )
    code = run_cli(fit_args(tmp_path, *QUICK, f"--ckpt_path={path}"))
    err = capsys.readouterr().err
    assert code == 2 and f"error: {said}" in err and "no whole previous" not in err and "Traceback" not in err, err[
        -2000:
    ]
    assert not list(tmp_path.glob("lightning_logs/version_*"))


@pytest.mark.parametrize(
    "name,why",
    [
        ("best", "a bandit run keeps no best checkpoint"),
        ("hpc", "Lightning's SLURM requeue checkpoint"),
        ("registry", "Lightning's model registry"),
        ("missing.ckpt", None),
    ],
)
def test_a_ckpt_path_that_names_no_file_is_refused_saying_what_it_may_name(name, why, tmp_path, capsys):
    code = run_cli(fit_args(tmp_path, *QUICK, f"--ckpt_path={name}"))
    err = capsys.readouterr().err
    assert code == 2 and f"error: ckpt_path: {name}: no such file" in err and "give last" in err, err[-2000:]
    assert (why in err) if why else "(" not in err.split("no such file", 1)[1].split(";")[0]
    assert not list(tmp_path.glob("lightning_logs/version_*"))


def test_ckpt_path_last_with_nothing_saved_starts_a_new_run_and_says_so(tmp_path, capsys, recwarn):
    assert run_cli(fit_args(tmp_path, *QUICK, "--ckpt_path=last")) == 0
    err = capsys.readouterr().err
    assert f"ckpt_path=last: no checkpoint to go on from under {tmp_path}" in err and "starting a new run" in err
    # not Lightning's warning, whose hint (set ModelCheckpoint's save_last=True) does not apply to this package
    assert not [w for w in recwarn if "no last checkpoint available" in str(w.message)]
    assert len(list(tmp_path.rglob("summary.json"))) == 1


@pytest.mark.parametrize("form", ["--config FILE", "--config=FILE"])
def test_a_config_file_that_is_not_yaml_is_named_with_its_line(form, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  task: cos\n  rounds: [\n")
    code = run_cli(["fit", *form.replace("FILE", str(bad)).split(), f"--trainer.default_root_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and f"error: --config: {bad} is not valid YAML (" in err and f'in "{bad}", line 4' in err, err
    assert not list(tmp_path.glob("lightning_logs/version_*"))


@pytest.mark.parametrize(
    "content,said",
    [
        (b"", "is empty"),
        (b"# only a comment\n", "is empty"),
        (b"- 1\n- 2\n", "holds a list, not a mapping of settings"),
        (b"5\n", "holds the value 5, not a mapping of settings"),
        (b"\xff\xfe\x00data", "is not a UTF-8 text file (invalid start byte at byte 0)"),
    ],
)
def test_a_config_file_that_is_no_mapping_of_settings_is_named(content, said, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)
    code = run_cli(["fit", "--config", str(bad), f"--trainer.default_root_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and f"error: --config: {bad} {said}" in err and "usage:" not in err, err
    assert not list(tmp_path.glob("lightning_logs/version_*"))


def test_several_nodes_without_a_launcher_are_refused_instead_of_waiting(tmp_path, capsys, monkeypatch):
    """--trainer.num_nodes 2 on a machine no launcher set up: rank 0 would listen on a port no other node knows."""
    from nvldb_pl.loop.trainer_checks import LAUNCHER_VARIABLES, check_nodes

    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    code = run_cli(
        fit_args(
            tmp_path, *QUICK, "--trainer.num_nodes=2", "--trainer.strategy=seed_parallel", "--trainer.accelerator=cpu"
        )
    )
    err = capsys.readouterr().err
    assert (
        code == 2 and "error: trainer.num_nodes=2: nothing here tells the other machines where to find this one" in err
    )
    assert not list(tmp_path.glob("lightning_logs/version_*"))
    for name in ("MASTER_PORT", "SLURM_NTASKS", "LOCAL_WORLD_SIZE"):  # set up by hand, by SLURM, by torchrun
        monkeypatch.setenv(name, "2")
        check_nodes(2)
        monkeypatch.delenv(name)


def test_missing_uci_folder_is_named(tmp_path, capsys):
    code = run_cli(
        [
            "fit",
            "--config",
            os.path.join(ROOT, "configs", "statlog.yaml"),
            *QUICK,
            f"--data.data_dir={tmp_path}/absent",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert code == 2 and f"{tmp_path}/absent" in capsys.readouterr().err


def test_a_new_run_refused_once_fit_has_begun_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """A refusal raised inside fit, after Lightning's logger wrote hparams.yaml into the new run's folder
    (as Lightning's own val_check_interval check did): the folder, which holds nothing of the run, is removed."""
    from nvldb_pl.loop.callbacks import DuelingLoop

    def refuse(self, trainer, module):
        raise ValueError("refused at the start of fit")

    monkeypatch.setattr(DuelingLoop, "on_train_start", refuse)
    code = run_cli(fit_args(tmp_path, *QUICK))
    assert code == 2 and "error: refused at the start of fit" in capsys.readouterr().err
    assert not (tmp_path / "lightning_logs").exists(), list(tmp_path.rglob("*"))


def test_failed_run_leaves_an_earlier_summary_untouched(tmp_path, capsys):
    assert run_cli(fit_args(tmp_path, *QUICK)) == 0
    summary = tmp_path / "lightning_logs" / "version_0" / "summary.json"
    before = summary.read_bytes()
    json.loads(before)
    # resuming that run with another config fails before anything is written
    code = run_cli(fit_args(tmp_path, *QUICK, "--model.lr=0.5", "--ckpt_path=last"))
    assert code == 2 and "model.lr" in capsys.readouterr().err
    assert summary.read_bytes() == before


def test_several_processes_without_seed_parallel_are_refused_by_the_loop_too():
    """The loop's own check, for trainers built outside the CLI (e.g. Trainer(strategy="ddp"), whose run still
    needs the DuelingLoop callback to play its rounds)."""
    from types import SimpleNamespace

    from nvldb_pl.learners.nvldb import NVLDB
    from nvldb_pl.loop.callbacks import DuelingLoop

    module = LearnerModule(NVLDB(rounds=4, num_seeds=2, network={"width": 4}))
    trainer = SimpleNamespace(world_size=2, strategy=SimpleNamespace(), datamodule=None)
    with pytest.raises(ValueError, match="trainer.strategy: 2 processes under SimpleNamespace would average gradients"):
        DuelingLoop().setup(trainer, module, "fit")
    trainer = SimpleNamespace(world_size=2, strategy=SimpleNamespace(strategy_name="seed_parallel"), datamodule=None)
    DuelingLoop().setup(trainer, module, "fit")  # seed_parallel: allowed


class _NaNContexts(pl.Callback):
    """A user-supplied environment that hands seed 1 a NaN context at round 4."""

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch["round"] == 4:
            batch["contexts"][1, 2, 0] = float("nan")


def test_nan_context_from_the_environment_stops_naming_seed_and_round(tmp_path):
    from nvldb_pl.loop.callbacks import DuelingLoop
    from nvldb_pl.loop.summary import RunSummary
    from nvldb_pl.loop.run import build

    dm, module = build({"rounds": 12, "num_seeds": 3, "seed": 0}, {"network": {"width": 4}, "grad_steps": 1})
    trainer = pl.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[_NaNContexts(), DuelingLoop(log_every_n_rounds=5), RunSummary()],
        default_root_dir=tmp_path,
    )
    with pytest.raises(FloatingPointError, match=r"context from the environment: seed 1 at round 4"):
        trainer.fit(wrapped := LearnerModule(module), datamodule=dm)
    assert not list(tmp_path.rglob("summary.json"))
    assert torch.isfinite(wrapped.regret.cum_avg).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_gpu_accelerator_without_a_gpu_is_refused_by_the_cli_and_the_scripts(tmp_path, capsys):
    code = run_cli(fit_args(tmp_path, *QUICK, "--trainer.accelerator=gpu"))
    assert code == 2 and "trainer.accelerator='gpu': torch sees no CUDA GPU here" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*"))
    from nvldb_pl.loop.run import run_experiment

    with pytest.raises(ValueError, match="--accelerator gpu: torch sees no CUDA GPU here"):
        run_experiment({"task": "cos", "rounds": 2, "num_seeds": 1}, {}, accelerator="gpu")


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"accelerator": "tpu"}, "--accelerator tpu: this package runs on cpu, gpu"),
        ({"precision": "64-true"}, "--precision 64-true: choose 32-true"),
    ],
)
def test_the_scripts_refuse_an_accelerator_or_precision_before_running(kw, message):
    from nvldb_pl.loop.run import run_experiment

    with pytest.raises(ValueError, match=message):
        run_experiment({"task": "cos", "rounds": 2, "num_seeds": 1}, {}, **kw)


def test_a_run_without_checkpoints_writes_none_and_its_summary(tmp_path, capsys):
    assert run_cli(fit_args(tmp_path, *QUICK, "--trainer.enable_checkpointing=false")) == 0
    assert not list(tmp_path.rglob("*.ckpt")) and len(list(tmp_path.rglob("summary.json"))) == 1


@pytest.mark.parametrize(
    "text, key, lines",
    [
        ("data:\n  rounds: 20\n  rounds: 30\n", "rounds", "2 and 3"),
        ("data:\n  rounds: 5\ndata:\n  num_seeds: 3\n", "data", "1 and 3"),
    ],
)
def test_a_key_given_twice_in_a_config_is_refused_not_dropped(text, key, lines, tmp_path, capsys):
    cfg = tmp_path / "twice.yaml"
    cfg.write_text(text)
    assert run_cli(fit_args(tmp_path / 'r', "--config", str(cfg))) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: --config: {cfg}: the key '{key}' is given twice in one mapping (lines {lines}); YAML would keep the "
        f"last one silently: give it once"
    )
    assert not (tmp_path / "r").exists()


def test_yaml_merge_keys_are_read_as_yaml_merges_them_by_the_cli_and_the_live_reader(tmp_path, capsys):
    """``<<:`` (YAML's merge key) was refused by the fit CLI's reader ('could not determine a constructor for the tag
    merge'). Merged in, the mapping's own keys win, as YAML says; a key given twice among its own is still refused."""
    from nvldb_pl.live import DuelingBandit

    cfg = tmp_path / "merge.yaml"
    cfg.write_text(
        "data:\n  <<: {rounds: 6, num_seeds: 2, dim: 4}\n  dim: 3\nmodel:\n  <<: {feature_dim: 3}\n  network: {width: 8}\n"
    )
    assert run_cli(fit_args(tmp_path / 'r', "--config", str(cfg))) == 0
    summary = json.loads(next((tmp_path / "r").rglob("summary.json")).read_text())
    assert summary["rounds"] == 6 and summary["num_seeds"] == 2 and summary["data"]["dim"] == 3
    hp = DuelingBandit.from_config(str(cfg), seed=0).learner.hparams
    assert hp.network["width"] == 8 and hp.feature_dim == 3
    twice = tmp_path / "twice.yaml"
    twice.write_text("data:\n  <<: {rounds: 6}\n  rounds: 7\n  rounds: 8\n")
    assert run_cli(fit_args(tmp_path / 'q', "--config", str(twice))) == 2
    assert "the key 'rounds' is given twice in one mapping (lines 3 and 4)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--model.self_duel.escape_rate=2"],
            "model.self_duel.escape_rate: it is the escape test's rate; with self_duel.test deep_diag",
        ),
        (
            ["--model.self_duel.test=none", "--model.self_duel.width=2"],
            "model.self_duel.width: it is the deep test's width",
        ),
        (
            ["--model.refit_theta=false", "--model.refit_iterations=3"],
            "model.refit_iterations: they are the theta refit's",
        ),
        (
            ["--model.variance_aware=false", "--model.epsilon=0.1"],
            "model.epsilon: it bounds zeta of the variance weights",
        ),
        (
            ["--data.rounds=20", "--model.episode=21"],
            "model.episode: an update every 21 rounds never comes within data.rounds=20: the network and theta would "
            "stay at their initial draw",
        ),
    ],
)
def test_a_setting_that_cannot_take_effect_is_refused(args, message, tmp_path, capsys):
    assert run_cli(fit_args(tmp_path / 'r', *QUICK, *args)) == 2
    assert message in capsys.readouterr().err
