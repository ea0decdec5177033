"""Every `python scripts/main.py` command the README and docs/ show, run as a user would (shortened
by overrides appended at the end: few rounds and seeds, a temporary run folder)."""

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHORT = ["--data.rounds", "4", "--data.num_seeds", "2", "--trainer.enable_progress_bar", "false"]


DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def readme_commands(files=DOCS) -> list[str]:
    """The `python scripts/main.py ...` commands of the bash blocks of ``files`` (continuations
    joined, comments dropped, the part after `&&` when a line chains set-up and a command)."""
    text = "\n".join(open(os.path.join(ROOT, f)).read() for f in files)
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("python scripts/main.py") and part not in out:
                    out.append(part)
    return out


def test_the_readme_shows_main_commands():
    commands = readme_commands(["README.md"])
    assert any("configs/cos.yaml" in c and c.endswith("configs/cos.yaml") for c in commands)  # set-up command (1)
    assert any("--model NDB" in c for c in commands)
    assert any(
        c.endswith("--data.rounds 300 --data.num_seeds 5 --trainer.default_root_dir runs/quick") for c in commands
    )


def test_the_readmes_layout_table_is_the_tree():
    """The README's "Layout" table lists every folder of the package, and no folder that is not there."""
    layout = open(os.path.join(ROOT, "README.md")).read().split("## Layout", 1)[1]
    listed = set(re.findall(r"^\| `nvldb_pl/([a-z_]+)/`", layout, flags=re.M))
    folders = {
        d
        for d in os.listdir(os.path.join(ROOT, "nvldb_pl"))
        if os.path.isfile(os.path.join(ROOT, "nvldb_pl", d, "__init__.py"))
    }
    assert listed == folders


def test_the_readme_is_a_doorway():
    assert len(open(os.path.join(ROOT, "README.md")).read().splitlines()) <= 200


def test_the_layout_table_names_every_module():
    """docs/usage.md's "Layout" gives each module of the package its one job: a new module is listed."""
    layout = open(os.path.join(ROOT, "docs", "usage.md")).read().split("## Layout", 1)[1]
    modules = [
        os.path.relpath(p, ROOT)
        for p in glob.glob(os.path.join(ROOT, "nvldb_pl", "**", "*.py"), recursive=True)
        if not p.endswith("__init__.py")
    ]
    assert [m for m in sorted(modules) if f"`{m}`" not in layout] == []


SETUP = "python scripts/main.py fit --config configs/cos.yaml"  # the README's set-up command (1)


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs(command, tmp_path, monkeypatch, capsys):
    """The set-up command, --version, --print_config, the commands naming a user's module (found as scripts/main.py
    finds it) and those that start processes run as a user's process; the others in this one (the run_cli that
    scripts/main.py calls, from the repository's folder), without 4 s of imports each."""
    args = shlex.split(command)[2:]  # after "python scripts/main.py"
    if "--print_config" not in args and "--version" not in args:
        args += SHORT + ["--trainer.default_root_dir", str(tmp_path / "run")]
    own_process = ("--print_config", "--version", "tests.extensions", "seed_parallel")
    if command == SETUP or any(a.startswith(own_process) or "tests.extensions" in a for a in args):
        res = subprocess.run(
            [sys.executable, os.path.join(ROOT, "scripts", "main.py"), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        code, out, err = res.returncode, res.stdout, res.stderr
    else:
        from nvldb_pl.cli import run_cli

        monkeypatch.chdir(ROOT)
        capsys.readouterr()
        code = run_cli(args)
        captured = capsys.readouterr()
        out, err = captured.out, captured.err
    assert code == 0, f"{command}\n{err[-3000:]}"
    if "--print_config" in args:
        assert "model:" in out and "data:" in out
    elif "--version" in args:
        assert out.startswith("nvldb_pl ") and len(out.splitlines()) == 1
        assert not (tmp_path / "run").exists()
    else:
        assert list((tmp_path / "run").glob("lightning_logs/version_*/summary.json")), err[-2000:]


def test_the_readmes_commands_in_its_order_in_a_fresh_folder(tmp_path, monkeypatch, capsys):
    """The README's `python scripts/main.py` commands one after the other, as a new user runs them, in a folder of
    their own (configs/ beside; each run in the folder its config or command names), shortened: each one after the
    others runs (`--ckpt_path last` after the baseline's run took the baseline's and was refused), and none writes
    outside the folder. --version and --print_config write nothing and run in their own test above."""
    from nvldb_pl.cli import run_cli

    (tmp_path / "configs").symlink_to(os.path.join(ROOT, "configs"))
    monkeypatch.chdir(tmp_path)
    for command in readme_commands(["README.md"]):
        args = shlex.split(command)[2:]
        if "--print_config" in args or "--version" in args:
            continue
        capsys.readouterr()
        code = run_cli(args + SHORT)
        assert code == 0, f"{command}\n{capsys.readouterr().err[-3000:]}"
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == ["configs", "runs"], made
    assert (tmp_path / "runs" / "cos" / "lightning_logs" / "version_1").is_dir()  # the baseline's, beside the default's
    last = capsys.readouterr().out.strip().splitlines()[-1]  # --ckpt_path last: the default's finished run
    assert "runs/cos/lightning_logs/version_0/checkpoints/last.ckpt: that run finished at round 4" in last, last


def test_the_readmes_python_snippets_run_as_written(tmp_path, monkeypatch):
    """Each ```python block of the README, run as a user pastes it, from the repository's folder (the live snippet
    used contexts and outcome it never made)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    monkeypatch.chdir(ROOT)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "__readme__"})
