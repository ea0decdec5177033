"""The grid in one process against the same grid on a Ray cluster started here (issue 85's 0.75x target):

    python lab/diagnostics/ray_grid_timing.py --cpus 2 -- --tasks cos square --methods NVLDB-UCB-ASYM NLDB-UCB-ASYM \
        --rounds 300 --seeds 8

    python lab/diagnostics/ray_grid_timing.py --script sweep -- --tasks cos square --rounds 300 --seeds 8 \
        --grid '[{}, {"variance_aware": false}]'

Starts `ray start --head --num-cpus CPUS` (stopped after), runs `scripts/reproduce.py` (or `sweep.py`; one thread a
run) into two fresh folders (files), one process and `--ray auto`, and prints each wall time, their ratio, the seed-rounds per second of
each and whether every seed's result is the same; the device is this machine's CPU (named)."""

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def per_seed(out):
    found = {}
    for path in glob.glob(os.path.join(out, "runs", "*", "*", "lightning_logs", "*", "summary.json")):
        with open(path) as fh:
            found[tuple(path.split(os.sep)[-5:-3])] = [(s["seed"], s["cum_avg_regret"]) for s in json.load(fh)["seeds"]]
    return found


def sweep_rows(path):
    return {(r["task"], json.dumps(r["config"])): r["per_seed"] for r in map(json.loads, open(path))}


def cpu_name():
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--script", choices=["reproduce", "sweep"], default="reproduce")
    ap.add_argument("grid", nargs=argparse.REMAINDER, help="-- then reproduce.py's grid options")
    a = ap.parse_args()
    grid = a.grid[1:] if a.grid[:1] == ["--"] else a.grid
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    work = tempfile.mkdtemp(prefix="/tmp/raytime")
    script = [sys.executable, os.path.join(ROOT, "scripts", a.script + ".py")]
    read = per_seed if a.script == "reproduce" else sweep_rows
    subprocess.run(
        [ray, "start", "--head", f"--num-cpus={a.cpus}", "--include-dashboard=false", "--disable-usage-stats"],
        check=True,
        capture_output=True,
        env=env,
    )
    try:
        wall = {}
        for name, extra in (("one process", []), (f"--ray auto ({a.cpus} CPUs)", ["--ray", "auto"])):
            start = time.perf_counter()
            out = os.path.join(work, ("ray" if extra else "one") + ("" if a.script == "reproduce" else ".jsonl"))
            subprocess.run([*script, "--out", out, *grid, *extra], check=True, capture_output=True, env=env)
            wall[name] = (time.perf_counter() - start, read(out))
        (n1, (t1, r1)), (n2, (t2, r2)) = wall.items()
        seeds = int(grid[grid.index("--seeds") + 1]) if "--seeds" in grid else 20
        rounds = int(grid[grid.index("--rounds") + 1]) if "--rounds" in grid else 2000
        work_done = len(r1) * seeds * rounds
        print(f"device: {cpu_name()}, {os.cpu_count()} cores; {a.script}: {' '.join(grid)} ({len(r1)} runs)")
        for n, t in ((n1, t1), (n2, t2)):
            print(f"{n:<24s} {t:7.1f} s   {work_done / t:8.1f} seed-rounds/s")
        print(f"ratio {t2 / t1:.2f}; every seed's result the same: {r1 == r2}")
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
