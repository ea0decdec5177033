"""Checkpoint writes: a full disk or a kernel refusal mid-run (one line, the last whole checkpoint kept), in place
not through the system's temporary folder, a folder that cannot be made, an asynchronous writer refused."""

import os
import signal
import subprocess

import pytest

from tests.helpers.runs import ARGS, SHORT, _cmd, _curve_rows, _in_process, _made, _per_seed, _rounds_in


def test_a_checkpoint_the_disk_cannot_hold_stops_the_run_in_one_line_and_keeps_the_last(tmp_path, monkeypatch, capsys):
    """A full disk (ENOSPC) at the round-16 save: one error line naming the file, the round and the round
    kept, exit 1; the part-written file removed, last.ckpt still round 8; once there is room the run goes
    on from it to the uninterrupted run's results."""
    import errno

    from nvldb_pl.cli import run_cli

    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    _made(full, *SHORT)
    import builtins

    import nvldb_pl.machinery.checkpoint as checkpoint_module

    saves = []

    class FillingUp:  # a checkpoint file on a disk that fills up at the second save, part of it written
        def __init__(self, path, mode):
            self.fh = builtins.open(path, mode)

        def write(self, data):
            if len(saves) < 2:
                return self.fh.write(data)
            self.fh.write(bytes(data)[:1000])
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    def open_checkpoint(path, mode="r"):
        saves.append(path)
        return FillingUp(path, mode)

    monkeypatch.setattr(checkpoint_module, "open", open_checkpoint, raising=False)  # the module's own open()
    code = run_cli([*ARGS, f"--trainer.default_root_dir={cut}", *SHORT, "--trainer.enable_progress_bar=true"])
    err = capsys.readouterr().err
    last = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    assert code == 1 and "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if "error:" in line]
    assert lines == [
        f"error: checkpoint: {last} cannot be written at round 16 (No space left on device); the run "
        f"stops there, and {last} still holds round 8: make room, then go on with --ckpt_path last"
    ]
    assert sorted(os.listdir(os.path.dirname(last))) == ["last.ckpt"] and _rounds_in(last) == 8  # no .tmp left
    monkeypatch.delattr(checkpoint_module, "open")
    _made(cut, *SHORT, "--ckpt_path=last")
    assert _per_seed(cut) == _per_seed(full) and _curve_rows(cut) == _curve_rows(full)


def test_a_run_file_the_disk_cannot_hold_is_named_and_the_old_one_kept(tmp_path):
    import errno

    from nvldb_pl.machinery.host import CannotWrite, atomic_open

    path = tmp_path / "summary.json"
    path.write_text("{}")
    with pytest.raises(
        CannotWrite,
        match=f"^{path}: cannot be written \\(No space left on device\\); the file it would replace is kept as it was$",
    ) as caught:
        with atomic_open(str(path)) as fh:
            fh.write("{\"seeds\": ")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, OSError)  # `except OSError` still takes it
    assert path.read_text() == "{}" and os.listdir(tmp_path) == ["summary.json"]


def test_a_write_the_kernel_refuses_at_a_checkpoint_stops_the_run_in_one_line(tmp_path):
    """A real write error, as a full disk gives: here a file may not grow past 4 kB (RLIMIT_FSIZE, EFBIG),
    and a checkpoint is 33 kB. torch's zip writer, writing to the file itself, turns that into a
    RuntimeError ("unexpected pos 64 vs 0", as at a full tmpfs): the checkpoint is serialized in memory
    and written by Python."""
    import resource

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4_000, 4_000))

    root = tmp_path / "run"
    out = subprocess.run(_cmd(str(root), *SHORT), capture_output=True, text=True, timeout=600, preexec_fn=small_files)
    folder = root / "lightning_logs" / "version_0" / "checkpoints"
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert (
        f"error: checkpoint: {folder / 'last.ckpt'} cannot be written at round 8 (File too large); the run stops "
        f"there, and no round was saved before it: once it can be written, go on with --ckpt_path last"
    ) in out.stderr
    assert list(folder.iterdir()) == []  # no part-written file


def test_a_checkpoint_is_written_in_place_not_through_the_system_s_temporary_folder(tmp_path, monkeypatch):
    """Lightning's own writer goes through $TMPDIR and moves the file: a second copy of every checkpoint,
    and a save that fails when that folder is full though the run's disk has room."""
    import tempfile

    tiny = tmp_path / "tmpdir"
    tiny.mkdir()
    monkeypatch.setenv("TMPDIR", str(tiny))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    files_made = []
    real_mkstemp = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda *a, **k: files_made.append(1) or real_mkstemp(*a, **k))
    from nvldb_pl.cli import run_cli

    assert run_cli([*ARGS, f"--trainer.default_root_dir={tmp_path / 'run'}", *SHORT]) == 0
    assert (
        files_made == []
        and _rounds_in(tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt") == 24
    )


def test_a_checkpoint_folder_that_cannot_be_made_is_refused_before_anything_is_written(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    root = tmp_path / "run"
    out = _in_process(capsys, str(root), *SHORT, f"--checkpoint.dirpath={tmp_path / 'afile' / 'ckpts'}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert (
        f"error: checkpoint.dirpath: {tmp_path / 'afile' / 'ckpts'} cannot be made: {tmp_path / 'afile'} is a "
        f"file, not a folder" in out.stderr
    )
    assert [p for p in root.rglob("*") if p.is_file()] == []  # (before, the run failed at its first save, rounds later)


def test_an_error_mid_run_starts_a_line_of_its_own_after_the_progress_bar():
    import io

    from tqdm import tqdm

    from nvldb_pl.machinery.messages import end_progress_line

    out = io.StringIO()
    bar = tqdm(total=10, file=out)
    bar.update(3)
    end_progress_line()
    assert out.getvalue().endswith("\n") and bar.disable  # closed: its line ended


def test_an_asynchronous_checkpoint_writer_is_refused_before_anything_is_written(tmp_path, capsys):
    """AsyncCheckpointIO returns before the file is written; the round's checkpoint was renamed at once
    (before: a raw 'No such file' for last.ckpt.tmp at the first save)."""
    root = tmp_path / "run"
    out = _in_process(capsys, str(root), *SHORT, "--trainer.plugins=lightning.pytorch.plugins.io.AsyncCheckpointIO")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "error: trainer.plugins: AsyncCheckpointIO writes a checkpoint in another thread" in out.stderr
    assert [p for p in root.rglob("*") if p.is_file()] == []
