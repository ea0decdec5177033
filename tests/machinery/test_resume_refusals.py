"""What a resume (or a new run into a used folder) refuses, each in one line before anything runs, the run folder left
as it was: another version's checkpoint, a folder holding or writing another run, another save_curves, a folder that
cannot be written, a horizon that cannot go on exactly."""

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers.runs import (
    LAYOUTS,
    SHORT,
    _files,
    _in_process,
    _made,
    _run,
)


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--data.num_seeds=4"], "data.num_seeds: checkpoint 3, config 4"),
        (["--data.first_seed_id=3"], "data.first_seed_id: checkpoint 0, config 3"),  # was blamed on the process count
        (
            ["--trainer.precision=bf16-mixed"],
            "trainer.precision: the checkpoint's rounds were computed in '32-true'; "
            "going on in 'bf16-mixed' would give a run that equals neither",
        ),
    ],
)
def test_a_refused_resume_leaves_the_run_folder_as_it_was(tmp_path, extra, message, capsys):
    root = tmp_path / "run"
    _made(str(root), *SHORT, "--data.rounds=16")
    before = _files(root)
    out = _in_process(capsys, str(root), *SHORT, *extra, "--ckpt_path=last")
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
    assert _files(root) == before  # config.yaml included: it still says what the run was


def _drop_first_bad_context(ckpt):
    ckpt["state_dict"].pop("first_bad_context")


@pytest.mark.parametrize(
    "edit,message",
    [
        (_drop_first_bad_context, "it lacks ['first_bad_context']"),  # a buffer newer code added
        (lambda ckpt: ckpt["state_dict"].update(old_buffer=torch.zeros(2)), "it holds ['old_buffer'] besides"),
        (lambda ckpt: ckpt["state_dict"].update(V=torch.zeros(3, 3)), "other shapes: V [3, 3] (here [3, 5, 5])"),
        (lambda ckpt: ckpt.pop("BanditDataModule"), "ckpt_path: the checkpoint holds no state of the round stream"),
    ],
)
def test_a_checkpoint_of_another_version_is_refused_in_one_line(tmp_path, edit, message, capsys):
    """A file saved by another version of the package (its learner kept other buffers) ended in torch's
    load_state_dict RuntimeError traceback; one without the stream's state was resumed unchecked."""
    root = tmp_path / "run"
    _made(str(root), *SHORT, "--data.rounds=16")
    path = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    edit(ckpt)
    torch.save(ckpt, path)
    before = _files(root)
    out = _in_process(capsys, str(root), *SHORT, "--ckpt_path=last")
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
    assert "Error(s) in loading state_dict" not in out.stderr and "KeyError" not in out.stderr
    if "round stream" not in message:
        assert "saved by another version of nvldb_pl; go on with that version, or start a new run" in out.stderr
    assert _files(root) == before


def test_a_refused_resume_into_a_new_folder_leaves_no_folder_behind(tmp_path, capsys):
    """default_root_dir (and its parents) and lightning_logs, made by a run that is then refused, are removed
    again: they were left empty."""
    _made(str(tmp_path / "run"), *SHORT, "--data.rounds=8")
    ckpt = tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    out = _in_process(
        capsys, str(tmp_path / "new" / "root"), *SHORT, "--data.rounds=8", "--model.lr=0.5", f"--ckpt_path={ckpt}"
    )
    assert out.returncode == 2 and "model.lr: checkpoint 0.001, config 0.5" in out.stderr, out.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_resuming_a_finished_run_at_its_horizon_runs_nothing_and_says_so(tmp_path):
    root = tmp_path / "run"
    _made(str(root), *SHORT)
    before = _files(root)
    out = _run(str(root), *SHORT, "--ckpt_path=last")
    assert "data.rounds=24: the checkpoint already holds every round of the run, so nothing runs" in out.stderr
    assert "Warning" not in out.stderr  # (torchmetrics warned of compute() before update())
    assert _files(root) == before
    # the last line, where a run's result would be (it ended with Lightning's lines alone)
    summary = os.path.join(str(root), "lightning_logs", "version_0", "summary.json")
    assert out.stdout.strip().splitlines()[-1] == (
        f"ckpt_path: {os.path.join(str(root), 'lightning_logs', 'version_0', 'checkpoints', 'last.ckpt')}: that run "
        f"finished at round 24 (data.rounds=24); nothing was run and its results stay in {summary}; give a larger "
        f"data.rounds to go on with it"
    )


def test_ckpt_path_last_goes_on_with_the_newest_run_of_this_learner_and_task_not_a_baseline_made_after(
    tmp_path, capsys
):
    """The README's commands in order: a fit of the default, then a baseline into the same folder, then
    --ckpt_path last of the default: it took the baseline's run and was refused ('made with another config:
    model.learner ...'). It goes on with the default's own run; a learner with no run there starts a new one."""
    root = str(tmp_path / "runs")
    _made(root, *SHORT, "--data.rounds=8")
    _made(root, *SHORT, "--data.rounds=8", "--model=CoLSTIM")
    out = _in_process(capsys, root, *SHORT, "--data.rounds=12", "--ckpt_path=last")
    assert out.returncode == 0, out.stderr[-2000:]
    with open(os.path.join(root, "lightning_logs", "version_0", "summary.json")) as fh:
        summary = json.load(fh)
    assert summary["rounds"] == 12 and summary["resumed_at_round"] == 8 and summary["learner"] == "NVLDB"
    out = _in_process(capsys, root, *SHORT, "--data.rounds=8", "--model=MaxInP", "--ckpt_path=last")
    assert out.returncode == 0 and "no checkpoint to go on from" in out.stderr, out.stderr[-2000:]
    # the runs there were passed over, and it says so (it said only "no checkpoint", though two were there)
    assert "of a MaxInP run" in out.stderr and "passed over version_1 (CoLSTIM on " in out.stderr, out.stderr[-2000:]
    assert "version_0 (NVLDB on " in out.stderr
    assert os.path.isdir(os.path.join(root, "lightning_logs", "version_2"))


