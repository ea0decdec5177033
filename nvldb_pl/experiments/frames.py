"""A comparison's results as pandas tables and a plot, for a notebook (the ``notebook`` extra: pandas, matplotlib).

    from nvldb_pl.experiments import frames
    runs = frames.run("demo", tasks=["cos"], methods=["NVLDB-UCB-ASYM", "Random"], rounds=100, seeds=4)
    runs = frames.load("demo")                          # the same, from the folder nvldb-reproduce wrote
    frames.summary(runs)                                # mean ± s.e. of R(T)/T per (task, method)
    frames.paired(runs, "NVLDB-UCB-ASYM", "Random")     # their differences, seed by seed
    frames.plot(frames.curves("demo"), "cos")           # R^a_t per method, mean ± s.e. band
    frames.sweep("sweep.jsonl"), frames.sweep_curves("sweep.jsonl")   # a sweep's rows, the same way

    python -m nvldb_pl.experiments.frames lab/results --csv runs.csv  # every run under a folder, one tidy table

A report folder (``--out`` of ``nvldb-reproduce``) holds each run under the name it ran under (``report.json``, whose
keys are ``task/method``) and its curves (``curves_<task>.csv.gz``: every round to 100, then every 10th); these
tables read those files only, so a folder copied from a cluster loads as it is. A seed is named by (base seed, seed
id): two runs pair on the seeds they share, and runs on other streams (another d, another task's settings) are
refused rather than paired. A damaged or missing file is refused naming it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from typing import Optional

from ..machinery.host import atomic_open, read_json
from .curves import committed_curves
from .pair import other_streams
from .sweep_rows import read_rows

EXTRA = "pandas and matplotlib are the notebook extra's: pip install -e '.[notebook]'"


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ImportError(EXTRA) from None
    return pandas


def _entries(folder: str) -> dict:
    """report.json's entries of ``folder``: {"task/method": record}; refused naming the file where missing or
    damaged."""
    path = os.path.join(folder, "report.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file (a folder written by nvldb-reproduce --out)")
    entries = read_json(path)
    if not isinstance(entries, dict) or not all(isinstance(v, dict) and "/" in k for k, v in entries.items()):
        raise ValueError(f"{path}: not a report's runs (a JSON object of 'task/method' records)")
    return entries


def _runs(folder: str):
    """(task, method, its report.json record, (rounds [n], seed ids, R^a_t [n, S])) of every run in ``folder``."""
    read: dict = {}  # (task, T) -> that task's curves of T: each file read once
    for key, entry in _entries(folder).items():
        task, method = key.split("/", 1)
        T = entry.get("rounds")  # (a report of before it recorded T: its curve's own)
        if (task, T) not in read:
            read[task, T] = committed_curves(folder, task, T, None)
        curves = read[task, T]
        if method not in curves:
            raise ValueError(f"{os.path.join(folder, f'curves_{task}.csv.gz')}: no curve of {method!r} with T={T}")
        yield task, method, entry, curves[method]


def load(folder: str):
    """Every run of a report folder, one row per (task, method, seed): ``task``, ``method`` (the name it ran under),
    ``rounds`` T, ``base_seed``, ``seed``, ``regret`` R(T)/T, ``settings`` (what it changed from the method's
    defaults, as ``--set`` takes them; "" for none), ``streams`` (the data settings its streams came from, JSON; "null"
    where not recorded). A DataFrame."""
    rows = []
    for task, method, entry, (rounds, seeds, R) in _runs(folder):
        T = int(rounds[-1])
        for j, seed in enumerate(seeds):
            rows.append(
                {
                    "task": task,
                    "method": method,
                    "rounds": T,
                    "base_seed": int(entry.get("base_seed", 0)),
                    "seed": int(seed),
                    "regret": float(R[-1, j]) / T,
                    "settings": entry.get("settings", ""),
                    "streams": json.dumps(entry.get("streams"), sort_keys=True),
                }
            )
    return _pandas().DataFrame(rows, columns=[*rows[0]] if rows else ["task", "method", "rounds", "seed", "regret"])


def curves(folder: str):
    """The curves of every run of a report folder, long: ``task``, ``method``, ``seed``, ``round`` t and ``regret``
    R^a_t, the cumulative average regret (the rounds the folder keeps). A DataFrame."""
    rows = [
        (task, method, int(seed), int(r), float(R[i, j]))
        for task, method, _, (rounds, seeds, R) in _runs(folder)
        for i, r in enumerate(rounds)
        for j, seed in enumerate(seeds)
    ]
    return _pandas().DataFrame(rows, columns=["task", "method", "seed", "round", "regret"])


def sweep(path: str):
    """A sweep's file of runs (``nvldb-sweep --out``) one row per (task, config, seed): ``task``, ``method`` (the
    config as JSON, the name :func:`summary`, :func:`paired` and :func:`plot` group by), ``rounds``, ``base_seed`` 0,
    ``seed`` (its index), ``regret`` R(T)/T, ``settings`` "" and ``streams`` "null". A DataFrame."""
    rows = [
        {
            "task": r["task"],
            "method": json.dumps(r["config"], sort_keys=True),
            "rounds": r.get("rounds"),
            "base_seed": 0,
            "seed": j,
            "regret": float(v),
            "settings": "",
            "streams": "null",
        }
        for r in read_rows("path", path)[0]
        for j, v in enumerate(r["per_seed"])
    ]
    return _pandas().DataFrame(rows, columns=[*rows[0]] if rows else ["task", "method", "rounds", "seed", "regret"])


def sweep_curves(path: str):
    """:func:`curves`'s table of a sweep's file (``method``: the config as JSON); rows written before sweeps kept
    their curves are refused naming the line."""
    out = []
    for r in read_rows("path", path)[0]:
        if "curve" not in r:
            raise ValueError(f"{path} line {r['_line']}: a row written before sweeps kept their curves (no curve)")
        name, c = json.dumps(r["config"], sort_keys=True), r["curve"]
        out += [
            (r["task"], name, j, t, float(v))
            for t, vs in zip(c["rounds"], c["cum_avg_regret"])
            for j, v in enumerate(vs)
        ]
    return _pandas().DataFrame(out, columns=["task", "method", "seed", "round", "regret"])


def summary(runs):
    """Per (task, method) of :func:`load`'s table: ``seeds``, the ``mean`` of R(T)/T, its ``std`` (ddof 1) and
    standard error ``se`` = std / sqrt(seeds). A DataFrame, sorted by task then mean."""
    g = runs.groupby(["task", "method", "rounds"], sort=False)["regret"]
    out = g.agg(seeds="count", mean="mean", std="std").reset_index()
    out["std"] = out["std"].fillna(0.0)
    out["se"] = out["std"] / out["seeds"].map(math.sqrt)
    return out.sort_values(["task", "mean"], kind="stable").reset_index(drop=True)


def paired(runs, first: str, second: str):
    """``first`` minus ``second`` seed by seed on each task where both ran with the same T: ``seeds`` shared,
    the mean difference of R(T)/T, its ``se``, and ``wins`` (seeds where ``first`` is lower). Refused where two runs
    are on other streams, or share no seed. A DataFrame."""
    pd = _pandas()
    rows = []
    for task in sorted(set(runs["task"])):
        a = runs[(runs["task"] == task) & (runs["method"] == first)]
        b = runs[(runs["task"] == task) & (runs["method"] == second)]
        if a.empty or b.empty:
            continue
        differ = other_streams(json.loads(a["streams"].iloc[0]), json.loads(b["streams"].iloc[0]))
        if differ:
            raise ValueError(f"{task}: {first} and {second} ran on other streams ({differ}); they do not pair")
        both = a.merge(b, on=["rounds", "base_seed", "seed"], suffixes=("_a", "_b"), validate="one_to_one")
        if both.empty:
            raise ValueError(f"{task}: {first} and {second} share no seed of the same T; they do not pair")
        d = both["regret_a"] - both["regret_b"]
        n = len(d)
        rows.append(
            {
                "task": task,
                "rounds": int(both["rounds"].iloc[0]),
                "seeds": n,
                "difference": float(d.mean()),
                "se": float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else 0.0,
                "wins": int((d < 0).sum()),
            }
        )
    if not rows:
        raise ValueError(
            f"no task where both {first!r} and {second!r} ran; methods here: {sorted(set(runs['method']))}"
        )
    return pd.DataFrame(rows)


def plot(curves, task: str, methods: Optional[list] = None, ax=None):
    """R^a_t against t for each method of ``task`` in :func:`curves`'s table (``methods``: these, in this order),
    the mean over seeds with a band of ± one standard error. Returns the matplotlib Axes."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(EXTRA) from None
    here = curves[curves["task"] == task]
    if here.empty:
        raise ValueError(f"no curves of task {task!r}; tasks here: {sorted(set(curves['task']))}")
    names = list(dict.fromkeys(here["method"])) if methods is None else list(methods)
    missing = [m for m in names if m not in set(here["method"])]
    if missing:
        raise ValueError(f"{task}: no curves of {missing}; methods here: {sorted(set(here['method']))}")
    ax = ax if ax is not None else plt.subplots(figsize=(6, 4))[1]
    for method in names:
        g = here[here["method"] == method].groupby("round")["regret"]
        mean, se = g.mean(), (g.std(ddof=1) / g.count().map(math.sqrt)).fillna(0.0)
        (line,) = ax.plot(mean.index, mean.values, label=method)
        ax.fill_between(mean.index, mean - se, mean + se, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("round t")
    ax.set_ylabel("cumulative average regret R^a_t")
    ax.set_title(task)
    ax.legend()
    return ax


def run(out: str, tasks: list, methods: list, rounds: int, seeds: int, *options: str):
    """Run (or reuse: the same command goes on from what finished) the comparison with ``nvldb-reproduce`` into
    ``out`` and return :func:`load`'s table. ``options``: more of its arguments as on its command line (``"--set",
    "lr=0.01"``)."""
    from .reproduce import main

    argv = ["--out", out, "--tasks", *tasks, "--methods", *methods, "--rounds", str(rounds), "--seeds", str(seeds)]
    code = main([*argv, *options])
    if code:
        raise RuntimeError(f"nvldb-reproduce {shlex.join([*argv, *options])} exited with {code}")
    return load(out)


def every_run(paths: list):
    """:func:`load`'s table of every report folder under ``paths`` (a folder holding ``report.json``, at any depth)
    and :func:`sweep`'s of every sweep file given by name (``.jsonl``), with the ``folder`` (or file) each came
    from first. A path that holds neither is refused naming it."""
    pd, parts = _pandas(), []
    for path in paths:
        if os.path.isfile(path):
            parts.append(sweep(path).assign(folder=path))
            continue
        found = sorted(root for root, _, files in os.walk(path) if "report.json" in files)
        if not found:
            raise ValueError(f"{path}: no report folder (report.json) under it, and not a sweep file")
        parts += [load(folder).assign(folder=folder) for folder in found]
    whole = pd.concat(parts, ignore_index=True)
    return whole[["folder", *[c for c in whole.columns if c != "folder"]]]


def main(argv=None) -> int:
    """``python -m nvldb_pl.experiments.frames PATH ... --csv FILE``: :func:`every_run` as one CSV (or Parquet, for a
    FILE ending .parquet: pandas' engine, pyarrow), written whole or not at all."""
    ap = argparse.ArgumentParser(description=main.__doc__.split("\n")[0].strip("`"))
    ap.add_argument("paths", nargs="+", help="folders holding report folders (report.json), or sweep files")
    ap.add_argument("--csv", required=True, metavar="FILE", help="the table to write (.csv, or .parquet)")
    a = ap.parse_args(argv)
    try:
        table = every_run(a.paths)
        with atomic_open(a.csv, "wb") as fh:
            if a.csv.endswith(".parquet"):
                table.to_parquet(fh)
            else:
                fh.write(table.to_csv(index=False).encode("utf-8"))
    except (ValueError, FileNotFoundError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {a.csv}: {len(table)} rows (a run's seed each) from {table['folder'].nunique()} folders or files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
