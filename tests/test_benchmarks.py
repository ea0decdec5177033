"""The benchmark scripts run and print what docs/performance.md says they print (not a timed test:
the figures themselves depend on the machine)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script, *args):
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *args], capture_output=True,
                         text=True, timeout=300, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_benchmark_prints_rates_the_device_and_the_time_split():
    out = _run("benchmark.py", "--task", "cos", "--seeds", "2", "--rounds", "5", "--naive-seeds", "1")
    assert re.search(r"vectorized \[32-true, manual\] on cpu: +[0-9.]+ seed-rounds/s", out), out
    shares = [float(x) for x in re.findall(r"^\s+(?:select|train|refit|gram|other \(.*\))\s+[0-9.]+s\s+([0-9.]+)%", out, re.M)]
    assert len(shares) == 5 and abs(sum(shares) - 100) < 0.5, out  # the split covers the whole wall time
    assert re.search(r"naive per-seed loop: +[0-9.]+ seed-rounds/s", out) and "speed-up" in out


def test_benchmark_horizon_prints_one_row_per_mode():
    out = _run("benchmark_horizon.py", "--at", "300", "--modes", "exact", "long", "--seeds", "2", "--rounds", "2")
    rows = re.findall(r"^\s+300 (exact|long)\s+[0-9.]+\s+[0-9.]+", out, re.M)
    assert rows == ["exact", "long"], out
