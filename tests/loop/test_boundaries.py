"""A user's part is checked where it meets the package, on the first round: one line naming the class and the
field, and no half-made run folder left (parts from tests/extensions/broken.py, outside the package)."""

import os

import pytest

from nvldb_pl.cli import run_cli
from tests.helpers.runs import fit_args

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
COS = os.path.join(ROOT, "configs", "cos.yaml")
B = "tests.extensions.broken."


@pytest.mark.parametrize(
    "flag, message",
    [
        (
            f"--data.task={B}FlatUtility",
            r"FlatUtility.utility returned shape \[3\]; expected \[S, K\] \(seeds, arms\) = \[3, 5\]",
        ),
        (f"--data.task={B}TransposedUtility", r"TransposedUtility.utility returned shape \[5, 3\]; expected \[S, K\]"),
        (f"--data.task={B}NaNUtility", r"NaNUtility.utility returned non-finite values"),
        (
            f"--data.task={B}WrongContexts",
            r"WrongContexts.draw_contexts returned shape \[\d+, 5, 6\]; expected \[rounds, K, d\]",
        ),
        (
            f"--model.strategy={B}OutOfRangeArm",
            r"model.strategy: .*OutOfRangeArm returned a2 = 7 \(seed index 0\); an arm is 0 .. 4",
        ),
        (f"--model.strategy={B}FloatArms", r"model.strategy: .*FloatArms returned a1 as a torch.float32 tensor"),
    ],
)
def test_a_users_part_is_refused_in_one_line_naming_its_class_and_leaves_no_run(tmp_path, capsys, flag, message):
    root = tmp_path / "runs"
    args = fit_args(root, flag, "--data.rounds=5", "--data.num_seeds=3")
    assert run_cli(args + ["--trainer.enable_progress_bar=false"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert __import__("re").search(message, err[0]), err[0]
    assert not root.exists() or not any(root.rglob("*.yaml"))
