"""Screen for issue 81: the live API's learner on the persons and catalogs of taste_screen.py, by how it reads the
features and its activation: does it die (every item scored alike), and how well does its own estimate rank?

    OMP_NUM_THREADS=1 python lab/screens/live_learner.py --persons 6 --out lab/screens/rows/live_learner.jsonl
    python lab/screens/live_learner.py --summary lab/screens/rows/live_learner.jsonl

Variants: ``asgiven`` (standardize False, ReLU: the live API before the input map), ``relu`` (standardized, ReLU:
configs/live.yaml now), ``gelu`` (standardized, GELU), ``fd16`` (standardized, ReLU, feature_dim 16). Policies: ``random`` (a uniform pair, never the last one)
and ``own`` (the learner's own rule, NVLDB-UCB-ASYM: objective regret). The catalogs as given (features in [0, 1]);
each row: tau of the learner's scores after 20, 40, 100 answers, whether every item scored alike at the end, the
share of items whose score ties another's exactly, and the longest run of one pair.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taste_screen import CATALOGS, KINDS, catalog, live_model, person, write_row  # noqa: E402

from nvldb_pl.live import DuelingBandit  # noqa: E402
from nvldb_pl.serve.items import kendall_tau  # noqa: E402

VARIANTS = {
    "asgiven": (False, "relu", None),
    "relu": (True, "relu", None),
    "gelu": (True, "gelu", None),
    "fd16": (True, "relu", 16),  # phi of 16 units whatever d (p = d = 2 units died at 2 features)
}
POLICIES = ("random", "own")
CHECKS = (20, 40, 100)


def run(cat: str, kind: str, p: int, variant: str, policy: str, answers: int = 100) -> dict:
    x, x01 = catalog(cat, "raw")
    N, d = x.shape
    P, truth = person(kind, x01, p)
    uniforms = np.random.default_rng([83, p, N, d, KINDS.index(kind)]).uniform(size=answers)
    rng = np.random.default_rng([85, p])
    standardize, activation, p_units = VARIANTS[variant]
    extra = {"network": {"activation": activation}, **({"feature_dim": p_units} if p_units else {})}
    b = DuelingBandit.create(dim=d, horizon=200, seed=p, standardize=standardize, **live_model(**extra))
    last, run_len, longest, taus = None, 0, 0, {}
    for t in range(1, answers + 1):
        if policy == "own":
            i, j = b.select(x)
        else:
            while True:
                i, j = (int(k) for k in rng.choice(N, 2, replace=False))
                if last is None or {i, j} != set(last):
                    break
        run_len = run_len + 1 if last is not None and {i, j} == set(last) else 1
        longest, last = max(longest, run_len), (i, j)
        b.observe(x, i, j, int(uniforms[t - 1] < P[i, j]))
        if t in CHECKS:
            taus[t] = kendall_tau(b.scores(x), truth)
    s = b.scores(x)
    ties = int(sum((s == v).sum() > 1 for v in s))
    return {
        "catalog": cat,
        "kind": kind,
        "person": p,
        "variant": variant,
        "policy": policy,
        "tau": taus,
        "flat": bool(np.ptp(s) == 0),
        "tied_share": ties / N,
        "longest_run": longest,
    }


def summary(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    for policy in POLICIES:
        print(f"\n## policy {policy}: tau after 20 / 40 / 100 answers (mean ± s.e. over persons), flat, tied share")
        print("| kind | catalog | " + " | ".join(VARIANTS) + " |\n|---|---|" + "---|" * len(VARIANTS))
        for kind, cat in itertools.product(KINDS, CATALOGS):
            cells = []
            for v in VARIANTS:
                rs = [r for r in rows if (r["policy"], r["kind"], r["catalog"], r["variant"]) == (policy, kind, cat, v)]
                if not rs:
                    cells.append("–")
                    continue
                t = [np.array([r["tau"][str(c)] for r in rs]) for c in CHECKS]
                se = t[-1].std() / math.sqrt(len(rs))
                flat = sum(r["flat"] for r in rs)
                tied = np.mean([r["tied_share"] for r in rs])
                cells.append(
                    " / ".join(f"{a.mean():.2f}" for a in t) + f" ±{se:.2f}; flat {flat}/{len(rs)}, tied {tied:.0%}"
                )
            print(f"| {kind} | {cat} | " + " | ".join(cells) + " |")
    for v in VARIANTS:  # paired by person: the variant's tau at 100 minus relu's
        for policy in POLICIES:
            diffs = []
            for r in rows:
                if r["variant"] == v and r["policy"] == policy:
                    base = [
                        q
                        for q in rows
                        if q["variant"] == "relu"
                        and (q["policy"], q["kind"], q["catalog"], q["person"])
                        == (policy, r["kind"], r["catalog"], r["person"])
                    ]
                    if base:
                        diffs.append(r["tau"]["100"] - base[0]["tau"]["100"])
            if diffs and v != "relu":
                d = np.array(diffs)
                print(f"{v} - relu, {policy}: tau@100 {d.mean():+.3f} ± {d.std() / math.sqrt(len(d)):.3f} (n{len(d)})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--persons", type=int, default=6)
    ap.add_argument("--answers", type=int, default=100)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--catalogs", nargs="+", default=list(CATALOGS))
    ap.add_argument("--out")
    ap.add_argument("--summary")
    a = ap.parse_args(argv)
    if a.summary:
        summary(a.summary)
        return
    done = set()
    if a.out and os.path.exists(a.out):
        done = {
            tuple(json.loads(line)[k] for k in ("catalog", "kind", "person", "variant", "policy"))
            for line in open(a.out)
        }
    for p in range(a.persons):
        for cat, kind, v, pol in itertools.product(a.catalogs, KINDS, a.variants, POLICIES):
            if (cat, kind, p, v, pol) in done:
                continue
            write_row(a.out, run(cat, kind, p, v, pol, a.answers))


if __name__ == "__main__":
    sys.exit(main())
