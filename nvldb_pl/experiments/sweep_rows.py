"""A sweep's file of runs (JSON lines, one finished run a line): each row's identity (task, config, T, number of
seeds), read back and checked field by field (a damaged or hand-edited line refused by file and line), and a last line
cut short while written left out.
"""

from __future__ import annotations

import json
import math
import os
import sys

from ..migrations import upgrade_settings


def key_of(task: str, config: dict, rounds, seeds: int) -> str:
    """A run's identity: task, config, horizon T and number of seeds (a row of another T or seed count
    is another run: neither skipped for it nor paired with it)."""
    return json.dumps([task, config, rounds, seeds], sort_keys=True)


def row_key(r: dict, config: dict = None) -> str:
    return key_of(r["task"], r["config"] if config is None else config, r.get("rounds"), len(r["per_seed"]))


ROW_KEYS = ("task", "config", "per_seed", "self_duels")


def _numbers(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)


def row_problem(row: dict) -> str:
    """What makes a JSON object with the row keys not a run this file's code wrote ('' if nothing): each field of the
    type it is written with (a hand-edited or damaged row stopped the summary with a TypeError)."""
    per_seed, duels = row["per_seed"], row["self_duels"]
    if not isinstance(row["task"], str):
        return f"task is {row['task']!r}, not a task's name"
    if not isinstance(row["config"], dict):
        return f"config is {row['config']!r}, not a mapping of settings"
    if not _numbers(per_seed) or not per_seed or not all(math.isfinite(x) for x in per_seed):
        return "per_seed is not a list of finite numbers (one R(T)/T a seed)"
    if not _numbers(duels) or len(duels) != len(per_seed):
        return f"self_duels is not a list of {len(per_seed)} numbers (one a seed, as per_seed)"
    rounds = row.get("rounds")
    if rounds is not None and (not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1):
        return f"rounds is {rounds!r}, not a horizon T >= 1"
    if "settings" in row and not isinstance(row["settings"], dict):
        return f"settings is {row['settings']!r}, not a mapping"
    curve = row.get("curve")  # (rows written before the curves were kept have none)
    if curve is not None:
        rs = curve.get("rounds") if isinstance(curve, dict) else None
        R = curve.get("cum_avg_regret") if isinstance(curve, dict) else None
        if not (_numbers(rs) and rs and all(isinstance(r, int) for r in rs) and rs == sorted(set(rs))):
            return "curve.rounds is not a list of increasing rounds"
        if rounds is not None and rs[-1] != rounds:
            return f"curve.rounds ends at {rs[-1]}, not at the row's T = {rounds}"
        if not (isinstance(R, list) and len(R) == len(rs)) or not all(
            _numbers(v) and len(v) == len(per_seed) and all(math.isfinite(x) for x in v) for v in R
        ):
            return f"curve.cum_avg_regret is not {len(rs)} lists of {len(per_seed)} finite numbers (a seed each)"
    return ""


def read_rows(flag: str, path: str) -> tuple[list[dict], int]:
    """The runs of a sweep file (each with its line number, ``_line``, not written back), and the byte length of
    its whole lines. A last line cut short (a sweep killed
    or a disk filled while it was written; no newline, not JSON) holds no finished run: it is left out. Any
    other line that is not a run is a ValueError naming the flag, the file and the line."""
    if os.path.isdir(path):
        raise ValueError(f"{flag}: {path} is a folder; give a JSON-lines file")
    if not os.path.exists(path):
        raise ValueError(f"{flag}: {path}: no such file")
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    whole = len(data) - len(lines[-1])  # bytes up to and with the last newline
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if n == len(lines):  # no newline after it: cut short while written
                break
            raise ValueError(f"{flag}: {path} line {n} is not JSON ({err})") from None
        if not isinstance(row, dict) or any(k not in row for k in ROW_KEYS):
            raise ValueError(f"{flag}: {path} line {n} is not a sweep run (one JSON object with {', '.join(ROW_KEYS)})")
        problem = row_problem(row)
        if problem:
            raise ValueError(f"{flag}: {path} line {n} is not a sweep run: {problem}")
        row["_line"] = n
        learner = row["config"].get("learner", "NVLDB") if isinstance(row["config"], dict) else None
        if learner == "NDB" and isinstance(row.get("settings"), dict):  # NDB's rule: recorded by its name now
            row["settings"] = upgrade_settings(row["settings"], "NDB")
        rows.append(row)
    return rows, whole


def done_keys(path: str) -> dict[str, dict]:
    """The runs already in ``--out``, by :func:`key_of`. A last line cut short is removed from
    the file (saying so), so that the runs appended after it start on a line of their own."""
    if not path or not os.path.exists(path):
        return {}
    rows, whole = read_rows("--out", path)
    if whole < os.path.getsize(path):
        print(
            f"--out: {path} ends in a line cut short (a run stopped while it was written); it holds no finished run "
            f"and is removed",
            file=sys.stderr,
        )
        os.truncate(path, whole)
    return {row_key(r): r for r in rows}
