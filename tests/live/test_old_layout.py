"""Files written before the package was laid out by role still load and go on: a fit run's checkpoint and
config.yaml, a live save, and YAML naming the old class paths.

``tests/data/old_layout/`` was written by commit 74acbcb (the flat layout): ``last.ckpt`` and ``config.yaml`` by
``tests.runs.ARGS`` with ``--data.rounds=16 --checkpoint.every_n_rounds=8``; ``live-save.pt`` by
``DuelingBandit.from_config("configs/live.yaml", dim=5, seed=3)`` after six answers (contexts and answers from
``np.random.default_rng(0)``), and ``live-expected.json`` is that bandit's ``select`` and ``scores`` on four
contexts from ``np.random.default_rng(1)``, as the old code gave them."""

import json
import os
import shutil

import numpy as np
import pytest

from tests.helpers.runs import _made, _per_seed

OLD = os.path.join(os.path.dirname(__file__), "..", "data", "old_layout")
TO_24 = ["--data.rounds=24", "--checkpoint.every_n_rounds=8"]


def test_a_checkpoint_of_the_old_layout_resumes_to_exactly_the_new_codes_uninterrupted_run(tmp_path):
    ckpt = tmp_path / "old" / "last.ckpt"
    ckpt.parent.mkdir()
    shutil.copy(os.path.join(OLD, "last.ckpt"), ckpt)
    # the old code's default w_reg 0 (its checkpoint records it), given to the new code's run too
    _made(str(tmp_path / "fresh"), *TO_24, "--model.w_reg=0.0")
    _made(str(tmp_path / "resumed"), *TO_24, "--model.w_reg=0.0", f"--ckpt_path={ckpt}")
    fresh, resumed = _per_seed(str(tmp_path / "fresh")), _per_seed(str(tmp_path / "resumed"))
    assert [s for s, _, _ in resumed] == [0, 1, 2]
    assert resumed == fresh  # rounds 1-16 by the old code, 17-24 by the new: bit for bit the new code's own run


def test_a_config_yaml_of_the_old_layout_runs(tmp_path):
    from nvldb_pl.cli import run_cli

    code = run_cli(["fit", "--config", os.path.join(OLD, "config.yaml"), f"--trainer.default_root_dir={tmp_path}"])
    assert code == 0
    assert [s for s, _, _ in _per_seed(str(tmp_path))] == [0, 1, 2]


def test_a_live_save_of_the_old_layout_loads_and_answers_as_it_did():
    from nvldb_pl.live import DuelingBandit

    bandit = DuelingBandit.from_checkpoint(os.path.join(OLD, "live-save.pt"))
    expected = json.load(open(os.path.join(OLD, "live-expected.json")))
    x = np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)
    assert list(map(int, bandit.select(x))) == expected["select"]
    # the scores were written on another machine: float32 kernels of another CPU (AVX-512 here) round the last bits
    # differently, so they agree to float32's precision, not bit for bit (the pair chosen is the same)
    np.testing.assert_allclose(bandit.scores(x), np.array(expected["scores"]), rtol=1e-6)


@pytest.mark.parametrize(
    "old,value,new,field",
    [
        ("self_duel_test", "none", "self_duel.test", ("self_duel", "test")),
        ("sample_size", "4", "sampler.size", ("sampler", "size")),
        ("history_pass", "full", "compute.history_pass", ("compute", "history_pass")),
    ],
)
def test_an_old_flat_name_is_read_from_a_config_as_its_nested_field_and_refused_on_the_command_line(
    tmp_path, capsys, old, value, new, field
):
    """A run's config.yaml of an older version names ``self_duel_test`` (``sample_size``, ``history_pass``): read as
    ``self_duel.test`` (``sampler.size``, ``compute.history_pass``), said on stderr, the file unchanged; the old name
    on the command line is refused naming the new one, and a group given as anything but a mapping names the group."""
    from nvldb_pl.cli import run_cli

    cfg = tmp_path / "old.yaml"
    text = f"model:\n  width: 4\n  grad_steps: 2\n  {old}: {value}\ndata:\n  task: cos\n  rounds: 6\n  num_seeds: 1\n"
    cfg.write_text(text)
    root = tmp_path / "run"
    assert run_cli(["fit", "--config", str(cfg), f"--trainer.default_root_dir={root}"]) == 0
    err = capsys.readouterr().err
    assert f"--config {cfg}: read model.{old} as {new}" in err
    assert cfg.read_text() == text
    summary = json.load(open(root / "lightning_logs" / "version_0" / "summary.json"))
    assert str(summary["settings"][field[0]][field[1]]) == value
    assert run_cli(["fit", "--config", str(cfg), f"--model.{old}={value}"]) == 2
    assert f"error: model.{old}: the setting is model.{new} now" in capsys.readouterr().err
    assert run_cli(["fit", "--config", str(cfg), f"--model.{field[0]}=[1, 2]"]) == 2
    assert (
        f"error: model.{field[0]}: [1, 2] is not a mapping of {field[1] if field[0] != 'compute' else 'backward'}"
        in (capsys.readouterr().err)
    )
