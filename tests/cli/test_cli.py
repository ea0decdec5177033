"""The CLI from a subprocess, as a user runs it."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers.runs import fit_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args, cwd=ROOT):
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "main.py"), "fit", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def checkout_head():
    """git's HEAD where the tests run from a checkout whose top folder is ROOT, else None (read without the package)."""
    git = shutil.which("git") and subprocess.run(
        ["git", "rev-parse", "--show-toplevel", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    if git and git.returncode == 0 and os.path.samefile(git.stdout.split()[0], ROOT):
        return git.stdout.split()[1]
    return None


def test_cli_end_to_end_writes_summary_tensorboard_and_hparams(tmp_path):
    out = tmp_path / "run"
    res = _cli(
        "--config",
        "configs/square.yaml",
        "--data.rounds",
        "12",
        "--data.num_seeds",
        "3",
        "--data.dim",
        "4",
        "--data.arms",
        "3",
        "--model.strategy",
        "ts_csym",
        "--model.variance_aware",
        "false",
        "--model.network.width",
        "8",
        "--trainer.default_root_dir",
        str(out),
        "--trainer.enable_progress_bar",
        "false",
        "--seed_everything",
        "7",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    [version] = list((out / "lightning_logs").iterdir())
    summary = json.loads((version / "summary.json").read_text())
    assert summary["task"] == "square" and summary["strategy"] == "ts_csym"
    assert summary["variance_aware"] is False and summary["rounds"] == 12 and summary["num_seeds"] == 3
    if not os.environ.get("OMP_NUM_THREADS"):  # a small problem takes one thread (devices.cpu_threads)
        assert summary["cpu_threads"] == 1
    assert summary["base_seed"] == 7
    assert [s["seed"] for s in summary["seeds"]] == [0, 1, 2]
    assert all(s["cum_avg_regret"] >= s["cum_weak_regret"] >= 0 for s in summary["seeds"])
    mean = sum(s["cum_avg_regret"] for s in summary["seeds"]) / 3 / 12
    assert summary["R_T_over_T_mean"] == pytest.approx(mean)
    # the throughput is the rounds run over the wall time, and the split covers part of that time
    assert summary["seed_rounds_per_second"] == pytest.approx(12 * 3 / summary["wall_seconds"])
    assert set(summary["timings_seconds"]) == {"select", "train", "refit", "gram"}
    assert 0 < sum(summary["timings_seconds"].values()) <= summary["wall_seconds"]
    assert not (out.parent / "runs").exists()  # nothing written outside default_root_dir
    # the software the numbers came from, read here another way: the versions, and git's HEAD of this checkout
    import lightning
    import torch

    soft = summary["software"]
    assert (soft["torch"], soft["lightning"]) == (torch.__version__, lightning.__version__)
    assert soft["python"] == ".".join(map(str, sys.version_info[:3]))
    head = checkout_head()
    if head:
        changed = subprocess.run(["git", "status", "--short", "nvldb_pl"], cwd=ROOT, capture_output=True, text=True)
        assert soft["commit"] == head + ("+modified" if changed.stdout.strip() else "")
    else:  # not run from a checkout
        assert "commit" not in soft
    # the run's end in one line on stdout (with the progress bar off nothing else said how it ended)
    assert res.stdout.strip().splitlines()[-1] == (
        f"NLDB-TS-CSYM on square: R(T)/T {summary['R_T_over_T_mean']:.3f} ± {summary['R_T_over_T_std']:.3f} over 3 "
        f"seeds (T=12), {summary['wall_seconds']:.1f} s; {version / 'summary.json'}"
    )

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(version)).Reload()
    tags = acc.Tags()["scalars"]
    for name in ("cum_avg", "cum_weak", "avg_per_round"):
        for stat in ("mean", "std"):
            assert f"regret/{name}_{stat}" in tags
    steps = [e.step for e in acc.Scalars("regret/cum_avg_mean")]
    assert steps == list(range(1, 13))  # x-axis = round, every round, once
    last = acc.Scalars("regret/avg_per_round_mean")[-1].value
    assert last == pytest.approx(summary["R_T_over_T_mean"], rel=1e-5)
    hparams = (version / "hparams.yaml").read_text()
    assert "ts_csym" in hparams


def test_version_prints_the_software_in_one_line_and_runs_nothing(tmp_path):
    import lightning
    import numpy
    import torch

    import nvldb_pl

    res = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "main.py"), "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and res.stderr == "", res.stderr[-2000:]
    [line] = res.stdout.splitlines()
    assert line.startswith(f"nvldb_pl {nvldb_pl.__version__}")
    assert line.endswith(
        f", torch {torch.__version__}, lightning {lightning.__version__}, numpy {numpy.__version__}, "
        f"Python {'.'.join(map(str, sys.version_info[:3]))}"
    )
    head = checkout_head()
    if head:
        assert f" at commit {head[:12]}" in line
    assert list(tmp_path.iterdir()) == []  # no run folder made


def test_seed_everything_false_says_which_base_seed_the_draws_come_from(tmp_path):
    """Lightning's "do not seed": the streams still draw from a base seed (0 where nothing set one); the
    run says so and equals --seed_everything 0 seed by seed."""
    base = [
        "--config",
        "configs/cos.yaml",
        "--data.rounds",
        "6",
        "--data.num_seeds",
        "2",
        "--model.network.width",
        "8",
        "--trainer.enable_progress_bar",
        "false",
    ]
    runs = {}
    for seed in ("false", "0"):
        res = _cli(*base, "--trainer.default_root_dir", str(tmp_path / seed), "--seed_everything", seed)
        assert res.returncode == 0, res.stderr[-3000:]
        [version] = list((tmp_path / seed / "lightning_logs").iterdir())
        runs[seed] = (json.loads((version / "summary.json").read_text())["seeds"], res.stderr)
    assert runs["false"][0] == runs["0"][0]
    assert (
        "seed_everything=false: every draw of a run (contexts, feedback, initial weights) still comes from a base "
        "seed, 0 here; give an integer to choose another" in runs["false"][1]
    )
    assert "seed_everything=false" not in runs["0"][1]


def test_other_and_several_loggers_get_every_round_and_the_final_regret(tmp_path):
    """--trainer.logger as Lightning users write it: a CSVLogger beside TensorBoard. Each gets the
    regret curves at every round and the final R(T)/T (a logger other than TensorBoard takes no
    metrics in log_hyperparams: that once failed at the end of the run)."""
    import csv

    out = tmp_path / "run"
    loggers = [
        {"class_path": f"lightning.pytorch.loggers.{name}", "init_args": {"save_dir": str(out / name)}}
        for name in ("TensorBoardLogger", "CSVLogger")
    ]
    res = _cli(
        "--config",
        "configs/cos.yaml",
        "--data.rounds",
        "6",
        "--data.num_seeds",
        "2",
        "--model.network.width",
        "8",
        "--trainer.default_root_dir",
        str(out),
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger",
        json.dumps(loggers),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "TensorBoardLogger" / "lightning_logs" / "version_0" / "summary.json").read_text())
    with open(out / "CSVLogger" / "lightning_logs" / "version_0" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows if r["regret/cum_avg_mean"]] == list(range(1, 7))
    [final] = [r for r in rows if r["final/R_T_over_T_mean"]]
    assert int(final["step"]) == 6 and float(final["final/R_T_over_T_mean"]) == pytest.approx(
        summary["R_T_over_T_mean"]
    )
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "TensorBoardLogger" / "lightning_logs" / "version_0")).Reload()
    assert [e.step for e in acc.Scalars("regret/cum_avg_mean")] == list(range(1, 7))


