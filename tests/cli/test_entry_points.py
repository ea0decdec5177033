"""The installed commands ([project.scripts]) and where they find a class of one's own: the working folder."""

import os
import shutil
import subprocess
import re
import sys

import pytest

from tests.helpers.runs import fit_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def project_scripts() -> dict:
    """pyproject.toml's [project.scripts] (name = "module:function" lines; tomllib is Python 3.11+)."""
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    table = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+) = "([\w.:]+)"', table, flags=re.M))


SCRIPTS = project_scripts()

MY_NET = '''
from torch import nn


class Tiny(nn.Module):
    def __init__(self, dim: int = 5, features: int = 5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, 8), nn.Tanh(), nn.Linear(8, features))

    def forward(self, x):
        return self.body(x)
'''


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_command_names_a_function_of_the_package_and_its_script_wraps_the_same(name):
    import importlib

    module, _, func = SCRIPTS[name].partition(":")
    assert callable(getattr(importlib.import_module(module), func))
    script = {"nvldb": "main"}.get(name, name.removeprefix("nvldb-"))
    text = open(os.path.join(ROOT, "scripts", f"{script}.py")).read()
    assert module in text and "sys.path" not in text


def test_no_script_edits_sys_path():
    for folder, _, files in os.walk(os.path.join(ROOT, "scripts")):
        for f in files:
            if f.endswith(".py"):
                assert "sys.path" not in open(os.path.join(folder, f)).read(), f


def test_the_working_folder_gives_only_the_modules_a_command_names_after_the_installed_packages(tmp_path, monkeypatch):
    """Only a top-level name the command's arguments (or its --config files) name as a dotted path is looked for in
    the working folder, and only where no installed package has it; sys.path is left as it was."""
    import importlib

    from nvldb_pl.machinery.own_modules import find_own_modules_here

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text("X = 1\n")
    (tmp_path / "stray.py").write_text("X = 2\n")
    (tmp_path / "json.py").write_text("X = 3\n")  # an installed (standard) module's name: not shadowed
    (tmp_path / "c.yaml").write_text("model:\n  network: stray.Net\n")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    before = list(sys.path)
    find_own_modules_here(["fit", "--model.network.module=mine.Net", "--set", "json.X"])
    assert sys.path == before
    assert importlib.import_module("mine").X == 1
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("stray")  # in the folder, but named by nothing the command was given
    assert not hasattr(importlib.import_module("json"), "X")
    find_own_modules_here(["fit", "--config", str(tmp_path / "c.yaml")])
    assert importlib.import_module("stray").X == 2  # named in a --config file
    for name in ("mine", "stray"):
        sys.modules.pop(name, None)


def _fit_in(folder, run: str, *extra) -> subprocess.CompletedProcess:
    """scripts/main.py fit, four rounds of one seed into ``folder/run``, run from ``folder`` (no PYTHONPATH)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    short = ["--data.rounds=4", "--data.num_seeds=1", "--model.grad_steps=1"]
    argv = [sys.executable, os.path.join(ROOT, "scripts", "main.py"), *fit_args(folder / run, *short, *extra)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=folder, env=env, timeout=300)


def test_a_stray_module_in_the_working_folder_named_as_a_frameworks_probe_breaks_no_command(tmp_path):
    """A stray torch_xla.py in the working folder broke `nvldb fit` (Lightning's availability probe imported it: the
    folder was on sys.path before the Trainer existed); a class_path module that calls sys.exit(0) on import ended
    the command with exit 0 and no run. The first runs; the second is refused naming the module."""
    (tmp_path / "torch_xla.py").write_text('raise RuntimeError("not torch_xla")\n')
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "breaks.py").write_text('raise RuntimeError("half written")\n')
    out = _fit_in(tmp_path, "a")
    assert out.returncode == 0, out.stderr[-2000:]
    for name, said in (("quits", "importing it called sys.exit(0)"), ("breaks", "RuntimeError: half written")):
        out = _fit_in(tmp_path, name, f"--model={name}.Learner")
        assert out.returncode == 2, out.stderr[-2000:]
        assert f"{name} ({tmp_path / name}.py): {said}" in out.stderr, out.stderr[-2000:]


def test_a_class_in_a_module_of_ones_own_named_as_an_installed_one_is_refused_saying_which_was_taken(tmp_path):
    """./yaml.py defining the class: "module 'yaml' has no 'Tiny'", without a word that the installed yaml was
    imported instead. Now the refusal names both files and says to rename one's own."""
    (tmp_path / "yaml.py").write_text(MY_NET)
    for i, given in enumerate(("--model.network.module=yaml.Tiny", "--model=yaml.Tiny")):
        out = _fit_in(tmp_path, str(i), given)
        assert out.returncode == 2, out.stderr[-2000:]
        assert "the installed module yaml (" in out.stderr and f"was taken, not {tmp_path / 'yaml.py'}" in out.stderr
        assert "rename it" in out.stderr and out.stderr.count("error:") == 1, out.stderr[-2000:]


def test_a_network_of_ones_own_in_the_working_folder_runs_from_the_installed_command(tmp_path):
    """``nvldb fit`` (or ``python scripts/main.py fit``) in a folder of one's own finds ``my_net.Tiny`` there."""
    (tmp_path / "my_net.py").write_text(MY_NET)
    command = shutil.which("nvldb", path=os.path.dirname(sys.executable))
    argv = [command] if command else [sys.executable, os.path.join(ROOT, "scripts", "main.py")]
    args = fit_args(
        tmp_path / "runs",
        "--model.network.module=my_net.Tiny",
        "--model.self_duel.test=none",
        "--data.rounds=6",
        "--data.num_seeds=2",
        "--model.grad_steps=2",
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([*argv, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[Tiny]" in out.stdout + out.stderr  # the method is named for the network it ran


def test_a_resume_whose_own_module_is_another_file_is_refused_naming_it(tmp_path):
    """A run resumed from another folder took that folder's module of the same name (my_net.Tiny) and mixed two
    networks in one run: a checkpoint named the class only. It records each module of one's own by its file's
    digest; a resume that imports another file under that name is refused naming the module; the same code goes on."""
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, activation in ((first, "Tanh"), (second, "ReLU")):  # the same shapes, another network
        folder.mkdir()
        (folder / "my_net.py").write_text(MY_NET.replace("Tanh", activation))
    argv = [sys.executable, os.path.join(ROOT, "scripts", "main.py")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    settings = [
        "--model.network.module=my_net.Tiny",
        "--model.self_duel.test=none",
        "--data.num_seeds=1",
        "--model.grad_steps=1",
    ]
    runs = tmp_path / "runs"
    out = subprocess.run(
        [*argv, *fit_args(runs, *settings, "--data.rounds=4", "--checkpoint.every_n_rounds=2")],
        capture_output=True,
        text=True,
        cwd=first,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    again = [*argv, *fit_args(runs, *settings, "--data.rounds=6", "--checkpoint.every_n_rounds=2", "--ckpt_path=last")]
    out = subprocess.run(again, capture_output=True, text=True, cwd=second, env=env, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"ckpt_path: the run was made with my_net from {first / 'my_net.py'}" in out.stderr, out.stderr[-2000:]
    out = subprocess.run(again, capture_output=True, text=True, cwd=first, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
