"""R(t)/t of committed runs side by side, one panel a task: mean over seeds and ±1 standard error.

    python lab/diagnostics/curves_figure.py --out lab/results/selfduel/long10k.png --tasks square cos --rounds 10000 \
        --run "a2≠a1 (self_duel_test none)" NVLDB-UCB-ASYM lab/results/probe/long10k/m32 \
        --run "self-duels allowed" NVLDB-UCB-ASYM lab/results/probe/long10k/m32-self \
        --run "deep self-duel test" NVLDB-UCB-ASYM lab/results/selfduel/long10k-m32

A run is a label, a method and a report folder whose ``curves_<task>.csv.gz`` (what ``scripts/reproduce.py``
writes) holds it; ``FOLDER@T`` takes that folder's run of horizon T instead of ``--rounds`` (a short run beside
long ones, drawn to its own horizon). ``--from`` starts the x axis at that round, ``--log-x`` draws it on a log
scale. Only the seeds every run of a task has are drawn, so the curves are paired by seed. Needs matplotlib (``pip install -e '.[report]'``).
"""

import argparse
import sys

import numpy as np

from nvldb_pl.experiments.curves import committed_curves


def curves(folder: str, task: str, method: str, T: int) -> tuple[np.ndarray, dict]:
    """(rounds, {seed: R^a_t}) of ``method`` in ``folder``'s committed curves of ``task`` at horizon T."""
    runs = committed_curves(folder, task, T, None)
    if method not in runs:
        raise ValueError(
            f"--run: {folder}/curves_{task}.csv.gz has no run of {method!r} to T={T}; it has {sorted(runs)}"
        )
    rounds, seeds, R = runs[method]
    return np.asarray(rounds), {s: R[:, j] for j, s in enumerate(seeds)}


def horizon(folder: str, rounds: int) -> int:
    """T of a ``--run`` folder: its ``@T`` suffix, else ``--rounds``."""
    if "@" not in folder:
        return rounds
    text = folder.rpartition("@")[2]
    if not text.isdigit():
        raise ValueError(f"--run: {folder!r}: after '@' comes the run's horizon T, a number")
    return int(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--tasks", nargs="+", required=True)
    p.add_argument("--rounds", type=int, required=True, help="the runs' horizon T")
    p.add_argument("--run", nargs=3, action="append", required=True, metavar=("LABEL", "METHOD", "FOLDER"))
    p.add_argument("--from", dest="start", type=int, default=1, help="the first round drawn")
    p.add_argument("--log-x", action="store_true", help="the rounds on a log scale")
    a = p.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("error: matplotlib is needed: pip install -e '.[report]'", file=sys.stderr)
        return 2
    try:
        data = {
            t: [
                (label, *curves(f.rpartition("@")[0] if "@" in f else f, t, method, horizon(f, a.rounds)))
                for label, method, f in a.run
            ]
            for t in a.tasks
        }
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    fig, axes = plt.subplots(1, len(a.tasks), figsize=(5 * len(a.tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], a.tasks):
        common = sorted(set.intersection(*(set(by_seed) for _, _, by_seed in data[task])))
        for label, rounds, by_seed in data[task]:
            keep = rounds >= a.start
            per_t = np.stack([by_seed[s][keep] for s in common]) / rounds[keep]  # R(t)/t per seed
            mean, se = per_t.mean(0), per_t.std(0) / np.sqrt(len(common))
            ax.plot(rounds[keep], mean, label=label)
            ax.fill_between(rounds[keep], mean - se, mean + se, alpha=0.25)
        if a.log_x:
            ax.set_xscale("log")
        ax.set_title(f"{task} ({len(common)} seeds)")
        ax.set_xlabel("round t")
        ax.set_ylabel("R(t) / t")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print("wrote", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
