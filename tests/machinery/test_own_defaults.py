"""A learner named by class_path runs with its own defaults, not NVLDB's (jsonargparse carries those over)."""

import os

import yaml

from nvldb_pl.cli import run_cli
from nvldb_pl.machinery.own_defaults import given_keys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SHORT = ["--data.rounds=6", "--data.num_seeds=2", "--trainer.enable_progress_bar=false"]


def _hparams(root):
    with open(os.path.join(root, "lightning_logs", "version_0", "hparams.yaml")) as fh:
        return yaml.safe_load(fh)


def _config(tmp_path, model):
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump({"data": {"task": "cos"}, "model": model}))
    return str(path)


def test_a_subclass_named_in_yaml_gets_its_own_defaults(tmp_path):
    config = _config(tmp_path, {"class_path": "tests.extensions.learners.FastNVLDB"})
    assert run_cli(["fit", "--config", config, f"--trainer.default_root_dir={tmp_path / 'r'}", *SHORT]) == 0
    hp = _hparams(tmp_path / "r")
    assert (hp["lr"], hp["grad_steps"], hp["network"]["width"], hp["strategy"]) == (0.01, 5, 16, "ucb_osym")


def test_a_value_the_user_gives_is_kept_also_where_it_equals_nvldbs_default(tmp_path):
    config = _config(
        tmp_path, {"class_path": "tests.extensions.learners.FastNVLDB", "init_args": {"network": {"width": 32}}}
    )
    assert (
        run_cli(["fit", "--config", config, "--model.lr=0.001", f"--trainer.default_root_dir={tmp_path / 'r'}", *SHORT])
        == 0
    )
    hp = _hparams(tmp_path / "r")
    assert (hp["lr"], hp["grad_steps"], hp["network"]["width"]) == (0.001, 5, 32)


def test_the_subclass_on_the_command_line_after_an_nvldb_config_keeps_the_configs_given_values(tmp_path):
    """configs/cos.yaml gives strategy (kept: the user gave it), not lr (the subclass's own)."""
    args = [
        "fit",
        "--config",
        os.path.join(ROOT, "configs", "cos.yaml"),
        "--model=tests.extensions.learners.FastNVLDB",
        f"--trainer.default_root_dir={tmp_path / 'r'}",
        *SHORT,
    ]
    assert run_cli(args) == 0
    hp = _hparams(tmp_path / "r")
    assert (hp["lr"], hp["grad_steps"], hp["strategy"]) == (0.01, 5, "ucb_asym")


def test_print_config_shows_the_values_the_run_takes(tmp_path, capsys):
    config = _config(tmp_path, {"class_path": "tests.extensions.learners.FastNVLDB"})
    try:
        run_cli(["fit", "--config", config, "--print_config"])
    except SystemExit:
        pass
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["lr"] == 0.01 and printed["model"]["init_args"]["grad_steps"] == 5


def test_given_keys_reads_the_command_line_and_config_files(tmp_path):
    config = _config(tmp_path, {"class_path": "x.Y", "init_args": {"beta": 2}, "lam": 3})
    keys = given_keys(
        [
            "--config",
            config,
            "--model.lr",
            "1",
            "--model.init_args.network.width=3",
            '--model={"class_path": "a.B", "init_args": {"depth": 2}}',
        ],
        "model",
    )
    assert keys == {"beta", "lam", "lr", "network.width", "depth"}
