"""Rows of a sweep file (scripts/sweep.py --out) paired by seed with a method of a report folder (scripts/reproduce.py
--out), at the sweep's horizon: the short-horizon tables of lab/results/short/README.md.

    python lab/diagnostics/short_table.py --sweep lab/results/short/candidates_T300.jsonl \
        --against PairwiseGP lab/results/short/gp300 --tasks square quadratic

Each row: the config, R(T)/T mean ± std over seeds, and the paired difference to the report's method at t = T
(mean ± standard error over seeds, and on how many seeds the row is lower). Only seeds both hold are paired.
"""

import argparse
import json
import math
import sys

import numpy as np

from nvldb_pl.experiments.curves import committed_curves


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", required=True, nargs="+", help="sweep JSON-lines files")
    ap.add_argument("--against", nargs=2, required=True, metavar=("METHOD", "FOLDER"))
    ap.add_argument("--tasks", nargs="+", required=True)
    ap.add_argument("--report-rounds", type=int, default=None, help="the report's horizon (default: the sweep's T)")
    a = ap.parse_args(argv)
    method, folder = a.against
    rows = [json.loads(line) for path in a.sweep for line in open(path) if line.strip()]
    for task in a.tasks:
        mine = [r for r in rows if r["task"] == task]
        if not mine:
            continue
        T = mine[0]["rounds"]
        runs = committed_curves(folder, task, a.report_rounds or T, None)
        if method not in runs:
            print(f"error: {folder} has no {method} on {task} to T={a.report_rounds or T}", file=sys.stderr)
            return 2
        rounds, seeds, R = runs[method]
        base = dict(zip(seeds, R[list(rounds).index(T)] / T))
        print(f"\n{task}, T={T}: {method} {np.mean(list(base.values())):.3f} ({len(base)} seeds)")
        print(f"| config | R(T)/T | − {method}, paired | lower on |\n|---|---|---|---|")
        for r in mine:
            first = r.get("first_seed", 0)
            per = dict(zip(range(first, first + len(r["per_seed"])), r["per_seed"]))
            common = sorted(set(per) & set(base))
            d = np.array([per[s] - base[s] for s in common])
            v = np.array([per[s] for s in common])
            print(
                f"| {json.dumps(r['config'])} | {v.mean():.3f} ± {v.std(ddof=1):.3f} | "
                f"{d.mean():+.3f} ± {d.std(ddof=1) / math.sqrt(len(d)):.3f} | {(d < 0).sum()}/{len(d)} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
