"""Runs that stop before their horizon and go on exactly: a time limit (trainer.max_time), Ctrl-C, SIGTERM,
SLURM's requeue signal; and the handlers they leave."""

import glob
import json
import os
import shutil
import signal
import sys
from typing import Optional

import lightning.pytorch as pl
import pytest

from nvldb_pl.machinery.checkpoint import RoundCheckpoint
from tests.helpers.runs import short_args, ARGS, SHORT, _curve_rows, _files, _in_process, _per_seed, _rounds_in


class _Clock:
    """time.monotonic for Lightning's Timer: one second per call (a call a round), so the stop is
    deterministic."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        self.now += 1.0
        return self.now


def test_a_run_stopped_by_max_time_saves_its_round_and_goes_on_exactly(tmp_path, monkeypatch, capsys, recwarn):
    from lightning.pytorch.callbacks import timer

    from nvldb_pl.cli import run_cli

    short = [*ARGS, "--data.rounds=60", "--checkpoint.every_n_rounds=25"]
    ref, cut = str(tmp_path / "ref"), str(tmp_path / "cut")
    assert run_cli([*short, f"--trainer.default_root_dir={ref}"]) == 0
    monkeypatch.setattr(timer, "time", _Clock())
    assert run_cli([*short, f"--trainer.default_root_dir={cut}", "--trainer.max_time=00:00:00:40"]) == 0
    ckpt = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    stopped = _rounds_in(ckpt)
    assert 30 < stopped < 50 and stopped % 25 != 0  # saved at the round it stopped, not at the last multiple of 25
    assert f"stopped at round {stopped} of data.rounds=60; {ckpt} holds round {stopped}" in capsys.readouterr().err
    assert json.load(open(os.path.join(cut, "lightning_logs", "version_0", "summary.json")))["rounds"] == stopped
    # the same command again (a requeued job): its limit is spent, and Lightning would skip every round and exit 0
    before = _files(tmp_path / "cut")
    monkeypatch.setattr(timer, "time", _Clock())
    assert (
        run_cli([*short, f"--trainer.default_root_dir={cut}", "--trainer.max_time=00:00:00:40", "--ckpt_path=last"])
        == 2
    )
    err = capsys.readouterr().err
    assert "error: trainer.max_time: the earlier parts of this run have used 0:00:4" in err, err[-2000:]
    assert (
        f"of its 0:00:40 (Lightning counts max_time over every part of a run), so no round would be played; to go on "
        f"from round {stopped}, give a larger one, or none" in err
    )
    assert _files(tmp_path / "cut") == before
    monkeypatch.undo()
    recwarn.clear()
    assert run_cli([*short, f"--trainer.default_root_dir={cut}", "--ckpt_path=last"]) == 0  # no max_time now
    assert not [w for w in recwarn if "callbacks used to create the checkpoint" in str(w.message)]  # Timer's
    assert _per_seed(cut) == _per_seed(ref)
    assert _curve_rows(cut) == _curve_rows(ref)  # every round 1..60 once


def test_a_run_without_checkpoints_stopped_by_max_time_says_it_cannot_go_on(tmp_path, monkeypatch, capsys):
    from lightning.pytorch.callbacks import timer

    from nvldb_pl.cli import run_cli

    monkeypatch.setattr(timer, "time", _Clock())
    root = str(tmp_path / "run")
    assert (
        run_cli(
            short_args(
                root, "--data.rounds=60", "--trainer.max_time=00:00:00:40", "--trainer.enable_checkpointing=false"
            )
        )
        == 0
    )
    [summary] = glob.glob(os.path.join(root, "lightning_logs", "version_0", "summary.json"))
    stopped = json.load(open(summary))["rounds"]
    assert 30 < stopped < 50
    assert (
        f"stopped at round {stopped} of data.rounds=60; this run saves no checkpoint (trainer.enable_checkpointing "
        f"false), so it cannot go on: its summary holds the {stopped} rounds played"
    ) in capsys.readouterr().err
    assert not glob.glob(os.path.join(root, "**", "*.ckpt"), recursive=True)


@pytest.mark.parametrize("limit,shown", [("00:00:00:00", "0:00:00"), ('{"minutes": -1}', "-60 s")])
def test_a_time_limit_of_zero_or_less_is_refused_and_writes_nothing(tmp_path, capsys, limit, shown):
    out = _in_process(capsys, str(tmp_path / "run"), *SHORT, f"--trainer.max_time={limit}")
    assert out.returncode == 2
    assert (
        f"error: trainer.max_time: {shown} leaves no time to play a round; give a positive duration, or none"
        in out.stderr
    )
    assert not (tmp_path / "run").exists() or not [p for p in (tmp_path / "run").rglob("*") if p.is_file()]


class SignalAt(pl.Callback):
    """The signal ``signum`` (Ctrl-C's SIGINT, a cluster's SIGTERM) sent ``times`` times at the start of
    round ``at`` (in the process of global rank ``rank`` only, if given)."""

    def __init__(self, at: int = 1, times: int = 1, signum: int = int(signal.SIGINT), rank: Optional[int] = None):
        self.at, self.times, self.signum, self.rank = at, times, signum, rank

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if int(batch["round"]) == self.at and self.rank in (None, trainer.global_rank):
            for _ in range(self.times):
                signal.raise_signal(self.signum)


def _signal_at(at, times, signum, rank=None):
    return "--trainer.callbacks+=" + json.dumps(
        {
            "class_path": "tests.loop.test_stops.SignalAt",
            "init_args": {"at": at, "times": times, "signum": int(signum), "rank": rank},
        }
    )


@pytest.mark.parametrize("signum,name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_a_signal_stops_at_the_end_of_the_round_saves_it_and_goes_on_exactly(tmp_path, capsys, signum, name):
    from nvldb_pl.cli import run_cli

    short = [*ARGS, "--data.rounds=60", "--checkpoint.every_n_rounds=25"]
    ref, cut = str(tmp_path / "ref"), str(tmp_path / "cut")
    assert run_cli([*short, f"--trainer.default_root_dir={ref}"]) == 0
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (not ignored)
    try:
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        assert run_cli([*short, f"--trainer.default_root_dir={cut}", _signal_at(37, 1, signum)]) == 128 + signum
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # put back
    finally:
        signal.signal(signal.SIGINT, outside)
    ckpt = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    assert _rounds_in(ckpt) == 37  # round 37 finished and saved, not the last multiple of 25
    err = capsys.readouterr().err
    assert f"{name}: stopping at the end of this round" in err
    assert f"stopped at round 37 of data.rounds=60; {ckpt} holds round 37: go on with --ckpt_path last\n" in err
    assert run_cli([*short, f"--trainer.default_root_dir={cut}", "--ckpt_path=last"]) == 0
    assert _per_seed(cut) == _per_seed(ref)
    assert _curve_rows(cut) == _curve_rows(ref)


def test_sigterm_in_a_run_without_checkpoints_says_it_cannot_go_on(tmp_path, capsys):
    """No RoundCheckpoint: Lightning's own SIGTERM handling stops the run (143); the line says there is nothing to
    go on from (it said "go on from the last checkpoint")."""
    from nvldb_pl.cli import run_cli

    root = tmp_path / "run"
    code = run_cli(
        short_args(root, "--data.rounds=60", "--trainer.enable_checkpointing=false", _signal_at(20, 1, signal.SIGTERM))
    )
    assert code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert (
        "stopped by SIGTERM; this run saves no checkpoint (trainer.enable_checkpointing false), so it cannot go on"
    ) in err and "--ckpt_path last" not in err, err[-2000:]
    assert not list(root.rglob("*.ckpt"))


def test_ctrl_c_in_a_run_without_checkpoints_says_it_cannot_go_on(tmp_path, capsys):
    """No RoundCheckpoint: Lightning takes the Ctrl-C and exited 1, with only its info line "Detected
    KeyboardInterrupt, attempting graceful shutdown"; now 130, saying there is nothing to go on from."""
    from nvldb_pl.cli import run_cli

    root = tmp_path / "run"
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (not ignored)
    try:
        code = run_cli(
            short_args(
                root, "--data.rounds=60", "--trainer.enable_checkpointing=false", _signal_at(20, 1, signal.SIGINT)
            )
        )
    finally:
        signal.signal(signal.SIGINT, outside)
    assert code == 128 + signal.SIGINT
    err = capsys.readouterr().err
    assert (
        "stopped by Ctrl-C at once; this run saves no checkpoint (trainer.enable_checkpointing false), so it "
        "cannot go on"
    ) in err and "--ckpt_path last" not in err, err[-2000:]


