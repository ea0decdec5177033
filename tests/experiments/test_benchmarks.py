"""The benchmark scripts run and print what docs/performance.md says they print (not a timed test:
the figures themselves depend on the machine)."""

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from tests.helpers.script_loader import script_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _call(script, *args):
    """One script in its own process, one thread (two such run side by side on this machine's two cores)."""
    return subprocess.run(
        [sys.executable, script_path(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _run(script, *args):
    res = _call(script, *args)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _two_at_a_time(calls):
    """[(script, args)] -> their CompletedProcesses in the same order, two processes at a time (most of
    each is the import of torch and Lightning)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda c: _call(c[0], *c[1]), calls))


def test_benchmark_prints_rates_the_device_and_the_time_split():
    out = _run("benchmark.py", "--task", "cos", "--seeds", "2", "--rounds", "5", "--naive-seeds", "1")
    assert re.search(r"vectorized \[32-true, manual, relu\] on cpu: +[0-9.]+ seed-rounds/s", out), out
    shares = [
        float(x) for x in re.findall(r"^\s+(?:select|train|refit|gram|other \(.*\))\s+[0-9.]+s\s+([0-9.]+)%", out, re.M)
    ]
    assert len(shares) == 5 and abs(sum(shares) - 100) < 0.5, out  # the split covers the whole wall time
    assert re.search(r"naive per-seed loop: +[0-9.]+ seed-rounds/s", out) and "speed-up" in out


def test_benchmark_refuses_bad_settings_in_one_line_before_any_run():
    """Every precision is checked before the first timed run (a GPU session's minutes are not spent on
    the configs before a misspelt one), and a bad value ends in one error line, not a traceback."""
    cases = (
        (["--precision", "32-true", "64-true"], "error: --precision 64-true: choose"),
        (["--width", "0"], "error: model.network.width: must be an integer >= 1, got 0"),
        (["--blas", "cublaslt"], "error: --blas cublaslt: a CUDA setting, and this run is on the CPU"),
    )
    results = _two_at_a_time(
        [("benchmark.py", ["--rounds", "3", "--seeds", "2", "--naive-seeds", "0", *args]) for args, _ in cases]
        + [("diagnostics/benchmark_horizon.py", ["--rounds", "0"])]
    )
    for (_, message), res in zip(cases, results):
        assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert "vectorized [" not in res.stdout
    res = results[-1]
    assert res.returncode == 2 and "error: --rounds: must be >= 1, got 0" in res.stderr  # was a ZeroDivisionError


def test_benchmark_horizon_prints_one_row_per_mode():
    out = _run(
        "diagnostics/benchmark_horizon.py", "--at", "300", "--modes", "exact", "long", "--seeds", "2", "--rounds", "2"
    )
    rows = re.findall(r"^\s+300 (exact|long)\s+[0-9.]+\s+[0-9.]+", out, re.M)
    assert rows == ["exact", "long"], out


def _device_check_commands():
    """The benchmark commands of lab/diagnostics/device_checks.sh (step or background NAME LIMIT python3
    scripts/X.py ARGS, a fallback step indented)."""
    with open(os.path.join(ROOT, "lab", "diagnostics", "device_checks.sh")) as fh:
        steps = re.findall(
            r"^\s*(?:step|background) (\S+) \S+ python3 scripts/(benchmark\S*\.py) (.*?)(?: \|\||&)?$", fh.read(), re.M
        )
    return {name: (script, args.split()) for name, script, args in steps}


def test_device_checks_has_its_benchmark_steps():
    assert set(_device_check_commands()) == {
        "target_cos",
        "target_cos_full",
        "target_cos_wait",
        "target_cos_lt",
        "target_square",
        "bench_gpu_walk",
        "tf32_square",
        "bf16_square",
        "bench_cpu_cos",
        "target_cos_gelu",
        "bench_cpu_act",
    }


def _shortened(args):
    """The same flags on this machine's CPU, 2 seeds, 3 rounds, torch's BLAS choice (the GPU device is lent
    only at times, for minutes: a flag renamed since the script was written must fail here, not there)."""
    out, it = [], iter(args)
    for a in it:
        out.append(a)
        if a in ("--accelerator", "--seeds", "--rounds", "--blas"):
            out.append({"--accelerator": "cpu", "--seeds": "2", "--rounds": "3", "--blas": "default"}[a])
            next(it)
    return out


def _values(args, flag, default):
    """The values given to a multi-valued flag (up to the next flag), or [default]."""
    if flag not in args:
        return [default]
    rest = args[args.index(flag) + 1 :]
    return rest[: next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]


@pytest.mark.slow  # the GPU check script's benchmark commands on a CPU (44 s)
def test_device_checks_benchmark_commands_run_and_print_the_lines_its_summary_collects():
    commands = _device_check_commands()
    results = _two_at_a_time([(script, _shortened(args)) for script, args in commands.values()])
    for (name, (script, args)), res in zip(commands.items(), results):
        assert res.returncode == 0, (name, res.stderr[-2000:])
        out = res.stdout
        # one "vectorized [...] on cpu" line per precision x history pass asked for: what the summary greps
        rows = re.findall(r"^vectorized \[[^\]]+\] on cpu: +[0-9.]+ seed-rounds/s", out, re.M)
        combos = len(_values(args, "--precision", "32-true")) * len(_values(args, "--history-pass", "auto"))
        combos *= len(_values(args, "--activation", None))
        assert len(rows) == combos, (name, out)


@pytest.mark.slow  # a GPU diagnostic, run on a CPU
def test_gpu_profile_counts_the_updates_kernels_and_refuses_a_missing_gpu_in_one_line():
    """lab/diagnostics/gpu_profile.py on a CPU: per part (Adam steps, theta refit) a count of computing operations
    that grows with the steps asked for, and the most numerous ones named (on a GPU: its kernels)."""
    args = ["--device", "cpu", "--seeds", "2", "--at", "40", "--grad-steps"]
    no_gpu = (
        [("diagnostics/gpu_profile.py", [])] if not torch.cuda.is_available() else []
    )  # its default device is the GPU
    results = _two_at_a_time(
        [("diagnostics/gpu_profile.py", [*args, "1"]), ("diagnostics/gpu_profile.py", [*args, "3"]), *no_gpu]
    )
    counts = []
    for res in results[:2]:
        assert res.returncode == 0, res.stderr[-2000:]
        found = re.search(r"^Adam steps: (\d+) kernels \(([0-9.]+) per step\), [0-9.]+ ms$", res.stdout, re.M)
        assert found and re.search(r"^theta refit: \d+ kernels", res.stdout, re.M) and "aten::bmm" in res.stdout, (
            res.stdout
        )
        counts.append(int(found.group(1)))
    assert counts[1] > 2 * counts[0], counts  # three steps launch about three times one step's operations
    if not torch.cuda.is_available():
        res = results[2]
        assert res.returncode == 2 and "error: --device gpu: torch sees no CUDA GPU" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_the_side_by_side_script_prints_a_row_per_thread_setting():
    script = os.path.join(os.path.dirname(__file__), "..", "..", "lab", "diagnostics", "side_by_side.py")
    res = subprocess.run(
        [sys.executable, script, "--rounds", "4", "--seeds", "1", "--width", "4", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("cores: ") and res.stdout.splitlines()[-1].split()[0] == "1"
