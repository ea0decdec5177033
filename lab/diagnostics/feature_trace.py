"""Follow one network learner's estimate round by round: is it still learning, or has phi died?

    python lab/diagnostics/feature_trace.py --task square --seed 12 --rounds 3200 --method NVLDB-UCB-ASYM \
        --set network.width=1000 "sampler={size: 256}" episode=10 gram_mode=incremental --out trace.jsonl

Runs the method (``scripts/reproduce.py``'s names and ``--set``) on one seed, and every ``--every``
rounds writes a JSON line: the round t; the greedy regret of the estimate on a fixed probe set (the
first ``--probe`` rounds' contexts of the seed's own stream: mean of u* − u of the arm with the highest
f), how often that arm is the best, the correlation of f with u on the probe set; the live units of phi
on the probe set and on the history (``live_feature_units``), the mean norm of phi; ||theta|| and
the cosine of theta with theta_0 (theta goes back to theta_0 under the ridge term once phi = 0).
The run itself is the ordinary one: its regret equals the same seed's in any run of that method.
"""

import argparse
import json
import os
import sys

import lightning.pytorch as pl
import torch

from nvldb_pl.experiments.arguments import ALL_TASKS, TASK_DATA, accepts, check_learner, check_positive, parse_overrides
from nvldb_pl.machinery.host import CannotWrite
from nvldb_pl.learners.registry import METHODS
from nvldb_pl.machinery.messages import quiet_lightning
from nvldb_pl.loop.run import run_experiment


class Trace(pl.Callback):
    def __init__(self, every: int, probe: int, fh):
        self.every, self.probe, self.fh = every, probe, fh
        self.x, self.u = [], []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        t = batch["round"]
        if len(self.x) < self.probe:
            self.x.append(batch["contexts"][0])
            self.u.append(batch["utilities"][0].double())
        if t % self.every:
            return
        regret, module = module.regret, module.learner  # the loop's metric; the learner
        with torch.no_grad():
            K, d = self.x[0].shape
            x = torch.stack(self.x).reshape(1, -1, d).to(module.device)
            u = torch.stack(self.u)
            f = module.scores(x).reshape(-1, K).cpu()
            greedy = u.gather(1, f.argmax(1, keepdim=True)).squeeze(1)
            phi = module.net.features(x)[0]
            theta, theta0 = module.net.theta[0].double(), module.net.theta0[0].double()
            corr = torch.corrcoef(torch.stack([f.flatten(), u.flatten()]))[0, 1]
            row = {
                "t": t,
                "probe_greedy_regret": float((u.max(1).values - greedy).mean()),
                "probe_best_arm": float((f.argmax(1) == u.argmax(1)).double().mean()),
                "probe_corr": None if torch.isnan(corr) else float(corr),
                "live_units_probe": int((phi > 0).any(dim=0).sum()),
                "live_units_history": int(module.live_feature_units()[0]),
                "phi_norm": float(phi.norm(dim=1).mean()),
                "theta_norm": float(theta.norm()),
                "theta_cos_theta0": float(theta @ theta0 / (theta.norm() * theta0.norm()).clamp_min(1e-300)),
                "cum_avg_regret": float(regret.compute()["cum_avg"].reshape(-1)[0]),
            }
        self.fh.write(json.dumps(row) + "\n")
        self.fh.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="square")
    p.add_argument("--method", default="NVLDB-UCB-ASYM", help="a method of scripts/reproduce.py (NVLDB or NDB)")
    p.add_argument("--seed", type=int, default=0, help="the seed id (base seed 0, as reproduce.py)")
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--dim", type=int, default=5)
    p.add_argument("--every", type=int, default=10, help="rounds between lines")
    p.add_argument("--probe", type=int, default=400, help="rounds whose contexts form the probe set")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="model settings, as reproduce.py's")
    p.add_argument(
        "--out", required=True, type=os.path.expanduser, help="the JSON-lines file to write (refused if it exists)"
    )
    a = p.parse_args(argv)
    if a.method not in METHODS or METHODS[a.method][0] not in ("NVLDB", "NDB"):
        p.error(
            f"--method: {a.method!r} is not a network method; choose from "
            f"{[m for m, (learner, _) in METHODS.items() if learner in ('NVLDB', 'NDB')]}"
        )
    if os.path.exists(a.out):
        p.error(f"--out: {a.out} exists; it is not overwritten")
    learner, model = METHODS[a.method]
    shape = TASK_DATA.get(a.task, {"dim": a.dim})  # a UCI task in its own shape, as reproduce.py runs it
    data = {"task": a.task, **shape, "rounds": a.rounds, "num_seeds": 1, "first_seed_id": a.seed}
    try:  # every value checked before --out is made: a refused run leaves no empty file that blocks the next
        for name in ("rounds", "every", "probe"):
            check_positive(f"--{name}", getattr(a, name))
        if a.seed < 0:
            raise ValueError(f"--seed: must be >= 0, got {a.seed}")
        if a.task not in ALL_TASKS:
            raise ValueError(f"--task: unknown {a.task!r}; choose from {list(ALL_TASKS)}")
        overrides = parse_overrides(a.set)
        unknown = sorted(set(overrides) - accepts(learner))
        if unknown:
            raise ValueError(f"--set: {unknown} is not an argument of {learner}; it takes {sorted(accepts(learner))}")
        model = {**model, **overrides}
        check_learner(f"{a.method} on {a.task}", learner, model, shape, a.rounds, 1)
    except ValueError as err:
        p.error(str(err))
    quiet_lightning()
    try:
        with open(a.out, "x") as fh:
            run_experiment(
                data, model, learner=learner, log_every_n_rounds=a.rounds, callbacks=(Trace(a.every, a.probe, fh),)
            )
    except (ValueError, FileNotFoundError, FloatingPointError, CannotWrite) as err:
        if os.path.isfile(a.out) and os.path.getsize(a.out) == 0:
            os.remove(a.out)
        kept = f"; {a.out} keeps the lines written before" if os.path.isfile(a.out) else ""
        print(f"feature_trace.py: error: {err}{kept}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if os.path.isfile(a.out) and os.path.getsize(a.out) == 0:
            os.remove(a.out)
        kept = (
            f"; {a.out} keeps the lines written before (a new trace needs another --out, or that file removed)"
            if os.path.isfile(a.out)
            else ""
        )
        print(f"feature_trace.py: stopped by Ctrl-C{kept}", file=sys.stderr)
        return 130
    print(f"{a.out}: {a.rounds // a.every} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
