"""Compare two committed runs seed by seed: R(T)/T of the first minus the second.

    python scripts/pair.py --task square --first NVLDB-UCB-ASYM lab/results/paper/width/m1000 --second NVLDB-UCB-ASYM lab/results/paper/width/m32

A run is a method and the report folders whose ``curves_<task>.csv.gz`` (what `scripts/reproduce.py`
commits) hold it: several folders when its seeds were run in parts (``--first-seed``, or other streams
drawn with ``--base-seed``), joined seed by seed. Runs from different folders (another width, the
literal reading, another loop) are paired on the seeds both ran: the same seed id under the same base
seed (in the folder's report.json when not 0) is the same stream of contexts and preferences. Prints each run's
R(T)/T (mean ± std over those seeds) and the difference, mean ± standard error, with the number of
seeds where the first is lower. Without ``--second``: the first run's R(T)/T over all its seeds.

``--at t`` reads R(t)/t at an earlier round t instead (the committed curves keep every round to 100,
then every 10th), and ``--rounds`` takes each run's own T when they differ, so a longer run is compared
with a shorter one on the same streams at the shorter one's end:

    python scripts/pair.py --task square --rounds 10000 2000 --at 2000 --first NVLDB-UCB-ASYM lab/results/paper/width10k/m500 --second NVLDB-UCB-ASYM lab/results/paper/width/m500
"""

import argparse
import csv
import gzip
import os
import sys
from typing import Optional

import numpy as np


from .arguments import check_positive
from ..machinery.host import read_json
from .curves import committed_curves, mean_std, paired_cell


def runs_in(path: str) -> str:
    """The runs of a curves_<task>.csv.gz, as ``method (T=...)``: what --first/--second and --rounds can name."""
    last: dict[str, int] = {}
    with gzip.open(path, "rt") as fh:
        for row in csv.DictReader(fh):
            last[row["method"]] = max(last.get(row["method"], 0), int(row["round"]))
    return ", ".join(f"{m} (T={t})" for m, t in sorted(last.items()))


def final_regret(folder: str, method: str, task: str, rounds: int, at: Optional[int] = None) -> dict:
    """{(base seed, seed id): R(t)/t} of ``method``'s run of T = ``rounds`` in ``folder``'s curves_<task>.csv.gz,
    at round t = ``at`` (default T); a clear error naming the file otherwise. The base seed comes from the
    folder's report.json (0 where it records none)."""
    path = os.path.join(folder, f"curves_{task}.csv.gz")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file (a folder written by scripts/reproduce.py for --task {task})")
    curves = committed_curves(folder, task, rounds, None)
    if method not in curves:
        raise ValueError(
            f"{path}: no run of {method!r} with T={rounds}; runs there: {runs_in(path) or 'none'} "
            f"(--rounds takes each run's own T)"
        )
    base, streams = 0, None
    report = os.path.join(folder, "report.json")
    if os.path.exists(report):
        whole, entry = read_json(report), None
        if not isinstance(whole, dict):
            raise ValueError(f"{report}: expected a JSON object of runs, got {type(whole).__name__}")
        entry = whole.get(f"{task}/{method}", {})
        if not isinstance(entry, dict) or not isinstance(entry.get("base_seed", 0), int):
            raise ValueError(
                f"{report}: its entry {task}/{method} is not a run's record (a JSON object with base_seed)"
            )
        base, streams = entry.get("base_seed", 0), entry.get("streams")
    rs, seeds, R = curves[method]
    t = rounds if at is None else at
    where = np.flatnonzero(rs == t)
    if where.size == 0:
        raise ValueError(
            f"{path}: {method!r} (T={rounds}) has no round {t} (kept: every round to 100, then every 10th)"
        )
    return {(base, s): v for s, v in zip(seeds, R[where[0]] / t)}, streams


def other_streams(these, those) -> Optional[str]:
    """How two runs' data settings (report.json's ``streams``; None: not recorded) make other streams, in words; None
    where they are the same streams (or either is not recorded)."""
    if not (isinstance(these, dict) and isinstance(those, dict)) or these == those:
        return None
    keys = sorted(k for k in set(these) | set(those) if these.get(k) != those.get(k))
    return ", ".join(f"{k} {these.get(k)} and {those.get(k)}" for k in keys)


