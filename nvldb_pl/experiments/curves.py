"""The curves of runs, read and compared seed by seed: a run's ``curves.csv`` and a report's committed
``curves_<task>.csv.gz`` (refused by file and line where damaged), the rounds the committed file keeps, and
the paired differences of R(T)/T the reports print.
"""

from __future__ import annotations

import csv
import gzip
import math
import os
from typing import Optional

import numpy as np

from ..learners.registry import LITERAL_SUFFIX, METHODS


def load_curves(folder: str) -> tuple[np.ndarray, list[int], np.ndarray]:
    """(rounds [T], seed ids, R^a_t [T, S]) from a run's curves.csv."""
    rows: dict[int, dict[int, float]] = {}
    path = os.path.join(folder, "curves.csv")
    try:
        with open(path) as fh:
            text = fh.read()
        if text and not text.endswith("\n"):  # every row is written whole, newline included
            raise ValueError("its last row is cut short")
        for row in csv.DictReader(text.splitlines()):
            if None in row.values() or None in row:
                raise ValueError(f"a row of {len([v for v in row.values() if v is not None])} fields: {row}")
            r, s, v = int(row["round"]), int(row["seed"]), float(row["cum_avg_regret"])
            if s in rows.setdefault(r, {}):  # (the later row won: a paired difference went from +0.010 to -0.396)
                raise ValueError(f"round {r} of seed {s} is given twice")
            if not math.isfinite(v):
                raise ValueError(f"round {r} of seed {s} is {v} (a run writes finite regrets only)")
            rows[r][s] = v
    except (UnicodeDecodeError, KeyError, TypeError, ValueError) as err:  # a cut-short row reads None or ''
        raise ValueError(f"{path}: damaged or not a curves file ({type(err).__name__}: {err})") from None
    if not rows:
        raise ValueError(f"{path}: no rounds")
    rounds = np.array(sorted(rows))
    seeds = sorted(rows[rounds[0]])
    short = next((int(r) for r in rounds if sorted(rows[r]) != seeds), None)
    if short is not None:
        raise ValueError(f"{path}: damaged: round {short} lacks some of the seeds {seeds}")
    return rounds, seeds, np.array([[rows[r][s] for s in seeds] for r in rounds])


def committed_curves(folder: str, task: str, rounds: int, seeds: Optional[int]) -> dict:
    """{method: (rounds, seed ids, R^a_t)} from a report's ``curves_<task>.csv.gz`` (every
    round to 100, then every 10th): runs of another report, compared here seed by seed. Only runs
    of the same T (unless ``rounds`` is None) and number of seeds (unless ``seeds`` is None) are kept; {} if the
    file is absent."""
    path = os.path.join(folder, f"curves_{task}.csv.gz")
    if not os.path.exists(path):
        return {}
    rows: dict[str, dict[int, dict[int, float]]] = {}
    try:
        with gzip.open(path, "rt") as fh:
            reader = csv.DictReader(fh)
            for row in reader:
                at = rows.setdefault(row["method"], {}).setdefault(int(row["round"]), {})
                seed, value = int(row["seed"]), float(row["cum_avg_regret"])
                where = f"{path} line {reader.line_num}"
                if seed in at:  # (the later row won, silently)
                    raise ValueError(f"{where}: {row['method']} round {row['round']} seed {seed} is given twice")
                if not math.isfinite(value):
                    raise ValueError(
                        f"{where}: {row['method']} round {row['round']} seed {seed}: {value} is not finite"
                    )
                at[seed] = value
    except ValueError as err:
        if str(err).startswith(path):
            raise
        raise ValueError(f"{path}: damaged or not a curves file (ValueError: {err})") from None
    except (OSError, EOFError, UnicodeDecodeError, KeyError, TypeError) as err:  # cut short, not gzip
        raise ValueError(f"{path}: damaged or not a curves file ({type(err).__name__}: {err})") from None
    out = {}
    for method, by_round in rows.items():
        rs = np.array(sorted(by_round))
        ids = sorted(by_round[rs[0]])
        if (rounds is not None and int(rs[-1]) != rounds) or (seeds is not None and len(ids) != seeds):
            continue
        for r in rs:
            if sorted(by_round[r]) != ids:
                missing = sorted(set(ids) - set(by_round[r])) or sorted(set(by_round[r]) - set(ids))
                raise ValueError(f"{path}: {method} round {r} lacks or adds seed(s) {missing} (the others have {ids})")
        out[method] = (rs, ids, np.array([[by_round[r][i] for i in ids] for r in rs]))
    return out


def mean_std(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0


# The baselines of the paper's claim "every NVLDB variant beats NDB, CoLSTIM and VACDB".
CLAIM_BASELINES = ("NDB-UCB", "NDB-TS", "CoLSTIM", "VACDB")


def paired_lines(curves: dict, T: int) -> list[str]:
    """Per NVLDB rule: paired differences of R(T)/T against NLDB with the same rule and against
    each baseline of the paper's claim (same seeds and streams, so compared seed by seed).

    ``curves``: method -> (rounds, seed ids, R^a_t [rounds, seeds]). A cell is mean ± standard
    error over seeds of NVLDB's R(T)/T minus the other's, and in brackets the number of seeds
    where NVLDB is lower; '–' where the other method did not run (or ran other seeds or another T).
    """
    order = list(METHODS)
    nvldb = sorted(
        (m for m in curves if m.startswith("NVLDB-") and not m.endswith(LITERAL_SUFFIX)),
        key=lambda m: (order.index(m) if m in order else len(order), m),
    )
    literal = any(m + LITERAL_SUFFIX in curves for m in nvldb)
    claim = [b for b in CLAIM_BASELINES if b in curves] + [
        b + LITERAL_SUFFIX for b in CLAIM_BASELINES if b + LITERAL_SUFFIX in curves
    ]
    columns = (["literal (same rule)"] if literal else []) + ["NLDB (same rule)"] + claim

    def other(method: str, column: str) -> str:
        if column == "literal (same rule)":
            return method + LITERAL_SUFFIX
        return method.replace("NVLDB-", "NLDB-", 1) if column == "NLDB (same rule)" else column

    if not any(other(m, c) in curves for m in nvldb for c in columns):
        return []

    def final(method: str) -> dict:
        rounds, seeds, R = curves[method]
        return dict(zip(seeds, R[-1] / T)) if int(rounds[-1]) == T else {}

    lines = [
        "Paired differences of R(T)/T, NVLDB minus the column's method, seed by seed (mean ± standard "
        "error; in brackets the seeds where NVLDB is lower; negative: NVLDB better):",
        "",
        "| NVLDB rule | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for m in nvldb:
        mine, cells = final(m), []
        for column in columns:
            name = other(m, column)
            theirs = final(name) if name in curves else {}
            cells.append(paired_cell(mine, theirs) if mine and sorted(theirs) == sorted(mine) else "–")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines + [""]


def paired_cell(mine: dict, theirs: dict) -> str:
    """'mean ± standard error (k/n)' of mine[s] − theirs[s] over the n seeds both have; k: seeds where mine is lower."""
    d = np.array([mine[s] - theirs[s] for s in sorted(set(mine) & set(theirs))])
    se = d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else 0.0
    return f"{d.mean():+.3f} ± {se:.3f} ({int((d < 0).sum())}/{d.size})"


def kept_round(r: int, T: int) -> bool:
    """Rounds written to the committed curves_<task>.csv.gz: every round up to 100, then every
    10th, and T (keeps the file small; each run's own curves.csv holds every round)."""
    return r <= 100 or r % 10 == 0 or r == T
