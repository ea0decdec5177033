"""Measured sweeps used to choose the defaults: every config on the same streams and seeds, paired.

    python scripts/sweep.py --rounds 500 --seeds 8 --tasks cos square --out lab/results/probe/probe.jsonl \
        --grid '[{"parametrization": "ntk"}, {"parametrization": "standard", "bias": true}]' --vary strategy=ucb_asym,ucb_osym
    python scripts/sweep.py --summarize lab/results/probe/probe.jsonl --baseline '{"parametrization": "ntk"}'

Each finished run is appended to ``--out`` (JSON lines: task, config, T, per-seed R(T)/T and self-duel
fraction, wall time, device, ``settings``: every learner argument as the run resolved it, defaults included, and
``curve``: R^a_t of each seed, every round to 100 then every 10th, for a plot: nvldb_pl.experiments.frames) and
skipped (saying how many, and on which device they were made) when the sweep is run again with the same T and seeds,
so a sweep can be stopped and resumed. A row whose settings are not what this code makes of its config (a default
changed since it ran, or a row made before rows recorded their settings) is refused, naming the file, the line and
the settings, before anything runs: a config such as ``{}`` names the defaults of the code that ran it. ``--accelerator gpu`` runs each config
on one GPU.
``--vary key=a,b`` crosses every grid entry with those values. A key ``data.<name>`` sets a data setting instead
of a model one (``data.dim``, ``data.arms``, ``data.link``, ``data.data_file`` of ``--tasks table``, ...): the
learner's linked fields follow it, as in ``main.py``. ``--summarize`` prints, per task
and config, R(T)/T mean ± std and the paired difference to the baseline config with the same
other settings, T and seeds (``--baseline`` replaces keys; a key set to null is removed) (mean ± standard error over seeds, and how many seeds the config wins);
two rows whose recorded settings differ beyond what their configs name (made under other defaults) are not paired,
and the table says which settings differ.
"""

import argparse
import functools
import itertools
import json
import math
import os
import signal
import sys

import torch


from .arguments import TASK_DATA, check_learner, check_positive, check_tasks
from .sweep_rows import done_keys, key_of, read_rows, row_key
from ..machinery.host import check_folder_can_be_made, hold_existing
from ..machinery.own_modules import find_own_modules_here
from ..learners.settings import merged
from ..maths.checks import LINKED_FROM_DATA, typed_args
from ..learners.registry import LITERAL_OF, init_args, learner_class
from ..loop.data import BanditDataModule
from ..loop.run import RunTerminated, build, check_placement, run_experiment
from .cluster import GridStopped, add_ray_arguments, connect, gpus_asked, run_on_ray
from .curves import kept_round

GRID = [  # the README's first sweep (the literal reading: eq. (nn), a2 = a1 allowed)
    merged(LITERAL_OF["NVLDB"], {"lr": 1e-3, "network.init": "kaiming", "epsilon": 0.1}),
    merged(LITERAL_OF["NVLDB"], {"lr": 1e-3, "network.init": "paper", "epsilon": 0.1}),
    merged(LITERAL_OF["NVLDB"], {"lr": 1e-2, "network.init": "kaiming", "epsilon": 0.1}),
    merged(LITERAL_OF["NVLDB"], {"lr": 1e-3, "network.init": "kaiming", "epsilon": 0.3}),
    merged(LITERAL_OF["NVLDB"], {"lr": 1e-3, "network.init": "kaiming", "variance_aware": False}),
]


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def expand(grid: list[dict], vary: list[str]) -> list[dict]:
    """Every grid entry crossed with every combination of the ``key=a,b`` values."""
    axes = []
    for item in vary:
        if "=" not in item:
            raise ValueError(f"--vary: {item!r} is not key=value[,value...]")
        key, values = item.split("=", 1)
        axes.append([(key, _value(v)) for v in values.split(",")])
    return [merged(g, dict(combo)) for g in grid for combo in itertools.product(*axes)]


