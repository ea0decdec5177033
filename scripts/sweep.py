"""Small measured sweep used to choose the defaults (lr, init, epsilon); prints a Markdown table.

    python scripts/sweep.py --rounds 600 --seeds 3 --tasks cos square quadratic
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from nvldb_pl.run import run_experiment  # noqa: E402

GRID = [
    {"lr": 1e-3, "init": "kaiming", "epsilon": 0.1},
    {"lr": 1e-3, "init": "paper", "epsilon": 0.1},
    {"lr": 1e-2, "init": "kaiming", "epsilon": 0.1},
    {"lr": 1e-3, "init": "kaiming", "epsilon": 0.5},
    {"lr": 1e-3, "init": "kaiming", "variance_aware": False},
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=600)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--tasks", nargs="+", default=["cos", "square", "quadratic"])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--grid", type=str, default=None, help="JSON list of model overrides")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    grid = json.loads(a.grid) if a.grid else GRID
    print(f"| task | config | R(T)/T mean ± std (T={a.rounds}, {a.seeds} seeds) | wall s |")
    print("|---|---|---|---|")
    for task in a.tasks:
        for g in grid:
            s, _ = run_experiment({"task": task, "rounds": a.rounds, "num_seeds": a.seeds, "seed": 0}, g)
            print(f"| {task} | {json.dumps(g)} | {s['R_T_over_T_mean']:.3f} ± {s['R_T_over_T_std']:.3f} "
                  f"| {s['wall_seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
