"""Two runs side by side on one machine: how much each slows the other, per thread setting.

    python scripts/diagnostics/side_by_side.py                      # cos, T=300, 5 seeds: alone, then two at once
    python scripts/diagnostics/side_by_side.py --width 500 --rounds 100

For each setting (``--threads`` values; "default" is what a run picks when nothing is said), one run alone, then
two identical runs started together; prints each run's fit wall time (summary.json's wall_seconds) and the
slowdown side by side against alone. The machine's cores are named in the header.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def _start(folder, a, threads):
    args = [
        sys.executable,
        os.path.join(ROOT, "scripts", "main.py"),
        "fit",
        "--config",
        os.path.join(ROOT, "configs", "cos.yaml"),
    ]
    args += ["--data.rounds", str(a.rounds), "--data.num_seeds", str(a.seeds), "--model.width", str(a.width)]
    args += ["--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", folder]
    if threads != "default":
        args += ["--threads", threads]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wall(proc, folder):
    err = proc.communicate()[1]
    if proc.returncode != 0:
        raise SystemExit(f"a run failed:\n{err[-2000:]}")
    [summary] = [os.path.join(r, f) for r, _, fs in os.walk(folder) for f in fs if f == "summary.json"]
    return json.load(open(summary))["wall_seconds"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--width", type=int, default=32)
    p.add_argument(
        "--threads", nargs="+", default=["default", "1", "2"], help="settings to measure ('default': none given)"
    )
    a = p.parse_args(argv)
    print(f"cores: {os.cpu_count()}; cos T={a.rounds}, {a.seeds} seeds, m={a.width}; fit wall seconds (summary.json)")
    print(f"{'threads':>8s} {'alone':>8s} {'side by side':>20s} {'slowdown':>9s}")
    for threads in a.threads:
        with tempfile.TemporaryDirectory() as tmp:
            alone = _wall(_start(os.path.join(tmp, "a"), a, threads), os.path.join(tmp, "a"))
            t0 = time.time()
            procs = [(_start(os.path.join(tmp, f"b{k}"), a, threads), os.path.join(tmp, f"b{k}")) for k in range(2)]
            both = [_wall(pr, f) for pr, f in procs]
            print(
                f"{threads:>8s} {alone:8.1f} {both[0]:9.1f} {both[1]:9.1f} {max(both) / alone:8.1f}x  ({time.time() - t0:.0f} s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
