"""Compare two committed runs seed by seed: R(T)/T of the first minus the second.

    python scripts/pair.py results/paper/width/m1000 NVLDB-UCB-ASYM results/paper/width/m32 NVLDB-UCB-ASYM --task square

Each run is a report folder and a method in its ``curves_<task>.csv.gz`` (what `scripts/reproduce.py`
commits), so runs from different folders (another width, the literal reading, another loop) are
paired on the seeds both ran: the same seed is the same stream of contexts and preferences. Prints
each run's R(T)/T (mean ± std over those seeds) and the difference, mean ± standard error, with the
number of seeds where the first is lower.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nvldb_pl.report import check_positive, committed_curves, paired_cell  # noqa: E402


def final_regret(folder: str, method: str, task: str, rounds: int) -> dict:
    """{seed: R(T)/T} of ``method`` in ``folder``'s curves_<task>.csv.gz; a clear error naming the file otherwise."""
    path = os.path.join(folder, f"curves_{task}.csv.gz")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file (a folder written by scripts/reproduce.py for --task {task})")
    curves = committed_curves(folder, task, rounds, None)
    if method not in curves:
        raise ValueError(f"{path}: no run of {method!r} with T={rounds}; runs there with that T: "
                         f"{', '.join(sorted(curves)) or 'none'}")
    rs, seeds, R = curves[method]
    return dict(zip(seeds, R[-1] / rounds))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("first", nargs=2, metavar=("FOLDER", "METHOD"), help="the run whose R(T)/T is the minuend")
    p.add_argument("second", nargs=2, metavar=("FOLDER", "METHOD"), help="the run subtracted")
    p.add_argument("--task", required=True, help="cos, square, quadratic, statlog, ...")
    p.add_argument("--rounds", type=int, default=2000, help="T of both runs (default 2000)")
    a = p.parse_args(argv)
    try:
        check_positive("--rounds", a.rounds)
        mine, theirs = (final_regret(f, m, a.task, a.rounds) for f, m in (a.first, a.second))
        common = sorted(set(mine) & set(theirs))
        if not common:
            raise ValueError(f"no seed in common: {a.first[1]} ran seeds {sorted(mine)}, {a.second[1]} ran {sorted(theirs)}")
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for (folder, method), vals in ((a.first, mine), (a.second, theirs)):
        x = np.array([vals[s] for s in common])
        std = x.std(ddof=1) if x.size > 1 else 0.0
        print(f"{folder} {method}: R(T)/T {x.mean():.3f} ± {std:.3f}")
    print(f"difference over {len(common)} seeds ({common[0]}-{common[-1]}): "
          f"{paired_cell({s: mine[s] for s in common}, theirs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
