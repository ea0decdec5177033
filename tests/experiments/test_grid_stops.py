"""A grid stopped (Ctrl-C, SIGTERM, a killed job, a damaged save) goes on from its checkpoint to the run it would
have been; the diagnostic scripts stopped by Ctrl-C end in one line."""

import glob
import json
import os

import pytest

from tests.helpers.script_loader import load_script as _script


def _main(argv):
    return _script("reproduce").main(argv)


def test_feature_trace_follows_the_ordinary_run_and_refuses_bad_input(tmp_path, capsys):
    """lab/diagnostics/feature_trace.py: its run is the method's run of that seed (the same regret and live units at the
    end); a baseline without a network, or an existing --out, is refused naming the flag."""
    from nvldb_pl.loop.run import run_experiment

    trace = _script("diagnostics/feature_trace")
    out = str(tmp_path / "trace.jsonl")
    argv = [
        "--task",
        "cos",
        "--seed",
        "3",
        "--rounds",
        "40",
        "--every",
        "20",
        "--probe",
        "10",
        "--set",
        "network.width=8",
        "grad_steps=2",
        "--out",
        out,
    ]
    assert trace.main(argv) == 0
    rows = [json.loads(line) for line in open(out)]
    assert [r["t"] for r in rows] == [20, 40]
    summary, _ = run_experiment(
        {"task": "cos", "rounds": 40, "num_seeds": 2, "first_seed_id": 2}, {"network": {"width": 8}, "grad_steps": 2}
    )
    assert rows[-1]["cum_avg_regret"] == summary["seeds"][1]["cum_avg_regret"]
    assert rows[-1]["live_units_history"] == summary["seeds"][1]["live_feature_units"]
    assert 0 <= rows[-1]["probe_best_arm"] <= 1 and rows[-1]["probe_greedy_regret"] >= 0
    for bad, flag in ((["--method", "CoLSTIM"], "--method"), ([], "--out")):
        with pytest.raises(SystemExit):
            trace.main(argv[:-2] + ["--out", out] + bad)
        assert flag in capsys.readouterr().err
    # a refused value is named before --out is made: no empty file is left to block the next call
    fresh = str(tmp_path / "fresh.jsonl")
    for bad, said in (
        (["--seed", "-1"], "--seed: must be >= 0, got -1"),
        (["--task", "sine"], "--task: unknown 'sine'"),
        (["--set", "widht=3"], "--set: ['widht'] is not an argument of NVLDB"),
        (["--set", "network.width=0"], "model.network.width: must be an integer >= 1, got 0"),
    ):
        with pytest.raises(SystemExit):
            trace.main(argv[:-2] + ["--out", fresh] + bad)
        assert said in capsys.readouterr().err and not os.path.exists(fresh)


def test_ctrl_c_in_a_trace_or_a_benchmark_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    """A Ctrl-C inside a run ended in Lightning's sys.exit(1) without a word, and feature_trace.py left an empty
    --out that blocked the next call. Now one line and 130; a trace keeps the lines written before."""
    trace, bench = _script("diagnostics/feature_trace"), _script("benchmark")
    out = tmp_path / "trace.jsonl"

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(trace, "run_experiment", cut)
    argv = ["--task", "cos", "--rounds", "40", "--out", str(out)]
    assert trace.main(argv) == 130
    assert capsys.readouterr().err == "feature_trace.py: stopped by Ctrl-C\n" and not out.exists()

    def cut_after_a_line(*args, callbacks=(), **kwargs):
        callbacks[0].fh.write('{"t": 10}\n')
        raise KeyboardInterrupt

    monkeypatch.setattr(trace, "run_experiment", cut_after_a_line)
    assert trace.main(argv) == 130
    assert f"stopped by Ctrl-C; {out} keeps the lines written before" in capsys.readouterr().err
    assert out.read_text() == '{"t": 10}\n'
    monkeypatch.setattr(bench, "benchmark", cut)
    monkeypatch.setattr("sys.argv", ["benchmark.py", "--rounds", "3"])
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 130 and capsys.readouterr().err == "benchmark.py: stopped by Ctrl-C\n"


