"""The GPU diagnostic scripts run on a CPU: the drift script (two CPU runs, batch sizes), the capture probe and its
mends, the wait finder; each without a GPU says so in one line."""

import os
import subprocess
import sys

import pytest

from tests.helpers.script_loader import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_gpu_drift_script_finds_no_difference_between_two_cpu_runs_nor_between_batch_sizes():
    res = subprocess.run(
        [sys.executable, os.path.join(ROOT, "lab", "diagnostics", "gpu_drift.py"), "--other", "cpu"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    rows = [line.split() for line in lines[1:5]]  # CPU against CPU, four variants of the update
    assert all(r[-4:] == ["True", "0.00e+00", "0.00e+00", "0.00e+00"] for r in rows), res.stdout
    seeds = [line.split() for line in lines[lines.index("") + 3 :]]  # S=4 against four S=1 runs
    assert [r[0] for r in seeds] == ["chunked"] * 2, res.stdout  # auto is chunked on a CPU
    assert all(r[1:] == ["True", "0.00e+00", "0.00e+00", "0.00e+00"] for r in seeds), res.stdout
    # the pass a row names is the one its runs took on that device (read from a learner after its run, it was
    # the CPU's: Lightning's teardown moves it back there, and the H200's graphed row read chunked/chunked)
    drift = load_script("diagnostics/gpu_drift")
    assert drift.passes("auto", "gpu") == "graphed" and drift.passes("auto", "cpu") == "chunked"
    assert drift.passes("chunked", "gpu") == "chunked"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA GPU is visible")
def test_the_gpu_drift_script_without_a_gpu_says_so_in_one_line():
    res = subprocess.run(
        [sys.executable, os.path.join(ROOT, "lab", "diagnostics", "gpu_drift.py"), "--other", "gpu"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "error: --other gpu: torch sees no CUDA GPU here" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA GPU is visible")
def test_the_gpu_capture_probe_without_a_gpu_says_so_in_one_line():
    res = subprocess.run(
        [sys.executable, os.path.join(ROOT, "lab", "diagnostics", "gpu_capture_probe.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "error: device='gpu': torch sees no CUDA GPU here" in res.stderr
    assert "Traceback" not in res.stderr


def test_the_capture_probe_reports_torchs_error_where_the_package_wraps_it(monkeypatch):
    """A failed capture reaches a run as graphs.CaptureFailed (one line naming the setting); the probe's line gives
    torch's error under it, the one that says which operation broke the capture."""
    from nvldb_pl.machinery import graphs

    def broken(self, fn):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs.CapturedSteps, "_warm_up", lambda self, fn: fn())
    monkeypatch.setattr(graphs.CapturedSteps, "_capture", broken)
    probe = load_script("diagnostics/gpu_capture_probe")
    with pytest.raises(graphs.CaptureFailed) as caught:
        graphs.CapturedSteps()("rows", lambda: None)
    line = probe.failure(caught.value)  # at the package's last frame before torch's (here the capture's call)
    assert line.startswith(
        "FAILED RuntimeError: CUDA error: operation not permitted when stream is capturing at graphs.py:"
    )


def test_the_capture_probes_mends_compute_the_same_and_are_undone_after():
    """Each candidate mend of the one-seed capture (lab/diagnostics/gpu_capture_probe.py) keeps seedwise's one-seed
    products what they were, and leaves the package as it found it."""
    import torch

    from nvldb_pl.machinery import graphs

    from nvldb_pl.maths import seedwise

    probe = load_script("diagnostics/gpu_capture_probe")

    def patched():  # what a mend may replace
        return (
            seedwise._two,
            seedwise.bmm,
            seedwise.einsum,
            seedwise.cholesky_ex,
            seedwise.solve_triangular,
            graphs.CapturedSteps.error_mode,
        )

    before = patched()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1, 6, 4, generator=g), torch.randn(1, 4, 3, generator=g)
    w, H = torch.rand(1, 4, generator=g), torch.eye(3).mul(2).unsqueeze(0)
    for how in probe.MENDS:
        with probe.mend(how):
            assert torch.allclose(seedwise.bmm(a, b), a @ b), how
            assert torch.allclose(seedwise.einsum("st,std,ste->sde", w, b, b), (b.mT * w.unsqueeze(1)) @ b), how
            assert torch.allclose(seedwise.cholesky_ex(H)[0], H.sqrt()), how
            assert graphs.CapturedSteps.error_mode == (how if how in ("thread_local", "relaxed") else "global")
            assert (patched() != before) == (how != "as is"), how
        assert patched() == before, how


@pytest.mark.slow  # a GPU diagnostic, run on a CPU
def test_the_gpu_wait_finder_prints_host_times_and_finds_the_stall_on_a_cpu():
    """On a CPU the stall is a host sleep in the stalling callback: its own row must grow by about the stall."""
    res = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "lab", "diagnostics", "gpu_wait_finder.py"),
            "--device",
            "cpu",
            "--seeds",
            "2",
            "--rounds",
            "16",
            "--from-round",
            "6",
            "--stall-ms",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    rows = {line[:72].strip(): line[72:].split() for line in res.stdout.splitlines()[2:]}
    plain, stalled, grew = map(float, rows["[Callback]Stall.on_train_batch_start"])
    assert plain < 1 and 19 < grew < 40, res.stdout
    assert "[Strategy]SingleDeviceStrategy.training_step" in rows, res.stdout