def parse_json(flag: str, text: str, kind: type):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{flag}: not JSON ({err}): {text!r}") from None
    if not isinstance(value, kind):
        raise ValueError(f"{flag}: expected a JSON {'list' if kind is list else 'object'}, got {text!r}")
    return value


def check_grid(grid: list) -> None:
    """Before anything runs: every entry an object whose keys its learner takes (a typo such as
    "widht" would otherwise fail at that entry's run, after the runs before it)."""
    for g in grid:
        if not isinstance(g, dict):
            raise ValueError(f"--grid: every entry is a JSON object of model arguments, got {g!r}")
        learner = g.get("learner", "NVLDB")
        try:
            cls = learner_class(learner, "--grid")
        except ValueError as err:
            raise ValueError(f"{err} (in {json.dumps(g)})") from None
        data, model = split_entry(g)
        takes, data_takes = init_args(cls), init_args(BanditDataModule) - {"task", "rounds", "num_seeds", "seed"}
        unknown = sorted(set(model) - takes) + sorted(DATA + k for k in set(data) - data_takes)
        if unknown:
            raise ValueError(
                f"--grid/--vary: {learner} takes no {unknown} ({json.dumps(g)}); it takes {sorted(takes)}, and the "
                f"data {sorted(DATA + k for k in data_takes)}"
            )
        # each value parsed by its argument's type (a "False" is refused, not run as the true text "False")
        g.update(typed_args(cls, model, "--grid/--vary"))
        g.update({DATA + k: v for k, v in typed_args(BanditDataModule, data, "--grid/--vary").items()})


DATA = "data."  # a grid key naming a data setting (data.dim, data.arms, data.link, data.data_file, ...)


def split_entry(g: dict) -> tuple[dict, dict]:
    """Grid entry ``g`` as (data settings, model settings): ``data.<name>`` keys and the rest, less ``learner``."""
    data = {k[len(DATA) :]: v for k, v in g.items() if k.startswith(DATA)}
    return data, {k: v for k, v in g.items() if not k.startswith(DATA) and k != "learner"}


def run_args(task: str, g: dict, rounds: int, seeds: int) -> tuple[dict, dict, str]:
    """(data, model, learner) of grid entry ``g`` on ``task``: a config may name a baseline, {"learner": "NDB", ...}."""
    data, model = split_entry(g)
    learner = g.get("learner", "NVLDB")
    return (
        {"task": task, "rounds": rounds, "num_seeds": seeds, "seed": 0, **TASK_DATA.get(task, {}), **data},
        model,
        learner,
    )


def settings_of(hparams: dict) -> dict:
    """A learner's arguments as a run resolved them (its hparams, defaults included), less the fields linked
    from the data: what a sweep row records as ``settings``."""
    return json.loads(json.dumps({k: v for k, v in sorted(dict(hparams).items()) if k not in LINKED_FROM_DATA}))


def resolved_settings(task: str, g: dict, rounds: int) -> dict:
    """What this code makes of grid entry ``g`` on ``task``: the learner built (one seed, no run) and its
    :func:`settings_of`."""
    data, model, learner = run_args(task, g, rounds, 1)
    with torch.random.fork_rng():  # building draws the initial weights: no trace in the runs after it
        _, module = build(data, model, learner)
    return settings_of(module.hparams)


def settings_differ(had: dict, want: dict) -> str:
    """The settings on which two rows differ, ``name a -> b`` each (empty if none)."""
    names = sorted(set(had) | set(want), key=str)
    return ", ".join(
        f"{k} {json.dumps(had.get(k))} -> {json.dumps(want.get(k))}" for k in names if had.get(k) != want.get(k)
    )


@functools.lru_cache(maxsize=None)
def _resolved(task: str, config: str, rounds) -> dict | None:
    try:
        return resolved_settings(task, json.loads(config), rounds)
    except (ValueError, TypeError, FileNotFoundError):  # a setting this code no longer takes, data not here
        return None