class _StopAt:
    """run_experiment with a callback that sends ``signum`` ``times`` times at the start of round ``at`` (the first
    call only; :class:`tests.loop.test_stops.SignalAt`), or raises there (``signum`` None: a job killed without a word)."""

    def __init__(self, run_experiment, at, signum, times=1):
        self.run, self.at, self.signum, self.times, self.calls = run_experiment, at, signum, times, 0

    def __call__(self, *args, **kwargs):
        import lightning.pytorch as pl

        from tests.loop.test_stops import SignalAt

        at = self.at

        class Killed(pl.Callback):
            def on_train_batch_start(self, trainer, module, batch, batch_idx):
                if int(batch["round"]) == at:
                    raise RuntimeError("killed")

        self.calls += 1
        stop = Killed() if self.signum is None else SignalAt(at, self.times, int(self.signum))
        return self.run(*args, **kwargs, callbacks=(stop,) if self.calls == 1 else ())


@pytest.mark.parametrize("how", ["Ctrl-C", "SIGTERM", "killed", "Ctrl-C twice"])
def test_a_stopped_grid_run_goes_on_from_its_checkpoint_to_the_run_it_would_have_been(
    tmp_path, capsys, monkeypatch, how
):
    """reproduce.py stopped by Ctrl-C exited 1 without a word (Lightning's exit inside fit), and every run of the
    grid, hours at full size, started over from round 1. Now a signal stops the run at the end of the round,
    saved, and the same command goes on from there; a killed run goes on from its last save."""
    import signal

    from nvldb_pl.experiments import grid

    argv = [
        "--rounds",
        "30",
        "--seeds",
        "2",
        "--tasks",
        "cos",
        "--methods",
        "Random",
        "NVLDB-UCB-ASYM",
        "--set",
        "network.width=8",
        "grad_steps=2",
    ]
    assert _main(["--out", str(tmp_path / "ref"), *argv]) == 0
    monkeypatch.setattr(grid, "CHECKPOINT_EVERY", 10)
    signum = {"Ctrl-C": signal.SIGINT, "SIGTERM": signal.SIGTERM, "killed": None, "Ctrl-C twice": signal.SIGINT}[how]
    monkeypatch.setattr(grid, "run_experiment", _StopAt(grid.run_experiment, 17, signum, 1 + (how == "Ctrl-C twice")))
    out = str(tmp_path / "cut")
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (pytest may ignore it)
    capsys.readouterr()
    try:
        if signum is None:
            with pytest.raises(RuntimeError, match="killed"):
                _main(["--out", out, "--methods", "NVLDB-UCB-ASYM", *argv[:6], *argv[-3:]])
        else:
            assert _main(["--out", out, "--methods", "NVLDB-UCB-ASYM", *argv[:6], *argv[-3:]]) == 128 + signum
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Lightning's Ctrl-C left it ignored
    finally:
        signal.signal(signal.SIGINT, outside)
    folder = os.path.join(out, "runs", "cos", "NVLDB-UCB-ASYM", "lightning_logs", "version_0")
    saved = 10 if signum is None or "twice" in how else 17  # killed, or stopped at once: its last save
    if how == "Ctrl-C twice":  # the second one stops at once (Lightning's sys.exit(1) inside fit, without a word)
        assert (
            "stopped by Ctrl-C; the finished runs are kept, and a stopped run goes on from its last save"
            in capsys.readouterr().err
        )
    elif signum is not None:
        assert (
            f"stopped by {how}: cos NVLDB-UCB-ASYM at round 17, saved in {folder}/checkpoints/last.ckpt; the "
            f"finished runs are kept, and the same command goes on from there"
        ) in capsys.readouterr().err
    if how == "SIGTERM":  # a checkpoint made on another device: not gone on from (the run would equal neither)
        import shutil

        import torch

        other = os.path.join(str(tmp_path / "other"), "runs", "cos", "NVLDB-UCB-ASYM", "lightning_logs")
        shutil.copytree(os.path.dirname(folder), other)
        ckpt = torch.load(os.path.join(other, "version_0", "checkpoints", "last.ckpt"), weights_only=False)
        assert ckpt["accelerator"] == "cpu"
        torch.save({**ckpt, "accelerator": "cuda"}, os.path.join(other, "version_0", "checkpoints", "last.ckpt"))
        assert _main(["--out", str(tmp_path / "other"), "--methods", "NVLDB-UCB-ASYM", *argv[:6], *argv[-3:]]) == 0
        assert "[go on]" not in capsys.readouterr().out and os.path.isdir(os.path.join(other, "version_1"))
    assert _main(["--out", out, *argv]) == 0  # the same grid again (with one more method): the stopped run goes on
    log = capsys.readouterr().out
    assert f"[go on] cos        NVLDB-UCB-ASYM   from round {saved} ({folder}/checkpoints/last.ckpt)" in log
    assert f"(rounds {saved + 1}-30)" in log and not os.path.exists(os.path.join(os.path.dirname(folder), "version_1"))
    ref = os.path.join(str(tmp_path / "ref"), "runs", "cos", "NVLDB-UCB-ASYM", "lightning_logs", "version_0")
    mine, theirs = (json.load(open(os.path.join(f, "summary.json"))) for f in (folder, ref))
    assert mine["seeds"] == theirs["seeds"] and mine["resumed_at_round"] == saved  # per seed, to the bit
    assert open(os.path.join(folder, "curves.csv")).read() == open(os.path.join(ref, "curves.csv")).read()
    assert f"(rounds {saved + 1}-30) |" in open(os.path.join(out, "report.md")).read()
    assert not glob.glob(os.path.join(out, "runs", "*", "*", "*", "*", "checkpoints"))  # finished: no checkpoints kept