SLURM_JOB = {
    "SLURM_NTASKS": "1",
    "SLURM_JOB_NAME": "nvldb",
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
}


def test_slurms_requeue_signal_stops_at_the_end_of_the_round_requeues_and_the_job_goes_on_exactly(
    tmp_path, capsys, monkeypatch
):
    """Under SLURM (``#SBATCH --signal=USR1@120``) Lightning's auto-requeue would save hpc_ckpt_N.ckpt
    from inside the signal handler, mid-round, and the requeued job would go on from it without a word.
    Here: the round ends, is saved, the job is requeued (a stand-in ``scontrol`` records the call), and
    the requeued command (with ``--ckpt_path last``) ends as the uninterrupted run."""
    from nvldb_pl.cli import run_cli

    short = [*ARGS, "--data.rounds=60", "--checkpoint.every_n_rounds=25"]
    ref, cut = str(tmp_path / "ref"), str(tmp_path / "cut")
    assert run_cli([*short, f"--trainer.default_root_dir={ref}"]) == 0
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol.calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for key, value in SLURM_JOB.items():
        monkeypatch.setenv(key, value)
    job = [*short, f"--trainer.default_root_dir={cut}", "--ckpt_path=last"]  # the batch script's command
    handler = signal.getsignal(signal.SIGUSR1)
    assert run_cli([*job, _signal_at(37, 1, signal.SIGUSR1)]) == 128 + signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) == handler  # put back
    ckpt = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    assert _rounds_in(ckpt) == 37 and not list(tmp_path.rglob("hpc_ckpt_*"))  # the round's end, not mid-round
    err = capsys.readouterr().err
    assert "SIGUSR1 (SLURM: the job's time is nearly up): stopping at the end of this round" in err
    assert "requeued SLURM job 4242" in err and calls.read_text() == "requeue 4242\n"
    assert run_cli(job) == 0  # the requeued job
    assert _per_seed(cut) == _per_seed(ref)
    assert _curve_rows(cut) == _curve_rows(ref)
    # an hpc_ckpt that Lightning's own auto-requeue wrote: a new run under SLURM is refused, not resumed from it
    shutil.copy(ckpt, os.path.join(cut, "hpc_ckpt_1.ckpt"))
    assert run_cli([*short, f"--trainer.default_root_dir={cut}"]) == 2
    assert "hpc_ckpt_1.ckpt is a checkpoint Lightning's SLURM auto-requeue wrote" in capsys.readouterr().err
    # without checkpoints, Lightning's auto-requeue is off too: no handler of its own for SLURM's signal in the run
    HandlerDuringRun.seen.clear()
    record = "--trainer.callbacks+=" + json.dumps({"class_path": "tests.loop.test_stops.HandlerDuringRun"})
    for extra in ([], ["--trainer.enable_checkpointing=false"]):
        assert (
            run_cli([*short, "--data.rounds=3", f"--trainer.default_root_dir={tmp_path / 'bare'}", *extra, record]) == 0
        )
    assert HandlerDuringRun.seen[0] == RoundCheckpoint._on_signal and HandlerDuringRun.seen[1] == handler


