"""Every record names what ran: the learner's class path and the settings that differ from its class's defaults
(summary.json, TensorBoard's hparams), checkpoints and live saves that find a user's class again, and a subclass
written with **kwargs taking its parent's arguments in the live API as in the CLI."""

import glob
import json
import os

import pytest

import numpy as np

from nvldb_pl.learners import NetworkOptions
from nvldb_pl.cli import run_cli
from nvldb_pl.live import DuelingBandit
from nvldb_pl.learners.registry import init_args

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
COS = os.path.join(ROOT, "configs", "cos.yaml")


def _fit(root, *extra):
    args = (
        ["fit", "--config", COS, "--data.rounds=10", "--data.num_seeds=2", "--model.grad_steps=2"]
        if not any(a.startswith("--model=") or a == "--model" for a in extra)
        else ["fit", "--config", COS, "--data.rounds=10", "--data.num_seeds=2"]
    )
    assert run_cli(args + ["--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={root}", *extra]) == 0
    folder = os.path.join(root, "lightning_logs", "version_0")
    with open(os.path.join(folder, "summary.json")) as fh:
        return json.load(fh), os.path.join(folder, "checkpoints", "last.ckpt")


def test_a_users_network_is_named_in_the_method_and_its_settings_recorded(tmp_path):
    s, _ = _fit(
        tmp_path, "--model.network.module=tests.extensions.networks.LayerNormMLP", "--model.self_duel.test=none"
    )
    assert s["method"] == "NVLDB-UCB-ASYM[LayerNormMLP]" and s["learner"] == "NVLDB"
    assert s["settings"] == {
        "network": {**NetworkOptions().resolved().saved(), "module": "tests.extensions.networks.LayerNormMLP"},
        "self_duel": {
            "test": "none",
            "escape_rate": 1.0,
            "width": None,
            "second_arm": "rule",
        },  # as in force
        "grad_steps": 2,
    }


def test_the_defaults_record_no_settings(tmp_path):
    s, _ = _fit(tmp_path, "--model.grad_steps=20")
    assert s["method"] == "NVLDB-UCB-ASYM" and s["settings"] == {}


def test_a_subclass_is_named_by_its_class_and_its_fit_checkpoint_loads_in_the_live_api(tmp_path):
    s, ckpt = _fit(tmp_path, "--model=tests.extensions.learners.FastNVLDB")
    assert s["method"] == "FastNVLDB-UCB-ASYM" and s["learner"] == "tests.extensions.learners.FastNVLDB"
    bandit = DuelingBandit.from_checkpoint(ckpt, seed_index=1)
    assert type(bandit.learner).__name__ == "FastNVLDB" and bandit.num_observed == 10


def test_a_fit_checkpoint_of_a_learner_of_ones_own_loads_in_the_live_api(tmp_path):
    _, ckpt = _fit(tmp_path, "--model=tests.extensions.learners.OnlineLogistic")
    bandit = DuelingBandit.from_checkpoint(ckpt)
    assert type(bandit.learner).__name__ == "OnlineLogistic" and bandit.num_observed == 10
    x = np.eye(5)[:4]
    i, j = bandit.select(x)
    bandit.observe(x, i, j, 1)


def test_a_subclass_with_kwargs_takes_its_parents_arguments_live_and_its_save_loads(tmp_path):
    from tests.extensions.learners import WideNVLDB

    assert {"network", "lr", "strategy", "self_duel"} <= init_args(WideNVLDB)
    bandit = DuelingBandit.create("tests.extensions.learners.WideNVLDB", lr="0.01", grad_steps=3)
    assert bandit.learner.hparams.lr == 0.01 and bandit.learner.hparams.network["width"] == 48
    x = np.eye(5)[:3]
    bandit.observe(x, 0, 1, 1)
    bandit.save(str(tmp_path / "w.pt"))
    again = DuelingBandit.from_checkpoint(str(tmp_path / "w.pt"))
    assert type(again.learner) is WideNVLDB and again.learner.hparams.grad_steps == 3
    np.testing.assert_array_equal(again.scores(x), bandit.scores(x))


def test_a_tables_run_records_its_data_and_the_label_of_each_arm(tmp_path):
    table = os.path.join(ROOT, "tests", "extensions", "flowers.csv")
    s, _ = _fit(tmp_path, "--data.task=table", f"--data.data_file={table}", "--data.dim=12", "--data.arms=3")
    assert s["arm_labels"] == ["setosa", "versicolor", "virginica"]
    assert s["data"]["data_file"] == table and s["data"]["task"] == "table" and s["data"]["dim"] == 12


def test_reproduce_takes_a_list_in_data_as_main_does(tmp_path, capsys):
    """--data feature_columns=[petal_length,petal_width] was taken as the text '[petal_length,petal_width]' and read
    character by character ('[' not a column); it is the list main.py's --data.feature_columns takes."""
    from tests.helpers.script_loader import load_script

    table = os.path.join(ROOT, "tests", "extensions", "flowers.csv")
    out = str(tmp_path / "rep")
    args = ["--out", out, "--tasks", "table", "--dim", "6", "--arms", "3", "--methods", "Random", "--rounds", "4"]
    args += ["--seeds", "2", "--data", f"data_file={table}", "label_column=species"]
    reproduce = load_script("reproduce")
    assert reproduce.main(args + ["feature_columns=[petal_length,petal_width]"]) == 0, capsys.readouterr().err
    with open(next(iter(glob.glob(os.path.join(out, "runs", "**", "summary.json"), recursive=True)))) as fh:
        assert json.load(fh)["data"]["feature_columns"] == ["petal_length", "petal_width"]
    assert reproduce.main(args + ["feature_columns=[petal_length,"]) == 2
    assert "--data: feature_columns=[petal_length, is not a list or mapping" in capsys.readouterr().err


