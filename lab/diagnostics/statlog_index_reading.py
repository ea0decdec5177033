"""Statlog read by arm index: "P(i > j) = 1 for i > j" taken literally, the higher-indexed arm always wins.

The package reads the appendix's Statlog preference through the class utilities (u_k = 1 for the true class,
P = 1 when u_i > u_j; ``data.preference: deterministic``). Read by index, the preference ignores the context: the
utility of arm k is k / (K - 1) on every round, the best duel is always arm K's self-duel, and regret is
(2 u* - u_a1 - u_a2) / 2 on that scale. This script runs that reading as a task of one's own (a
:class:`nvldb_pl.environments.tasks.Task` subclass: Statlog's block-encoded contexts, drawn with the seed's stream,
and the index utility), NVLDB against NLDB, the default network and the literal reading, paired by seed:

    python lab/diagnostics/statlog_index_reading.py --out lab/results/selfduel/statlog_index_T200.jsonl

Each run is appended as a JSON line (task, config, per-seed R(T)/T and self-duel fraction); needs the UCI data
(``$NVLDB_UCI_DIR`` or ``../shared/data/uci``).
"""

import argparse
import functools
import json
import os

import numpy as np

from nvldb_pl.environments import uci
from nvldb_pl.environments.tasks import Task
from nvldb_pl.learners.registry import LITERAL_OF
from nvldb_pl.loop.run import run_experiment

LITERAL = LITERAL_OF["NVLDB"]

ARMS, FEATURES = 7, uci.SPECS["statlog"].features


@functools.lru_cache(maxsize=1)
def _statlog() -> np.ndarray:
    return uci.load("statlog")[0]


class IndexStatlog(Task):
    """Statlog's contexts [rounds, K, K*9] (rows drawn uniformly with replacement, block-encoded) and u_k = k/(K-1)."""

    def draw_parameter(self, dim, rng):
        return np.zeros(1)  # nothing unknown but the index order

    def draw_contexts(self, num_rounds, arms, dim, rng):
        X = _statlog()
        return uci.block_contexts(X[rng.integers(len(X), size=num_rounds)], arms)

    def utility(self, theta, x):
        return np.broadcast_to(np.arange(x.shape[1]) / (x.shape[1] - 1), x.shape[:2]).copy()


CONFIGS = [
    {"strategy": "ucb_osym"},
    {"strategy": "ucb_osym", "variance_aware": False},
    {"strategy": "ucb_osym", **LITERAL},
    {"strategy": "ucb_osym", **LITERAL, "variance_aware": False},
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--out", required=True, type=os.path.expanduser)
    a = p.parse_args()
    data = {
        "task": f"{__name__}.IndexStatlog",
        "dim": ARMS * FEATURES,
        "arms": ARMS,
        "rounds": a.rounds,
        "num_seeds": a.seeds,
        "seed": 0,
        "preference": "deterministic",
    }
    for model in CONFIGS:
        s, _ = run_experiment(data, model, threads=1)
        row = {
            "task": "statlog-index",
            "data": {"preference": "deterministic", "utility": "k / (K - 1)"},
            "config": model,
            "rounds": a.rounds,
            "per_seed": [x["cum_avg_regret"] / a.rounds for x in s["seeds"]],
            "self_duels": [x["self_duel_fraction"] for x in s["seeds"]],
            "wall_seconds": s["wall_seconds"],
            "software": s.get("software"),
        }
        with open(a.out, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps(model), f"{s['R_T_over_T_mean']:.3f} ± {s['R_T_over_T_std']:.3f}", flush=True)


if __name__ == "__main__":
    main()