@pytest.mark.parametrize("entry", ["cli", "run_experiment"])
def test_a_new_run_creates_its_version_folder_before_its_logger_uses_it(tmp_path, monkeypatch, entry):
    """Two jobs with the same default_root_dir started together (a job array, two terminals) must not
    share a folder. Lightning picks the next version from a listing and creates the folder later, so
    both took version_0 and wrote over each other's summary and checkpoints (seen by hand); the CLI
    and the scripts' run_experiment claim the folder (atomically, next test) before the logger is made."""
    from nvldb_pl import cli
    from nvldb_pl.loop import run

    made = []
    module = run  # both entries make their logger through run.tensorboard_logger

    class Recording(module.TensorBoardLogger):
        def __init__(self, save_dir, name, version, **kw):
            made.append(
                (version, version is not None and os.path.isdir(os.path.join(save_dir, name, f"version_{version}")))
            )
            super().__init__(save_dir, name, version, **kw)

    monkeypatch.setattr(module, "TensorBoardLogger", Recording)
    if entry == "cli":
        args = fit_args(tmp_path, "--data.rounds=2", "--data.num_seeds=2", "--model.network.width=4")
        assert cli.run_cli(args) == 0 and cli.run_cli(args) == 0
    else:
        for _ in range(2):
            run.run_experiment(
                {"task": "cos", "rounds": 2, "num_seeds": 2}, {"network": {"width": 4}}, root_dir=str(tmp_path)
            )
    assert made == [(0, True), (1, True)]
    assert all((tmp_path / "lightning_logs" / f"version_{v}" / "summary.json").is_file() for v in (0, 1))