def test_the_comparison_scripts_take_a_table_file_and_d_and_k_in_a_sweep(tmp_path, capsys, monkeypatch):
    from tests.helpers.script_loader import load_script

    table = os.path.join(ROOT, "tests", "extensions", "flowers.csv")
    out = str(tmp_path / "rep")
    args = ["--out", out, "--tasks", "table", "--data", f"data_file={table}", "--dim", "12", "--arms", "3"]
    args += ["--methods", "NVLDB-UCB-ASYM", "tests.extensions.learners.FastNVLDB", "--rounds", "8", "--seeds", "2"]
    reproduce = load_script("reproduce")
    assert reproduce.main(args + ["--set", "network.width=4"]) == 0
    assert reproduce.main(args + ["--set", "network.width=4"]) == 0  # made with the same table: reused
    assert capsys.readouterr().out.count("[reuse]") == 2
    assert reproduce.main(args[:5] + ["data_file=nowhere.csv"] + args[6:]) == 2
    assert "nowhere.csv" in capsys.readouterr().err
    assert reproduce.main(args[:5] + ["link=probit", f"data_file={table}", "colour=red"] + args[6:]) == 2
    assert "--data: no data setting ['colour']" in capsys.readouterr().err
    rows = str(tmp_path / "s.jsonl")
    argv = ["sweep.py", "--rounds", "8", "--seeds", "2", "--tasks", "square", "--grid", '[{"network": {"width": 4}}]']
    monkeypatch.setattr("sys.argv", argv + ["--vary", "data.dim=3,6", "data.arms=4", "--out", rows])
    load_script("sweep").main()
    runs = [json.loads(line) for line in open(rows)]
    assert [(r["config"]["data.dim"], r["config"]["data.arms"]) for r in runs] == [(3, 4), (6, 4)]
    assert runs[0]["per_seed"] != runs[1]["per_seed"]


def test_a_hand_edited_hparams_yaml_is_neither_reused_nor_reported(tmp_path, capsys):
    """reproduce.py's reuse and its report read a run's settings from hparams.yaml: an edit after the run (width 32 ->
    64) passed a run off as made with other settings. summary.json records the digest of the hyperparameters the run
    wrote, and an hparams.yaml that does not match it is refused naming the file, in the reuse and in the report;
    put back, the run is reused as before."""
    from tests.helpers.script_loader import load_script

    reproduce = load_script("reproduce")
    out = tmp_path / "rep"
    args = ["--out", str(out), "--tasks", "cos", "--rounds", "5", "--seeds", "2", "--methods", "NVLDB-UCB-ASYM"]
    args += ["--set", "grad_steps=1"]
    assert reproduce.main(args) == 0
    path = next(out.glob("runs/cos/NVLDB-UCB-ASYM/lightning_logs/version_0/hparams.yaml"))
    made = path.read_text()
    assert "\n  width: 32\n" in made
    path.write_text(made.replace("\n  width: 32\n", "\n  width: 64\n"))
    capsys.readouterr()
    for extra in ([], ["--report-only"], ["--set", "grad_steps=1", "network.width=64"]):
        assert reproduce.main(args + extra) == 2
        err = capsys.readouterr().err
        assert f"{path}: not the hyperparameters the run was made with" in err, err
    assert len(list(out.glob("runs/cos/NVLDB-UCB-ASYM/lightning_logs/version_*"))) == 1  # nothing ran
    path.write_text(made)
    assert reproduce.main(args) == 0
    assert "[reuse]" in capsys.readouterr().out


@pytest.mark.parametrize("setting", ["link=probit", "preference=deterministic"])
def test_a_run_made_with_a_data_setting_is_not_reused_by_a_call_without_it(tmp_path, capsys, setting):
    """nvldb-reproduce --data link=probit, then the same call without --data: the probit run was reused and reported
    as the default logistic one (the reuse compared only the keys the call named). Every data setting a run was made
    with is compared, a default one too: the second call runs anew, and a third as the first reuses the first."""
    from tests.helpers.script_loader import load_script

    out = str(tmp_path / "rep")
    args = ["--out", out, "--tasks", "cos", "--methods", "Random", "--rounds", "4", "--seeds", "2"]
    reproduce = load_script("reproduce")
    assert reproduce.main(args + ["--data", setting]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert reproduce.main(args) == 0
    assert "[reuse]" not in capsys.readouterr().out
    assert reproduce.main(args + ["--data", setting]) == 0
    assert capsys.readouterr().out.count("[reuse]") == 1
    assert reproduce.main(args) == 0
    assert capsys.readouterr().out.count("[reuse]") == 1