def joined(method: str, folders: list[str], task: str, rounds: int, at: Optional[int] = None) -> tuple:
    """({(base seed, seed id): R(t)/t}, data settings of its streams or None) of ``method`` over ``folders`` (its seeds
    run in parts); a seed in two, or parts on other streams (another d, ...), is refused."""
    out: dict = {}
    streams, first = None, None
    for folder in folders:
        part, mine = final_regret(folder, method, task, rounds, at)
        differ = other_streams(streams, mine)
        if differ:
            raise ValueError(
                f"{folder}: {method!r} there ran on other streams than in {first} ({differ}); its parts must share them"
            )
        streams, first = streams or mine, first or folder
        twice = sorted(set(part) & set(out))
        if twice:
            raise ValueError(
                f"{folder}: seeds {_names(twice)} of {method!r} are also in an earlier folder; give each seed once"
            )
        out.update(part)
    return out, streams


def _names(keys: list) -> str:
    """Seed ids, grouped by base seed: '0-9' (base seed 0), '0-9 of base seed 10'."""
    out = []
    for base in sorted({b for b, _ in keys}):
        ids = sorted(i for b, i in keys if b == base)
        span = (
            f"{ids[0]}-{ids[-1]}"
            if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 1
            else ", ".join(map(str, ids))
        )
        out.append(span + ("" if base == 0 else f" of base seed {base}"))
    return "; ".join(out)


def _stats(label: str, vals: dict, seeds: list, what: str = "R(T)/T") -> str:
    mean, std = mean_std(np.array([vals[s] for s in seeds]))
    return f"{label}: {what} {mean:.3f} ± {std:.3f} over {len(seeds)} seeds ({_names(seeds)})"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--first",
        nargs="+",
        required=True,
        metavar="METHOD FOLDER",
        help="the run whose R(T)/T is the minuend: a method, then its report folder(s)",
    )
    p.add_argument("--second", nargs="+", default=None, metavar="METHOD FOLDER", help="the run subtracted, likewise")
    p.add_argument("--task", required=True, help="cos, square, quadratic, statlog, ...")
    p.add_argument(
        "--rounds",
        type=int,
        nargs="+",
        default=[2000],
        metavar="T",
        help="T of both runs, or of the first then the second (default 2000)",
    )
    p.add_argument(
        "--at",
        type=int,
        default=None,
        metavar="t",
        help="compare R(t)/t at round t (default: T; the smaller T when the runs' T differ)",
    )
    a = p.parse_args(argv)
    for run in (a.first, a.second):  # METHOD FOLDER...: ~ in a folder given as --first=~/x (no shell expands it)
        if run:
            run[1:] = [os.path.expanduser(folder) for folder in run[1:]]
    try:
        if len(a.rounds) > 2:
            raise ValueError(f"--rounds: give one T, or two (the first run's, the second's), got {len(a.rounds)}")
        if len(a.rounds) == 2 and a.second is None:
            raise ValueError("--rounds: two values are the T of --first and of --second; give --second, or one T")
        for T in a.rounds:
            check_positive("--rounds", T)
        for flag, run in (("--first", a.first), ("--second", a.second)):
            if run is not None and len(run) < 2:
                raise ValueError(
                    f"{flag}: give a method and at least one folder, e.g. {flag} NVLDB-UCB-ASYM lab/results/paper/fig1"
                )
        T1, T2 = a.rounds[0], a.rounds[-1]
        at = a.at
        if at is None and a.second is not None and T1 != T2:
            at = min(T1, T2)
        if at is not None:
            check_positive("--at", at)
            if at > min(T1, T2):  # T1 == T2 without --second
                raise ValueError(f"--at: round {at} is past the end of a run (--rounds {' '.join(map(str, a.rounds))})")
        what = "R(T)/T" if at is None or (at == T1 == T2) else f"R({at})/{at}"
        mine, my_streams = joined(a.first[0], a.first[1:], a.task, T1, at)
        if a.second is None:
            print(_stats(f"{a.first[0]} in {' '.join(a.first[1:])}", mine, sorted(mine), what))
            return 0
        theirs, their_streams = joined(a.second[0], a.second[1:], a.task, T2, at)
        differ = other_streams(my_streams, their_streams)
        if differ:
            raise ValueError(
                f"--first and --second ran on other streams ({differ}): a seed id is the same stream only under "
                f"the same data settings, so they are not paired"
            )
        common = sorted(set(mine) & set(theirs))
        if not common:
            raise ValueError(
                f"no seed in common: {a.first[0]} ran seeds {_names(sorted(mine))}, "
                f"{a.second[0]} ran {_names(sorted(theirs))}"
            )
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for run, vals in ((a.first, mine), (a.second, theirs)):
        print(_stats(f"{run[0]} in {' '.join(run[1:])}", vals, common, what))
    print(
        f"difference over {len(common)} seeds ({_names(common)}): {paired_cell({s: mine[s] for s in common}, theirs)}"
    )
    return 0