def test_a_new_run_folder_is_claimed_atomically(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from nvldb_pl.machinery.host import claim_new_folder

    (tmp_path / "version_0").mkdir()
    (tmp_path / "version_3").mkdir()
    (tmp_path / "version_x").mkdir()
    assert claim_new_folder(str(tmp_path)) == 4 and (tmp_path / "version_4").is_dir()
    with ThreadPoolExecutor(8) as pool:  # claims at the same moment: each a folder of its own
        got = list(pool.map(lambda _: claim_new_folder(str(tmp_path)), range(16)))
    assert sorted(got) == list(range(5, 21))


@pytest.mark.parametrize(
    "model",
    [[], ["--model", "VACDB"], ["--trainer.precision", "bf16-mixed"]],
    ids=["NVLDB", "a linear baseline", "bf16-mixed"],
)
def test_default_fit_prints_no_warnings(tmp_path, model):
    res = _cli(
        "--config",
        "configs/cos.yaml",
        "--data.rounds",
        "50",
        "--data.num_seeds",
        "2",
        "--trainer.default_root_dir",
        str(tmp_path / "run"),
        *model,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    import re

    shown = [
        line
        for line in (res.stdout + res.stderr).splitlines()
        if re.search(r"Warning\b|warn|\.py:\d+: ", line, flags=re.I)
    ]
    assert shown == []


def test_the_end_line_of_a_one_seed_run_gives_no_spread(capsys):
    """It said "R(T)/T 9.409 ± 0.000 over 1 seeds": the std of one value, and a plural."""
    from types import SimpleNamespace

    from nvldb_pl.loop.summary import RunSummary

    end = RunSummary(announce=True)
    end.summary = {
        "method": "NVLDB-UCB-ASYM",
        "task": "square",
        "R_T_over_T_mean": 9.4091,
        "R_T_over_T_std": 0.0,
        "num_seeds": 1,
        "rounds": 5,
        "wall_seconds": 0.12,
    }
    end._written = "runs/x/summary.json"
    end.on_fit_end(SimpleNamespace(is_global_zero=True), None)
    assert (
        capsys.readouterr().out
        == "NVLDB-UCB-ASYM on square: R(T)/T 9.409 for one seed (T=5), 0.1 s; runs/x/summary.json\n"
    )


def test_a_barebones_run_with_the_settings_its_refusal_names_writes_its_results_and_no_warning(tmp_path):
    """The flags the barebones refusal names (test_bad_inputs.py) make a run: summary.json, curves.csv and
    config.yaml in the root folder, without Lightning's warning that self.log does nothing under barebones."""
    root = tmp_path / "run"
    res = _cli(
        "--config",
        "configs/cos.yaml",
        "--data.rounds",
        "20",
        "--data.num_seeds",
        "2",
        "--trainer.barebones",
        "true",
        "--trainer.enable_checkpointing",
        "false",
        "--trainer.logger",
        "false",
        "--trainer.log_every_n_steps",
        "0",
        "--trainer.default_root_dir",
        str(root),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(os.listdir(root)) == ["config.yaml", "curves.csv", "summary.json"]
    assert [s["seed"] for s in json.loads((root / "summary.json").read_text())["seeds"]] == [0, 1]
    assert "self.log" not in res.stderr and ".py:" not in res.stderr, res.stderr[-3000:]


def test_cli_rejects_unknown_strategy_with_the_field_name(tmp_path):
    res = _cli(
        "--config", "configs/cos.yaml", "--model.strategy", "ucb_best", "--trainer.default_root_dir", str(tmp_path)
    )
    assert res.returncode != 0
    assert "model.strategy" in res.stderr and "ucb_best" in res.stderr
    assert not (tmp_path / "lightning_logs").exists() or not list((tmp_path / "lightning_logs").glob("*/summary.json"))


def test_cli_rejects_out_of_range_value_with_the_field_name(tmp_path):
    res = _cli("--config", "configs/cos.yaml", "--data.arms", "1", "--trainer.default_root_dir", str(tmp_path))
    assert res.returncode != 0 and "data.arms" in res.stderr


def test_a_baseline_swapped_in_on_the_command_line_keeps_its_own_default_beta(tmp_path):
    import math

    res = _cli(
        "--config",
        "configs/cos.yaml",
        "--model",
        "CoLSTIM",
        "--data.rounds",
        "6",
        "--data.num_seeds",
        "2",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.default_root_dir",
        str(tmp_path / "run"),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    [version] = list((tmp_path / "run" / "lightning_logs").iterdir())
    hparams = (version / "hparams.yaml").read_text()
    assert f"beta: {math.sqrt(5 * math.log(6))}" in hparams  # sqrt(d log T), not NVLDB's a_t = 1


def test_a_quiet_run_experiment_leaves_lightnings_log_and_warnings_as_they_were(tmp_path, caplog):
    """run_experiment (quiet, as the scripts call it) holds Lightning's info lines and warnings back for its own
    run only: after it the lightning.pytorch logger's level and the warning filters are as before, and a CLI run
    in the same process still says what it says through Lightning's log (here: a resume with nothing to run).
    The quiet level was left set, and a GPU test's resume line, logged after an earlier run_experiment, was lost."""
    import logging
    import warnings

    from nvldb_pl.cli import run_cli
    from nvldb_pl.loop.run import run_experiment

    lightning_log = logging.getLogger("lightning.pytorch")
    level, filters = lightning_log.level, list(warnings.filters)
    run_experiment({"task": "cos", "rounds": 3, "num_seeds": 1}, {"network": {"width": 4}, "grad_steps": 1})
    assert lightning_log.level == level and warnings.filters == filters
    args = [
        "fit",
        "--config",
        os.path.join(ROOT, "configs", "cos.yaml"),
        "--data.num_seeds=1",
        "--data.rounds=4",
        "--model.network.width=4",
        "--model.grad_steps=1",
        "--checkpoint.every_n_rounds=2",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={tmp_path}",
    ]
    assert run_cli(args) == 0
    caplog.clear()
    assert run_cli([*args, "--ckpt_path=last"]) == 0
    assert "data.rounds=4: the checkpoint already holds every round of the run, so nothing runs" in caplog.text


def test_seed_everything_true_draws_a_seed_says_it_and_keeps_it_so_the_run_can_be_made_again(tmp_path, capsys):
    """Documented as "a random one", it gave seed 0 bit for bit (Lightning's seed_everything() without a seed): now
    a seed drawn at random, said on stderr, in config.yaml and summary.json; giving that seed makes the same run."""
    import json
    import re

    import yaml

    from nvldb_pl.cli import run_cli

    cos = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs", "cos.yaml"
    )
    short = ["--data.rounds=4", "--data.num_seeds=1", "--model.network.width=4", "--trainer.enable_progress_bar=false"]
    seeds, regret = [], []
    for name in ("a", "b"):
        assert (
            run_cli(
                [
                    "fit",
                    "--config",
                    cos,
                    *short,
                    "--seed_everything=true",
                    f"--trainer.default_root_dir={tmp_path / name}",
                ]
            )
            == 0
        )
        said = re.search(r"seed_everything=true: seed (\d+), drawn at random", capsys.readouterr().err)
        folder = tmp_path / name / "lightning_logs" / "version_0"
        summary = json.loads((folder / "summary.json").read_text())
        assert (
            said
            and int(said.group(1))
            == summary["base_seed"]
            == yaml.safe_load((folder / "config.yaml").read_text())["seed_everything"]
        )
        seeds.append(summary["base_seed"])
        regret.append(summary["seeds"][0]["cum_avg_regret"])
    assert seeds[0] != seeds[1]
    assert (
        run_cli(
            [
                "fit",
                "--config",
                cos,
                *short,
                f"--seed_everything={seeds[0]}",
                f"--trainer.default_root_dir={tmp_path / 'c'}",
            ]
        )
        == 0
    )
    again = json.loads((tmp_path / "c" / "lightning_logs" / "version_0" / "summary.json").read_text())
    assert again["seeds"][0]["cum_avg_regret"] == regret[0]


@pytest.mark.parametrize(
    "extra",
    [
        ["--model", "NDB"],
        ["--model.network.module", "{class_path: tests.extensions.networks.LayerNormMLP, init_args: {hidden: 8}}"],
    ],
)
def test_what_a_run_records_of_its_settings_holds_no_lightning_internals(tmp_path, extra):
    """A learner or network chosen by class path records its settings as the learner holds them: no key of
    LightningCLI's own (``_class_path``, ``_instantiator``) in hparams.yaml, summary.json's settings or the
    checkpoint's hyper_parameters, where a reader would take it for a setting."""
    import torch
    import yaml

    from nvldb_pl.cli import run_cli

    config = os.path.join(ROOT, "configs", "cos.yaml")
    root = tmp_path / "run"
    short = ["--data.rounds", "3", "--data.num_seeds", "1", "--trainer.enable_progress_bar", "false"]
    assert run_cli(["fit", "--config", config, *extra, *short, "--trainer.default_root_dir", str(root)]) == 0
    folder = root / "lightning_logs" / "version_0"
    hparams = yaml.safe_load((folder / "hparams.yaml").read_text())
    settings = json.loads((folder / "summary.json").read_text())["settings"]
    saved = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")
    for where, keys in (
        ("hparams.yaml", hparams),
        ("summary settings", settings),
        ("checkpoint", saved["hyper_parameters"]),
    ):
        assert not [k for k in keys if str(k).startswith("_")], (where, sorted(keys))
