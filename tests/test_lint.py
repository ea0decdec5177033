"""The code is formatted and linted by ruff as pyproject.toml configures it (line length, rules)."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ruff():
    exe = shutil.which("ruff") or os.path.join(os.path.dirname(sys.executable), "ruff")
    if not os.path.exists(exe):
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    return exe


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]])
def test_ruff_finds_nothing(command):
    res = subprocess.run([_ruff(), *command], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