def drift_between(r: dict, base: dict) -> str:
    """The settings on which rows ``r`` and ``base`` differ other than their configs say: each row against what
    this code makes of its config, a setting whose pair of values is not the pair this code would run (both
    rows made under the same older defaults are still a pair). Empty where a row records no settings or this
    code cannot build its config."""
    if "settings" not in r or "settings" not in base:
        return ""
    want_r = _resolved(r["task"], json.dumps(r["config"], sort_keys=True), r.get("rounds"))
    want_b = _resolved(base["task"], json.dumps(base["config"], sort_keys=True), base.get("rounds"))
    if want_r is None or want_b is None:
        return ""
    had_r, had_b, said = r["settings"], base["settings"], []
    for k in sorted(set(had_r) | set(had_b) | set(want_r) | set(want_b)):
        had, want = (had_r.get(k), had_b.get(k)), (want_r.get(k), want_b.get(k))
        if (had[0] != had[1] or want[0] != want[1]) and had != want:
            said.append(f"{k} {json.dumps(had[0])} here, {json.dumps(had[1])} there")
    return ", ".join(said)


def check_done(path: str, done: dict, tasks: list, grid: list, rounds: int, seeds: int) -> None:
    """Before any run: every run asked that ``--out`` already holds was made with the settings this code gives
    its config, else a ValueError naming the file, its line and the settings (its config names the defaults of
    the code that ran it, and a sweep that skipped it would pair it with runs of other defaults)."""
    for task in tasks:
        for g in grid:
            row = done.get(key_of(task, g, rounds, seeds))
            if row is None:
                continue
            where = f"--out: {path} line {row['_line']} ({task} {json.dumps(g)}, T={rounds}, {seeds} seeds)"
            made_by = (row.get("software") or {}).get("commit") or "unknown"
            if "settings" not in row:
                raise ValueError(
                    f"{where} was made by commit {made_by} before rows recorded their settings: what its config ran "
                    f"may not be what this code runs; give another --out"
                )
            diff = settings_differ(row["settings"], resolved_settings(task, g, rounds))
            if diff:
                raise ValueError(
                    f"{where} ran other settings than this code gives the same config ({diff}, the row's -> this code's; made by commit "
                    f"{made_by}): a default changed; give another --out"
                )