def test_a_stopped_grid_run_that_another_process_is_running_is_not_gone_on_with_twice(tmp_path, capsys, monkeypatch):
    """Two grids started at once with a method in common: the second would have gone on with the run the first
    was going on with, two processes writing one folder. A run holds its folder (an flock) while it runs."""
    import signal

    from nvldb_pl.experiments import grid
    from nvldb_pl.machinery.host import hold_folder
    from nvldb_pl.loop.run import run_experiment

    monkeypatch.setattr(grid, "CHECKPOINT_EVERY", 10)
    monkeypatch.setattr(grid, "run_experiment", _StopAt(grid.run_experiment, 17, signal.SIGTERM))
    out = str(tmp_path / "rep")
    argv = [
        "--out",
        out,
        "--rounds",
        "30",
        "--seeds",
        "1",
        "--tasks",
        "cos",
        "--methods",
        "NVLDB-UCB-ASYM",
        "--set",
        "network.width=8",
        "grad_steps=2",
    ]
    assert _main(argv) == 128 + signal.SIGTERM
    logs = os.path.join(out, "runs", "cos", "NVLDB-UCB-ASYM", "lightning_logs")
    held = hold_folder(os.path.join(logs, "version_0"))  # as the other process would, going on with it
    assert held is not None and hold_folder(os.path.join(logs, "version_0")) is None
    try:
        capsys.readouterr()
        assert _main(argv) == 0
        assert "[go on]" not in capsys.readouterr().out and os.path.isdir(os.path.join(logs, "version_1"))
        with pytest.raises(ValueError, match="another process is running this run now"):
            run_experiment(
                {"task": "cos", "rounds": 30, "num_seeds": 1},
                {"network": {"width": 8}, "grad_steps": 2},
                root_dir=os.path.dirname(logs),
                checkpoint_every=10,
                resume=(0, os.path.join(logs, "version_0", "checkpoints", "last.ckpt")),
            )
    finally:
        held.close()
    assert not os.path.exists(os.path.join(logs, "version_1", ".lock"))  # a finished run leaves no lock file
    assert hold_folder(os.path.join(logs, "version_0")) is not None  # let go: a later grid goes on with it


