"""Per-seed results of every method and self-duel test, bit for bit: the before/after record of a restructuring that
must change no result (issue "Algorithm 1 in one place").

    python lab/diagnostics/fingerprints.py --write before.json          # on the code before the change
    python lab/diagnostics/fingerprints.py --check before.json          # on the code after it: exit 1 on a change

Each entry: a method of :data:`nvldb_pl.learners.registry.METHODS` (the GP where botorch is installed) or NVLDB under
each self-duel test, on each task, ``--rounds`` rounds of ``--seeds`` seeds on the CPU, one thread: every seed's
cumulative average and weak regret and self-duel fraction as ``float.hex`` (exact), and the sha256 of the trained
learner's state as a checkpoint holds it (the learner's tensors and the loop's regret, every tensor's bytes, by
name). ``--check`` names every entry that differs and the first field of
it. Bit-for-bit holds on one machine and one torch build; another CPU may round differently.
"""

import argparse
import hashlib
import importlib.util
import json
import os
import sys

import lightning.pytorch as pl
import torch

from nvldb_pl.learners.registry import METHODS
from nvldb_pl.loop.run import run_experiment
from nvldb_pl.maths.selfduel import SELF_DUEL_TESTS


def entries(tasks: list) -> dict:
    """name -> (task, learner, model arguments) of every fingerprint."""
    out = {}
    for task in tasks:
        for method, (learner, model) in METHODS.items():
            out[f"{task}/{method}"] = (task, learner, model)
        for test in SELF_DUEL_TESTS:
            out[f"{task}/NVLDB-UCB-ASYM+self_duel_test={test}"] = (task, "NVLDB", {"self_duel": {"test": test}})
    return out


class FinalState(pl.Callback):
    """The module's state at the end of the fit (what its last checkpoint would hold)."""

    def on_train_end(self, trainer, module):
        self.state = module.state_dict()


def state_sha256(state: dict) -> str:
    h = hashlib.sha256()
    for name, value in sorted(state.items()):
        h.update(name.encode())
        if isinstance(value, torch.Tensor):
            h.update(value.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def fingerprint(task: str, learner: str, model: dict, rounds: int, seeds: int) -> dict:
    final = FinalState()
    summary, _ = run_experiment(
        {"task": task, "rounds": rounds, "num_seeds": seeds},
        dict(model),
        learner=learner,
        threads=1,
        callbacks=(final,),
    )
    fields = ("cum_avg_regret", "cum_weak_regret", "self_duel_fraction")
    return {
        "seeds": [{f: float(s[f]).hex() for f in fields} for s in summary["seeds"]],
        "state_sha256": state_sha256(final.state),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", metavar="FILE", help="write the fingerprints to FILE (refused if it exists)")
    what.add_argument("--check", metavar="FILE", help="compare with FILE's fingerprints; exit 1 where any differs")
    ap.add_argument("--tasks", nargs="+", default=["square", "cos"])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="only the entries whose name contains one of these")
    a = ap.parse_args(argv)
    if a.write and os.path.exists(a.write):
        print(f"error: --write: {a.write} exists; give a new file", file=sys.stderr)
        return 2
    before = None
    if a.check:
        try:
            with open(a.check) as fh:
                before = json.load(fh)
        except (OSError, json.JSONDecodeError) as err:
            print(f"error: --check: {a.check} cannot be read as JSON ({err})", file=sys.stderr)
            return 2
        if before.get("settings") != {"rounds": a.rounds, "seeds": a.seeds}:
            print(f"error: --check: {a.check} was made with {before.get('settings')}; give those", file=sys.stderr)
            return 2
    torch.set_num_threads(1)
    todo = {k: v for k, v in entries(a.tasks).items() if not a.only or any(o in k for o in a.only)}
    found, changed, skipped = {}, [], []
    for name, (task, learner, model) in todo.items():
        if learner == "PairwiseGPLearner" and importlib.util.find_spec("botorch") is None:
            skipped.append(f"{name} (botorch is not installed: pip install -e '.[gp]')")
            continue
        found[name] = fingerprint(task, learner, model, a.rounds, a.seeds)
        if before is not None:
            old = before["entries"].get(name)
            if old is None:
                changed.append(f"{name}: not in {a.check}")
            elif old != found[name]:
                where = "state_sha256" if old["seeds"] == found[name]["seeds"] else "per-seed results"
                changed.append(f"{name}: {where} differ")
        print(f"{name}: {'changed' if changed and changed[-1].startswith(name) else 'ok'}", flush=True)
    for s in skipped:
        print(f"skipped: {s}")
    if a.write:
        with open(a.write, "w") as fh:
            json.dump({"settings": {"rounds": a.rounds, "seeds": a.seeds}, "entries": found}, fh, indent=1)
        print(f"wrote {len(found)} fingerprints to {a.write}")
        return 0
    print(
        f"{len(found) - len(changed)} of {len(found)} bit for bit as in {a.check}"
        + "".join(f"\n  {c}" for c in changed)
    )
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
