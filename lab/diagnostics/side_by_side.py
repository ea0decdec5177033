"""Two runs side by side on one machine: how much each slows the other, per thread setting.

    python lab/diagnostics/side_by_side.py                      # cos, T=300, 5 seeds: alone, then two at once
    python lab/diagnostics/side_by_side.py --width 500 --rounds 100

For each setting (``--threads`` values; "default" is what a run picks when nothing is said, its cores shared with
the run beside it: nvldb_pl/machinery/cores.py; "unshared" the same with each run registered in a folder of its
own, so that neither sees the other, as before the sharing), one run alone, then two identical runs started
together; prints each run's fit wall time (summary.json's wall_seconds), the threads it took, and the slowdown side
by side against alone. The machine's cores are named in the header.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def _start(folder, a, threads, runs_dir):
    args = [
        sys.executable,
        os.path.join(ROOT, "scripts", "main.py"),
        "fit",
        "--config",
        os.path.join(ROOT, "configs", "cos.yaml"),
    ]
    args += ["--data.rounds", str(a.rounds), "--data.num_seeds", str(a.seeds), "--model.network.width", str(a.width)]
    args += ["--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", folder]
    if threads not in ("default", "unshared"):
        args += ["--threads", threads]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["NVLDB_RUNS_DIR"] = os.path.join(folder, "own-runs") if threads == "unshared" else runs_dir
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wall(proc, folder):
    err = proc.communicate()[1]
    if proc.returncode != 0:
        raise SystemExit(f"a run failed:\n{err[-2000:]}")
    [summary] = [os.path.join(r, f) for r, _, fs in os.walk(folder) for f in fs if f == "summary.json"]
    s = json.load(open(summary))
    return s["wall_seconds"], s["cpu_threads"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--width", type=int, default=32)
    p.add_argument(
        "--threads",
        nargs="+",
        default=["default", "unshared", "1"],
        help="settings to measure ('default': none given; 'unshared': none given, the cores not shared)",
    )
    a = p.parse_args(argv)
    print(f"cores: {os.cpu_count()}; cos T={a.rounds}, {a.seeds} seeds, m={a.width}; fit wall seconds (summary.json)")
    print(f"{'threads':>9s} {'alone':>8s} {'side by side':>20s} {'slowdown':>9s}  threads taken (alone; side by side)")
    for threads in a.threads:
        with tempfile.TemporaryDirectory() as tmp:
            runs_dir = os.path.join(tmp, "runs")  # the machine's registrations, this measurement's only
            alone, n_alone = _wall(_start(os.path.join(tmp, "a"), a, threads, runs_dir), os.path.join(tmp, "a"))
            t0 = time.time()
            folders = [os.path.join(tmp, f"b{k}") for k in range(2)]
            procs = [(_start(f, a, threads, runs_dir), f) for f in folders]
            (w0, n0), (w1, n1) = [_wall(pr, f) for pr, f in procs]
            print(
                f"{threads:>9s} {alone:8.1f} {w0:9.1f} {w1:9.1f} {max(w0, w1) / alone:8.1f}x  "
                f"({time.time() - t0:.0f} s) {n_alone}; {n0}, {n1}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