def test_a_grid_run_whose_last_save_is_damaged_goes_on_from_the_one_before_saying_so_without_a_flag(
    tmp_path, capsys, monkeypatch
):
    """A job killed while it wrote last.ckpt: the grid goes on from last.ckpt.prev and says so. The line named
    ``ckpt_path:``, an option reproduce.py does not have; it now names only the files."""
    from nvldb_pl.experiments import grid

    argv = [
        "--rounds",
        "30",
        "--seeds",
        "1",
        "--tasks",
        "cos",
        "--methods",
        "NVLDB-UCB-ASYM",
        "--set",
        "network.width=8",
        "grad_steps=2",
    ]
    assert _main(["--out", str(tmp_path / "ref"), *argv]) == 0
    monkeypatch.setattr(grid, "CHECKPOINT_EVERY", 5)
    monkeypatch.setattr(grid, "run_experiment", _StopAt(grid.run_experiment, 17, None))
    out = str(tmp_path / "cut")
    with pytest.raises(RuntimeError, match="killed"):
        _main(["--out", out, *argv])
    last = os.path.join(out, "runs", "cos", "NVLDB-UCB-ASYM", "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    with open(last, "r+b") as f:  # cut off mid-write
        f.truncate(os.path.getsize(last) // 2)
    capsys.readouterr()
    assert _main(["--out", out, *argv]) == 0
    said = capsys.readouterr()
    assert f"{last} cannot be read (" in said.err and f"resuming from the previous checkpoint {last}.prev" in said.err
    assert "ckpt_path" not in said.err
    assert f"from round 10 ({last}.prev)" in said.out  # the save before the last (every 5 rounds: 10, then 15)
    mine, theirs = (
        json.load(
            open(os.path.join(root, "runs", "cos", "NVLDB-UCB-ASYM", "lightning_logs", "version_0", "summary.json"))
        )
        for root in (out, str(tmp_path / "ref"))
    )
    assert mine["seeds"] == theirs["seeds"] and mine["resumed_at_round"] == 10


def test_ctrl_c_in_a_diagnostic_script_is_one_line_and_exit_130_not_a_traceback(capsys):
    """gpu_drift.py, gpu_profile.py, ... ended a Ctrl-C in a KeyboardInterrupt traceback (or, inside fit, in
    Lightning's silent exit 1). Every script's entry now goes through one helper; other exits pass through."""
    import sys

    from nvldb_pl.loop.run import stop_at_ctrl_c_in_one_line

    def interrupted():
        raise KeyboardInterrupt

    def lightning_inside_fit():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            sys.exit(1)

    for main in (interrupted, lightning_inside_fit):
        with pytest.raises(SystemExit) as stop:
            stop_at_ctrl_c_in_one_line(main, "gpu_drift.py")
        assert stop.value.code == 130 and capsys.readouterr().err == "gpu_drift.py: stopped by Ctrl-C\n"
    with pytest.raises(SystemExit) as stop:  # argparse's own refusal: its status, not a Ctrl-C
        stop_at_ctrl_c_in_one_line(lambda: sys.exit(2), "gpu_drift.py")
    assert stop.value.code == 2 and capsys.readouterr().err == ""
    scripts = os.path.join(os.path.dirname(__file__), "..", "..", "lab", "diagnostics")
    for name in ("gpu_capture_probe", "gpu_drift", "gpu_profile", "gpu_wait_finder", "benchmark_horizon"):
        source = open(os.path.join(scripts, f"{name}.py")).read()
        assert source.endswith(f'if __name__ == "__main__":\n    stop_at_ctrl_c_in_one_line(main, "{name}.py")\n')


def test_a_sweep_stopped_by_sigterm_exits_143_saying_what_finished(tmp_path):
    """nvldb-sweep stopped by SIGTERM (a cluster's time limit) exited 0 with nothing on stderr and half its rows
    written: Lightning's answer to SIGTERM inside fit is a SystemExit without a code. Now: exit 143, a line naming
    the run cut short and the rows kept, and the finished runs' rows only; the same command goes on from there."""
    import signal
    import subprocess
    import sys
    import time

    out = str(tmp_path / "rows.jsonl")
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    argv = [sys.executable, os.path.join(root, "scripts", "sweep.py"), "--rounds", "300", "--seeds", "2"]
    argv += ["--tasks", "square", "cos", "--grid", '[{"network": {"width": 8}}]', "--out", out]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not (os.path.exists(out) and os.path.getsize(out)):
        time.sleep(0.2)
    time.sleep(1.0)  # the second run under way
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=240)
    assert p.returncode == 143, err[-2000:]
    assert 'stopped by SIGTERM: cos {"network": {"width": 8}} was cut short and is not written' in err
    assert "the runs finished (1 in this call)" in err
    rows = [json.loads(line) for line in open(out)]
    assert [r["task"] for r in rows] == ["square"]
