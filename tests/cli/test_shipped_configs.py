"""The configs ship with the package: ``nvldb fit --config cos`` from any folder, an installed wheel holds every one,
and a name that is neither a file nor shipped is refused naming the shipped ones."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from nvldb_pl.cli import run_cli
from nvldb_pl.machinery.yaml_files import shipped_config, shipped_names

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "configs")


def _in_repo() -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), CONFIGS)[: -len(".yaml")]
        for d, _, files in os.walk(CONFIGS)
        for f in files
        if f.endswith(".yaml")
    )


def test_every_config_of_the_repository_is_shipped_under_its_name():
    assert shipped_names() == _in_repo()
    for name in _in_repo():
        with open(shipped_config(name)) as got, open(os.path.join(CONFIGS, name + ".yaml")) as want:
            assert got.read() == want.read()
    assert shipped_config("cos.yaml") == shipped_config("cos")
    assert shipped_config("../pyproject.toml") is None and shipped_config("nosuch") is None


def test_a_shipped_config_by_name_runs_from_another_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", "cos", "--data.rounds=4", "--data.num_seeds=2", "--model.network.width=4"]
    assert run_cli([*args, "--trainer.enable_progress_bar=false", "--trainer.logger=false"]) == 0
    assert os.path.isfile(tmp_path / "runs" / "cos" / "summary.json")
    (tmp_path / "cos").write_text("not: [a config")  # a file of that name here comes first
    assert run_cli(["fit", "--config", "cos"]) == 2
    assert "--config: cos is not valid YAML" in capsys.readouterr().err


def test_a_config_name_neither_a_file_nor_shipped_is_refused_naming_the_shipped(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_cli(["fit", "--config=coss"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --config: coss is neither a file nor a config the package ships (one of " + ", ".join(_in_repo()) + ")"
    ]


def test_the_wheel_holds_every_config(tmp_path):
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name if src.exists() else (src.mkdir() or src / name))
    shutil.copytree(os.path.join(ROOT, "configs"), src / "configs")
    shutil.copytree(
        os.path.join(ROOT, "nvldb_pl"), src / "nvldb_pl", symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path),
        str(src),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    (wheel,) = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    held = zipfile.ZipFile(tmp_path / wheel).namelist()
    assert sorted(n[len("nvldb_pl/configs/") : -len(".yaml")] for n in held if n.startswith("nvldb_pl/configs/")) == (
        _in_repo()
    )
