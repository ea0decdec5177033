"""NVLDB against NLDB where the feedback has no noise (deterministic preferences), paired by seed.

python lab/diagnostics/variance_deterministic.py   # appends to lab/results/selfduel/variance_deterministic_T1000.jsonl
"""

import json
import os

from nvldb_pl.loop.run import run_experiment

out = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "..",
    "lab",
    "results",
    "selfduel",
    "variance_deterministic_T1000.jsonl",
)
for task in ("square", "cos"):
    for va in (True, False):
        data = {"task": task, "rounds": 1000, "num_seeds": 8, "seed": 0, "preference": "deterministic"}
        model = {"variance_aware": va, "self_duel": {"test": "deep_diag"}}
        s, _ = run_experiment(data, model)
        row = {
            "task": task,
            "data": {"preference": "deterministic"},
            "config": model,
            "rounds": 1000,
            "per_seed": [x["cum_avg_regret"] / 1000 for x in s["seeds"]],
            "self_duels": [x["self_duel_fraction"] for x in s["seeds"]],
            "wall_seconds": s["wall_seconds"],
            "software": s.get("software"),
        }
        with open(out, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(task, va, round(s["R_T_over_T_mean"], 3), flush=True)
