"""The machine's cores shared by the runs on it (nvldb_pl/machinery/cores.py): each auto run's share, dead runs
not counted, and a run's results independent of its thread count (so that the share changes only its speed)."""

import os
import signal
import subprocess
import sys

import pytest
import torch

from nvldb_pl.machinery.cores import AUTO, SharedCores

HOLD = (
    "import sys, time\n"
    "from nvldb_pl.machinery.cores import SharedCores\n"
    "c = SharedCores(sys.argv[2] if sys.argv[2] == 'auto' else int(sys.argv[2]), 4, sys.argv[1])\n"
    "c.join()\n"
    "print('joined', flush=True)\n"
    "time.sleep(60)\n"
)


def _other_run(folder, threads):
    """A process registered as a run (``threads``: 'auto' or a count) until it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), str(threads)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "joined"
    return proc


def _share(folder, cores=4, start=4):
    me = SharedCores(AUTO, start, str(folder), cores=cores, every_s=0)
    me.join()
    try:
        return me.share()
    finally:
        me.leave()


def _registered(folder, threads):
    """Another run's registration, held in this process (a lock on another open file is held against this one's)."""
    other = SharedCores(threads, 4, str(folder), cores=4)
    other.join()
    return other


def test_an_auto_run_takes_its_share_of_what_the_fixed_runs_leave(tmp_path):
    assert _share(tmp_path) == 4  # alone: every core it started with
    assert _share(tmp_path, start=2) == 2  # never more than it started with
    others = [_registered(tmp_path, AUTO)]
    try:
        assert _share(tmp_path) == 2  # two auto runs on 4 cores
        others.append(_registered(tmp_path, 1))
        assert _share(tmp_path) == 1  # (4 - 1) // 2
        others.append(_registered(tmp_path, 3))
        assert _share(tmp_path) == 1  # nothing left: still one thread
    finally:
        for o in others:
            o.leave()
    assert _share(tmp_path) == 4 and os.listdir(tmp_path) == []


def test_a_killed_run_is_not_counted_and_its_file_goes(tmp_path):
    other = _other_run(tmp_path, "auto")
    assert _share(tmp_path) == 2
    os.kill(other.pid, signal.SIGKILL)
    other.wait()
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".run")]) == 1  # left behind by the kill
    assert _share(tmp_path) == 4
    assert [f for f in os.listdir(tmp_path) if f.endswith(".run")] == []


def test_a_run_that_leaves_removes_its_file_and_a_fixed_run_keeps_its_count(tmp_path):
    fixed = SharedCores(3, 3, str(tmp_path), cores=4)
    fixed.join()
    assert fixed.share() == 3 and len(os.listdir(tmp_path)) == 1
    assert _share(tmp_path) == 1
    fixed.leave()
    assert os.listdir(tmp_path) == []


def test_a_folder_that_cannot_be_written_shares_nothing_and_fails_nothing(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    c = SharedCores(AUTO, 2, str(blocked / "runs"), cores=4, every_s=0)
    c.join()
    assert c.share() == 2
    c.leave()


def test_a_bad_thread_setting_is_refused():
    with pytest.raises(ValueError, match="threads: 'auto' or an integer >= 1"):
        SharedCores(0, 2)


def test_a_run_beside_another_takes_fewer_threads_and_its_summary_says_so(tmp_path, monkeypatch):
    """The run's own registration from run_experiment (threads auto, a problem large enough for torch's count), on
    a machine of 2 cores with another run holding one: it starts with 2 threads and goes down to 1."""
    from nvldb_pl.loop.run import run_experiment
    import nvldb_pl.machinery.cores as cores

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("NVLDB_RUNS_DIR", str(tmp_path))
    monkeypatch.setattr(cores, "machine_cores", lambda: 2)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    other = _other_run(tmp_path, 1)
    try:
        data = {"task": "cos", "rounds": 20, "num_seeds": 2}
        summary, _ = run_experiment(data, {"network": {"width": 500}, "grad_steps": 1}, threads="auto")
    finally:
        other.kill()
        other.wait()
        after = torch.get_num_threads()
        torch.set_num_threads(before)
    assert summary["cpu_threads"] == [2, 1]
    assert after == 2  # given back when the run ends


def test_a_seeds_results_do_not_depend_on_the_thread_count():
    """What makes the share safe: the per-seed regret with one thread and with two is the same, bit for bit, at a
    width where torch splits the products over threads."""
    from nvldb_pl.loop.run import run_experiment

    before = torch.get_num_threads()
    runs = []
    try:
        for n in (1, 2):
            summary, _ = run_experiment(
                {"task": "cos", "rounds": 30, "num_seeds": 3}, {"network": {"width": 300}}, threads=n
            )
            runs.append([s["cum_avg_regret"] for s in summary["seeds"]])
            assert summary["cpu_threads"] == n
    finally:
        torch.set_num_threads(before)
    assert runs[0] == runs[1]
