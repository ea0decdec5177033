"""The cost of one round as the history grows: exact loop against the bounded options.

    python lab/diagnostics/benchmark_horizon.py --at 1000 10000 100000 --seeds 20

For each round t and mode, builds an NVLDB learner (S seeds, m=32, L=3, n=20, cos-like unit
contexts, d=5, K=5) whose history already holds t random duels, then times the next rounds
(select, observe, update) outside Lightning, and prints seed-rounds/s and the split between
training (Adam steps), refit (theta solve incl. history features), Gram upkeep and selection.
Modes (``--modes``):
  exact:    the paper's loop (whole history every step, V rebuilt from the whole history)
  sampled:  sampler.size=256, gram_mode=incremental, retrain every round (H=1)
  long:     sampler.size=256, gram_mode=incremental, retrain every H=10 rounds (configs/long.yaml)
A full run adds the stream, the callback and Lightning (about 1-2 ms per round, measured by
``scripts/benchmark.py``); this script isolates how the learner's own cost grows with t.
"""

import argparse
import time

import numpy as np
import torch

from nvldb_pl.experiments.arguments import check_positive
from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.environments.tasks import draw_contexts
from nvldb_pl.loop.run import stop_at_ctrl_c_in_one_line

MODES = {
    "exact": {},
    "sampled": {"sampler": {"size": 256}, "gram_mode": "incremental"},
    "long": {"sampler": {"size": 256}, "gram_mode": "incremental", "episode": 10},
}


def measure(t: int, mode: str, seeds: int, rounds: int) -> tuple[float, dict]:
    d, K = 5, 5
    m = NVLDB(dim=d, arms=K, rounds=t + rounds, num_seeds=seeds, **MODES[mode])
    m.init_parameters(0, list(range(seeds)))
    m.attach_optimizer()
    rng = np.random.default_rng(0)
    with torch.no_grad():
        x = draw_contexts(t, 2, d, rng)  # [t, 2, d] unit rows, shared by the seeds (cost only)
        m.hist_xt[:, :, : 2 * t] = torch.from_numpy(x.reshape(2 * t, d).T.astype(np.float32))
        m.hist_o[:, :t] = torch.from_numpy((rng.random(t) < 0.5).astype(np.float32))
    m._t = t
    m.rounds_done.fill_(t)
    m.timings = {k: 0.0 for k in m.timings}
    start = time.perf_counter()
    for r in range(rounds):
        ctx = torch.from_numpy(draw_contexts(seeds, K, d, rng).astype(np.float32))
        noise = torch.from_numpy(rng.standard_normal((seeds, K, K)))
        duel = m.propose(ctx, noise, m.t + 1)
        m.learn(
            {
                **duel,
                "contexts": ctx,
                "o": torch.from_numpy((rng.random(seeds) < 0.5).astype(np.float32)),
                "du": torch.zeros(seeds, dtype=torch.float64),
            }
        )
    wall = time.perf_counter() - start
    m.check_finite()
    return wall / rounds, {k: v / rounds for k, v in m.timings.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--at", type=int, nargs="+", default=[1000, 10000, 100000], help="history sizes t")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--rounds", type=int, default=20, help="rounds timed per (t, mode); exact: fewer at large t")
    a = p.parse_args()
    try:
        for flag, values in (("--at", a.at), ("--seeds", [a.seeds]), ("--rounds", [a.rounds])):
            for value in values:
                check_positive(flag, value)
    except ValueError as err:
        p.error(str(err))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; S={a.seeds}, d=5, K=5, m=32, L=3, n=20")
    print(f"{'t':>7s} {'mode':<8s} {'s/round':>9s} {'seed-rounds/s':>14s}   train   refit    gram  select")
    for t in a.at:
        for mode in a.modes:
            rounds = a.rounds if mode != "exact" else max(1, min(a.rounds, 20000 // t))  # exact: O(t) a round
            per_round, split = measure(t, mode, a.seeds, rounds)
            parts = "  ".join(f"{100 * split[k] / per_round:5.1f}%" for k in ("train", "refit", "gram", "select"))
            print(
                f"{t:7d} {mode:<8s} {per_round:9.4f} {a.seeds / per_round:14.1f}   {parts}   ({rounds} rounds)",
                flush=True,
            )


if __name__ == "__main__":
    stop_at_ctrl_c_in_one_line(main, "benchmark_horizon.py")
