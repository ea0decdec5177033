"""nvldb_pl.machinery.host: freed blocks reused, not faulted in again (speed only); the software a run records."""

import os
import platform
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# 20 times a 40 MB tensor made, written and freed: above glibc's largest automatic mmap threshold (32 MiB on
# 64 bits), so by default each one is a fresh mapping whose pages all fault in (about 10 thousand a time)
CYCLES = """
import resource, sys, torch
if sys.argv[1] == "keep":
    from nvldb_pl.machinery.host import keep_freed_memory
    assert keep_freed_memory() and keep_freed_memory()  # in force, and a second call changes nothing
torch.ones(10_000_000)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    torch.ones(10_000_000)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(*modes):
    """Page faults of the cycles per mode, the processes side by side."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CYCLES, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        for mode in modes
    ]
    counts = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        counts.append(int(out.split()[-1]))
    return counts


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_kept_freed_memory_is_reused_instead_of_faulted_in_again():
    default, kept = _faults("default", "keep")
    assert default > 20 * 5000, default  # every cycle faulted its 40 MB in (10 thousand pages of 4 KiB)
    assert kept < default / 5, (kept, default)  # at most a few cycles' worth (measured: one)


def test_a_run_and_the_live_api_keep_freed_memory_where_the_c_library_is_glibc():
    """Not the learner (it imports no machinery): the loop's set-up and the live API's bandit set it, in a fresh
    process where nothing had."""
    code = """
from nvldb_pl.machinery import host
from nvldb_pl.learners.nvldb import NVLDB
NVLDB(dim=3, arms=3, rounds=5, num_seeds=1, network={"width": 4})
made = host._kept
from nvldb_pl.loop.run import run_experiment
run_experiment({"task": "cos", "rounds": 3, "num_seeds": 1}, {"network": {"width": 4}, "grad_steps": 1})
ran = host._kept
host._kept = None
from nvldb_pl.live import DuelingBandit
DuelingBandit.create(dim=3, network={"width": 4})
print(made, ran, host._kept)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert out.split() == ["None", str(glibc), str(glibc)]


def _git(cwd, *args):
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_commit_is_the_checkouts_head_marked_where_the_package_differs_from_it(tmp_path):
    from nvldb_pl.machinery.host import git_commit

    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("x = 1\n")
    (repo / "notes.md").write_text("results\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    assert len(head) == 40 and git_commit(str(repo / "pkg")) == head
    (repo / "notes.md").write_text("more results\n")  # outside the package: the code is still HEAD's
    (repo / "pkg" / "__pycache__").mkdir()
    (repo / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"\0")  # ignored by git
    assert git_commit(str(repo / "pkg")) == head
    (repo / "pkg" / "b.py").write_text("y = 2\n")  # a module not yet committed
    assert git_commit(str(repo / "pkg")) == head + "+modified"
    (repo / "pkg" / "b.py").unlink()
    (repo / "pkg" / "a.py").write_text("x = 2\n")
    assert git_commit(str(repo / "pkg")) == head + "+modified"
    _git(repo, "commit", "-q", "-am", "two")
    assert git_commit(str(repo / "pkg")) == _git(repo, "rev-parse", "HEAD") != head
    # installed into a folder deeper inside a repository (a venv's site-packages): not this checkout's code
    deep = repo / "venv" / "site-packages" / "pkg"
    deep.mkdir(parents=True)
    assert git_commit(str(deep)) is None
    # outside any repository, or without git at all
    outside = tmp_path / "plain" / "pkg"
    outside.mkdir(parents=True)
    assert git_commit(str(outside)) is None


def test_git_commit_without_git_is_none(tmp_path, monkeypatch):
    from nvldb_pl.machinery.host import git_commit

    monkeypatch.setenv("PATH", str(tmp_path))  # no git to run
    assert git_commit(ROOT + "/nvldb_pl") is None