@pytest.mark.parametrize(
    "layout,field", [("no logger", "trainer.default_root_dir"), ("checkpoint.dirpath", "checkpoint.dirpath")]
)
def test_a_new_run_into_a_folder_holding_a_run_is_refused_and_writes_nothing(tmp_path, layout, field, capsys):
    root = tmp_path / "run"
    flags = [f.format(root=root) for f in LAYOUTS[layout][0]]
    _made(str(root), *SHORT, "--data.rounds=8", *flags)
    before = _files(root)
    out = _in_process(capsys, str(root), *SHORT, *flags, "--model.lr=0.01")  # a new run, another config, same folders
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"error: {field}: " in out.stderr and "already holds another run's" in out.stderr
    assert "go on with that run with --ckpt_path last" in out.stderr
    assert _files(root) == before
    assert sorted(p.name for p in root.iterdir()) == sorted({p.relative_to(root).parts[0] for p in before})


@pytest.mark.parametrize("first,then", [("true", "false"), ("false", "true")])
def test_going_on_with_another_save_curves_is_refused_and_the_files_stay_one_horizon(tmp_path, capsys, first, then):
    """A resume with loop.save_curves false left summary.json at T=16 beside a curves.csv ending at round 8 (and the
    other way, curves beginning at round 9): refused in one line, the run's files as they were."""
    root = tmp_path / "run"
    _made(str(root), *SHORT, "--data.rounds=8", f"--loop.save_curves={first}")
    before = _files(root)
    out = _in_process(capsys, str(root), *SHORT, "--data.rounds=16", "--ckpt_path=last", f"--loop.save_curves={then}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"error: loop.save_curves: the run was made with save_curves {first}; going on with {then}" in out.stderr
    assert _files(root) == before


def test_resuming_into_a_folder_that_cannot_be_written_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    """Resuming into a read-only run folder was a PermissionError traceback: now one line naming ckpt_path (the
    folder's refusal simulated, so that root sees it too), and the run's files as they were."""
    import tempfile

    from nvldb_pl.machinery import host

    root = tmp_path / "run"
    _made(str(root), *SHORT, "--data.rounds=8")
    folder = root / "lightning_logs" / "version_0"
    before = _files(root)
    real = tempfile.NamedTemporaryFile

    def read_only(*args, dir=None, **kwargs):
        if dir is not None and os.path.realpath(dir) == os.path.realpath(folder):
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(host.tempfile, "NamedTemporaryFile", read_only)
    out = _in_process(capsys, str(root), *SHORT, "--data.rounds=16", "--ckpt_path=last")
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"error: ckpt_path: {folder} is not a writable folder (Permission denied); a run going on writes" in (
        out.stderr
    )
    assert "Traceback" not in out.stderr and _files(root) == before


@pytest.mark.parametrize(
    "layout,field,folder",
    [("no logger", "trainer.default_root_dir", "{root}"), ("checkpoint.dirpath", "checkpoint.dirpath", "{root}/ck")],
)
def test_a_run_into_a_folder_another_run_is_writing_now_is_refused_naming_it(tmp_path, layout, field, folder, capsys):
    """Two runs at once on one --checkpoint.dirpath (or one root under --trainer.logger false) both ran and the
    finished run's last.ckpt was gone or the other's: the second is refused, naming the field and the process, and
    nothing it would write is there (another process holds the folder, as a run does while it runs)."""
    root = tmp_path / "run"
    flags = [f.format(root=root) for f in LAYOUTS[layout][0]]
    place = folder.format(root=root)
    os.makedirs(place)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from nvldb_pl.machinery.host import hold_dir; import time; hold_dir({place!r}); "
            "print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        out = _in_process(capsys, str(root), *SHORT, "--data.rounds=8", *flags)
        assert out.returncode == 2, out.stderr[-2000:]
        assert f"error: {field}: {place} is being written by another run now (process {holder.pid})" in out.stderr
        assert os.listdir(place) == []
    finally:
        holder.kill()
        holder.wait()
    assert _in_process(capsys, str(root), *SHORT, "--data.rounds=8", *flags).returncode == 0  # let go: it runs


@pytest.mark.parametrize(
    "extra,message",
    [
        (
            ["--data.rounds=8"],
            "data.rounds: the checkpoint holds a run of 16 rounds; resuming can go on to more rounds, not fewer",
        ),
        (["--data.rounds=24", "--model=VACDB"], "data.rounds: VACDB depends on the horizon T"),
    ],
)
def test_a_horizon_that_cannot_go_on_exactly_is_refused(tmp_path, extra, message, capsys):
    root = str(tmp_path / "run")
    model = ["--model=VACDB"] if "--model=VACDB" in extra else []
    _made(root, *SHORT, "--data.rounds=16", *model)
    out = _in_process(capsys, root, *SHORT, *extra, "--ckpt_path=last")
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