class HandlerDuringRun(pl.Callback):
    """Records what takes SIGUSR1 (SLURM's requeue signal) while the run plays its first round."""

    seen: list = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if int(batch["round"]) == 1:
            h = signal.getsignal(signal.SIGUSR1)
            HandlerDuringRun.seen.append(getattr(h, "__func__", h))


def test_an_ignored_sigint_stays_ignored(tmp_path):
    """A background job's SIGINT is ignored by its shell: the run keeps it so and plays every round."""
    from nvldb_pl.cli import run_cli

    outside = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert (
            run_cli(
                short_args(
                    tmp_path, "--data.rounds=40", "--checkpoint.every_n_rounds=25", _signal_at(30, 1, signal.SIGINT)
                )
            )
            == 0
        )
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, outside)
    assert _rounds_in(os.path.join(str(tmp_path), "lightning_logs", "version_0", "checkpoints", "last.ckpt")) == 40


# a second Ctrl-C raises KeyboardInterrupt at once (round 37 never ends: the checkpoint of round 25 stays; Lightning
# exits 1 then, which the CLI reports as a Ctrl-C: 130); a second SIGTERM goes to Lightning's handler, which stops
# at the end of round 37, already saved by the first
@pytest.mark.parametrize("signum,code,saved", [(signal.SIGINT, 130, 25), (signal.SIGTERM, 143, 37)])
def test_a_second_signal_goes_to_the_handler_from_before_the_run(tmp_path, signum, code, saved, capsys):
    from nvldb_pl.cli import run_cli

    cut = str(tmp_path / "cut")
    # Python's own Ctrl-C handler before the run (a process started in the background, as CI may start
    # pytest, inherits SIGINT ignored: then the second Ctrl-C is ignored too, rightly)
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        assert (
            run_cli(short_args(cut, "--data.rounds=60", "--checkpoint.every_n_rounds=25", _signal_at(37, 2, signum)))
            == code
        )
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    finally:
        signal.signal(signal.SIGINT, outside)
    assert _rounds_in(os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")) == saved
    if signum == signal.SIGINT:
        assert (
            "stopped by Ctrl-C at once; go on from the last checkpoint with --ckpt_path last" in capsys.readouterr().err
        )


@pytest.mark.parametrize("rank", [None, "1"])
def test_a_ctrl_c_at_once_is_said_by_the_first_process_only(monkeypatch, capsys, rank):
    """A terminal's Ctrl-C reaches every process of a seed_parallel run, and each printed the same line."""
    from nvldb_pl import cli

    def lightning_at_ctrl_c(argv):  # what Lightning does inside fit: sys.exit(1) while handling the interrupt
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            sys.exit(1)

    for k in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    if rank:
        monkeypatch.setenv("LOCAL_RANK", rank)
        monkeypatch.setenv("RANK", rank)
    monkeypatch.setattr(cli, "main", lightning_at_ctrl_c)
    monkeypatch.setattr(cli, "check_config_files", lambda argv: None)
    assert cli.run_cli(["fit"]) == 128 + signal.SIGINT
    assert ("stopped by Ctrl-C at once" in capsys.readouterr().err) == (rank is None)
