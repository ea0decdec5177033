"""Every option of ``main.py fit`` (the fit command's own and every learner's ``model.*``), given a value of the wrong
type, out of range and of the wrong kind: each ends in one ``error:`` line naming the field (exit 2), or runs
(exit 0: a value the option takes), never a traceback. The options are read from the parser, so a new one is walked
too."""

import contextlib
import dataclasses
import inspect
import io
import os
import re
import subprocess
import sys

import pytest

from nvldb_pl.learners.registry import LEARNERS, init_args
from nvldb_pl.maths.checks import LINKED_FROM_DATA

BAD = ("abc", "-1", "[1, 2]")  # the wrong type, out of range, the wrong kind
PATHS = ("trainer.default_root_dir", "checkpoint.dirpath")  # a folder named "abc" is a folder: not walked here


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fit_options() -> list[str]:
    """The options ``main.py fit --help`` lists (the learner's are under ``--model.help``: walked per learner)."""
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "main.py"), "fit", "--help"], capture_output=True, text=True
    ).stdout
    names = re.findall(r"^\s+--((?:data|loop|checkpoint|trainer)\.[\w.]+)", out, re.M)
    return sorted(set(names) - set(PATHS))


def _walk(tmp_path, options: list[str], learner: str = "NVLDB") -> list[str]:
    from nvldb_pl.cli import run_cli

    wrong = []
    for n, option in enumerate(options):
        for value in BAD:
            root = tmp_path / f"{n}-{BAD.index(value)}"
            args = ["fit", "--config", "configs/cos.yaml", "--model", learner, "--data.rounds", "4"]
            args += ["--data.num_seeds", "1", "--trainer.enable_progress_bar", "false"]
            args += ["--trainer.default_root_dir", str(root), f"--{option}={value}"]
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    code = run_cli(args)
            except BaseException as raised:  # noqa: BLE001 (what the walk looks for)
                code = f"raised {type(raised).__name__}"
            text = err.getvalue()
            errors = [line for line in text.splitlines() if line.startswith("error: ")]
            if code not in (0, 2) or "Traceback" in text or (code == 2 and len(errors) != 1):
                wrong.append(f"--{option}={value}: exit {code}, {text.strip()[-300:]!r}")
            elif code == 2 and option.split(".")[-1] not in errors[0] and option.split(".")[0] not in errors[0]:
                wrong.append(f"--{option}={value}: the error names another field: {errors[0]}")
    return wrong


@pytest.mark.parametrize("learner", [n for n in LEARNERS if n != "PairwiseGPLearner"])
def test_every_learner_option_given_a_bad_value_is_one_line_or_runs(tmp_path, monkeypatch, learner):
    monkeypatch.chdir(ROOT)
    cls = LEARNERS[learner]
    options = [f"model.{a}" for a in sorted(init_args(cls) - set(LINKED_FROM_DATA))]
    params = inspect.signature(cls.__init__).parameters
    for a in list(options):  # a nested setting's fields too (model.self_duel.test)
        default = params[a[len("model.") :]].default if a[len("model.") :] in params else None
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            options += [f"{a}.{f.name}" for f in dataclasses.fields(default)]
    assert _walk(tmp_path, options, learner) == []


def test_every_fit_option_given_a_bad_value_is_one_line_or_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    options = _fit_options()
    assert len(options) > 40 and "data.rounds" in options and "loop.log_every_n_rounds" in options
    assert _walk(tmp_path, options) == []