def summarize(path: str, baseline: dict) -> None:
    rows, whole = read_rows("--summarize", path)
    if whole < os.path.getsize(path):
        print(
            f"--summarize: {path} ends in a line cut short (a run stopped while it was written); left out",
            file=sys.stderr,
        )
    by_key = {row_key(r): r for r in rows}
    print("| task | config | R(T)/T mean ± std | self-duels | paired vs baseline (± s.e.) | seeds better |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        x = r["per_seed"]
        mean = sum(x) / len(x)
        std = math.sqrt(sum((v - mean) ** 2 for v in x) / max(len(x) - 1, 1))
        base_cfg = {k: v for k, v in {**r["config"], **baseline}.items() if v is not None}  # null: drop the key
        base = by_key.get(row_key(r, base_cfg))
        paired, wins = "–", "–"
        drift = drift_between(r, base) if base is not None and base is not r else ""
        if drift:  # made under other defaults: not the pair the configs say
            paired = f"– (not paired with line {base['_line']}: made under other defaults: {drift})"
        elif base is not None and base is not r:
            d = [a - b for a, b in zip(x, base["per_seed"])]
            dm = sum(d) / len(d)
            se = math.sqrt(sum((v - dm) ** 2 for v in d) / max(len(d) - 1, 1) / len(d))
            paired, wins = f"{dm:+.3f} ± {se:.3f}", f"{sum(v < 0 for v in d)}/{len(d)}"
        sd = sum(r["self_duels"]) / len(r["self_duels"])
        print(f"| {r['task']} | {json.dumps(r['config'])} | {mean:.3f} ± {std:.3f} | {sd:.0%} | {paired} | {wins} |")


def main():
    find_own_modules_here()  # a class_path of one's own, from the working folder
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=600)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--tasks", nargs="+", default=["cos", "square", "quadratic"])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument(
        "--accelerator",
        default="cpu",
        choices=["cpu", "gpu"],
        help="device of every run (one device; each row records it)",
    )
    p.add_argument("--grid", type=str, default=None, help="JSON list of model overrides")
    p.add_argument("--vary", nargs="*", default=[], metavar="KEY=A,B", help="cross the grid with these values")
    p.add_argument(
        "--out", default=None, type=os.path.expanduser, help="JSON-lines file: append each run, skip runs already there"
    )
    p.add_argument(
        "--summarize",
        default=None,
        type=os.path.expanduser,
        metavar="FILE",
        help="print the paired table of a sweep file",
    )
    p.add_argument("--baseline", default="{}", help="JSON overrides naming the baseline config of --summarize")
    add_ray_arguments(p, "(task, config)")
    a = p.parse_args()
    try:
        if a.summarize:
            summarize(a.summarize, parse_json("--baseline", a.baseline, dict))
            return
        check_positive("--rounds", a.rounds)
        check_positive("--seeds", a.seeds)
        if a.threads < 0:
            raise ValueError(
                f"--threads: must be >= 0 (0: chosen by the problem's size, nvldb_pl.machinery.devices.cpu_threads), got {a.threads}"
            )
        check_tasks(a.tasks)
        if a.ray is not None:
            connect(a.ray)  # the extra and the cluster, before anything is written
        check_placement(a.accelerator)  # up front: not after the runs before the first on a missing GPU
        if a.out:
            if os.path.isdir(a.out):
                raise ValueError(f"--out: {a.out} is a folder; give a JSON-lines file")
            check_folder_can_be_made(os.path.dirname(os.path.abspath(a.out)), "--out")
        grid = expand(parse_json("--grid", a.grid, list) if a.grid else GRID, a.vary)
        if not grid:
            raise ValueError(
                "--grid: an empty list runs nothing; give at least one object of model arguments ({} "
                "for the learner's defaults)"
            )
        check_grid(grid)
        for task in a.tasks:  # a value no learner takes (width 0), named before the runs before it
            for g in grid:
                data, model = split_entry(g)
                check_learner(
                    f"--grid/--vary {json.dumps(g)} on {task}",
                    g.get("learner", "NVLDB"),
                    model,
                    {**TASK_DATA.get(task, {}), **data},
                    a.rounds,
                    a.seeds,
                )
        sweep(a, grid)
    except (ValueError, FileNotFoundError, FloatingPointError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # said where in sweep(); exit as a shell reports Ctrl-C
        sys.exit(130)
    except RunTerminated as stop:  # said where in sweep(); exit as a shell reports the signal (143: SIGTERM)
        sys.exit(128 + stop.signum)


def sweep(a, grid: list[dict]) -> None:
    """Run every (task, grid entry) not yet in ``a.out``, printing a row each and appending it. The file is held
    (a flock) from before it is read until the sweep ends: a second sweep on it is refused."""
    rows = held = None
    if a.out:  # opened now: an --out that cannot be written is found before the first run, not after it
        try:
            os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
            rows = open(a.out, "a")
        except OSError as err:
            raise ValueError(
                f"--out: {a.out} cannot be written ({err.strerror}); give a file this user can write"
            ) from None
        held = hold_existing(a.out)
        if held is None:
            rows.close()
            raise ValueError(
                f"--out: {a.out} is being written by another sweep now; two sweeps on one file would each run the "
                f"configs it does not hold yet: wait for that one to end (this command then runs only what is left), "
                f"or give another --out"
            )
    try:
        done, skipped = done_keys(a.out), []
        check_done(a.out, done, a.tasks, grid, a.rounds, a.seeds)
        _sweep(a, grid, done, skipped, rows)
    finally:
        if rows is not None:
            rows.close()
            os.close(held)


def sweep_row(task: str, g: dict, rounds: int, seeds: int, accelerator: str = "cpu", threads=None) -> tuple[dict, str]:
    """One run of the sweep: task ``task`` with grid entry ``g``; its row (as ``--out`` keeps it) and its line of the
    printed table. ``threads``: CPU threads (None or 0: chosen by the problem's size)."""
    data, model, learner = run_args(task, g, rounds, seeds)
    s, module = run_experiment(
        data, model, learner=learner, accelerator=accelerator, threads=threads or "auto", with_curves=True
    )
    kept = [i for i, r in enumerate(s["curves"]["rounds"]) if kept_round(r, rounds)]
    per_seed = [x["cum_avg_regret"] / s["rounds"] for x in s["seeds"]]
    duels = [x["self_duel_fraction"] for x in s["seeds"]]
    line = (
        f"| {task} | {json.dumps(g)} | {s['R_T_over_T_mean']:.3f} ± {s['R_T_over_T_std']:.3f} "
        f"| {sum(duels) / len(duels):.0%} | {s['wall_seconds']:.0f} |"
    )
    row = {
        "task": task,
        "config": g,
        "rounds": rounds,
        "per_seed": per_seed,
        "self_duels": duels,
        "wall_seconds": s["wall_seconds"],
        "device": s["device"],
        "software": s.get("software"),
        "settings": settings_of(module.hparams),
        "curve": {  # R^a_t of each seed, every round to 100 then every 10th (as a report's curves file)
            "rounds": [s["curves"]["rounds"][i] for i in kept],
            "cum_avg_regret": [[float(f"{v:.6g}") for v in s["curves"]["cum_avg_regret"][i]] for i in kept],
        },
    }
    return row, line


def _sweep(a, grid: list[dict], done: dict, skipped: list, rows) -> None:
    """:func:`sweep`'s runs, each row written to ``rows`` (the open ``--out``, or None) as it finishes: in this
    process one after another, or with ``--ray`` each a Ray task, written as they end."""
    seeds = "one seed" if a.seeds == 1 else f"{a.seeds} seeds"
    print(f"| task | config | R(T)/T mean ± std (T={a.rounds}, {seeds}) | self-duels | wall s |")
    print("|---|---|---|---|---|")
    left = []
    for task in a.tasks:
        for g in grid:
            made = done.get(key_of(task, g, a.rounds, a.seeds))
            if made is not None:
                skipped.append(made.get("device", "cpu"))
            else:
                left.append((task, g))

    def finished(name, result):
        row, line = result
        print(line, flush=True)
        if rows is not None:
            rows.write(json.dumps(row) + "\n")
            rows.flush()  # each row kept as it finishes

    kept = f"are in {a.out}, and the same command goes on" if a.out else "are not kept: give --out to keep them"
    if a.ray is not None:
        jobs = [((task, json.dumps(g)), (task, g, a.rounds, a.seeds, a.accelerator, a.ray_cpus)) for task, g in left]
        try:
            run_on_ray(a.ray, sweep_row, jobs, a.ray_cpus, gpus_asked(a), finished, print)
        except GridStopped as stop:
            name = "Ctrl-C" if stop.signum == signal.SIGINT else signal.Signals(stop.signum).name
            print(f"stopped by {name}: {len(stop.finished)} of {len(jobs)} runs finished; they {kept}", file=sys.stderr)
            raise RunTerminated(stop.signum, 0) from None
    for n, (task, g) in enumerate(left if a.ray is None else []):
        try:
            finished((task, g), sweep_row(task, g, a.rounds, a.seeds, a.accelerator, a.threads))
        except (KeyboardInterrupt, RunTerminated) as stop:
            name = "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else signal.Signals(stop.signum).name
            print(
                f"stopped by {name}: {task} {json.dumps(g)} was cut short and is not written; the runs finished "
                f"({n} in this call) {kept}" + (" from this one" if a.out else ""),
                file=sys.stderr,
            )
            raise
    if skipped:  # a row is its task, config, T and seeds: one made on another device is not run again either
        devices = ", ".join(f"{skipped.count(d)} on {d}" for d in sorted(set(skipped)))
        print(
            f"{len(skipped)} of the runs asked are already in {a.out} ({devices}) and were not run again; "
            f"--summarize {a.out} shows them",
            file=sys.stderr,
        )
