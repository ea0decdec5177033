"""The reproduction grid (methods x tasks x seeds): run or reuse each (task, method), find the
finished runs, and read what a run was made with.

Every run goes through :func:`nvldb_pl.loop.run.run_experiment` (the same loop, streams and seeds as
the CLI) and writes TensorBoard events, ``summary.json`` and ``curves.csv`` under
``<out>/runs/<task>/<method>/lightning_logs/version_N``. A finished run with the same rounds,
seeds, base seed, model settings (``--set``) and dimension is reused, and a run stopped before its
horizon (Ctrl-C, SIGTERM, a killed job) goes on from its ``last.ckpt`` (saved every
:data:`CHECKPOINT_EVERY` rounds) to the run it would have been, so an interrupted grid resumes where it
stopped; other settings run anew, in the next version folder.
:mod:`nvldb_pl.experiments.report` turns the runs into the report.
"""

from __future__ import annotations

import glob
import inspect
import itertools
import math
import os
import shutil
import time
from typing import Optional

import torch

from ..environments.stream import ALL_TASKS, StreamSpec
from ..loop.data import BanditDataModule
from ..maths.checks import LINKED_FROM_DATA
from ..migrations import RENAMED, upgrade_settings
from ..learners.registry import learner_class, method_spec
from ..learners.settings import Options, flat_settings, merged
from ..machinery.host import hold_folder, read_json
from ..machinery.provenance import hparams_digest
from ..machinery.resume import whole_checkpoint
from ..loop.run import RunStopped, check_placement, run_experiment
from .arguments import (
    SYNTHETIC_DIM,
    accepts,
    check_settings,
    check_tasks,
    given_settings,
    task_data,
)

CHECKPOINT_EVERY = 100  # rounds between a grid run's saves: what a stopped run goes on from


def run_hparams(folder: str) -> dict:
    """The hyperparameters a run was made with (its hparams.yaml; empty if not recorded)."""
    import yaml

    path = os.path.join(folder, "hparams.yaml")
    if not os.path.exists(path):
        return {}
    try:
        with open(path, "rb") as fh:
            hp = yaml.safe_load(fh.read().decode("utf-8")) or {}
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"{path}: damaged, not read (not valid YAML: {' '.join(str(err).split())})") from None
    if not isinstance(hp, dict):
        raise ValueError(f"{path}: damaged: a run's hyperparameters are a mapping, found {type(hp).__name__}")
    made = os.path.join(folder, "summary.json")
    summary = read_json(made) if os.path.exists(made) else None
    ran = summary.get("hparams_sha256") if isinstance(summary, dict) else None  # (runs before it: not recorded)
    if isinstance(ran, str) and hparams_digest(hp) != ran:
        raise ValueError(
            f"{path}: not the hyperparameters the run was made with (summary.json's hparams_sha256 {ran} is of "
            f"others): edited after the run, so not trusted; put it back, or move the run away to run it anew"
        )
    return hp


def read_summary(folder: str) -> dict:
    """A run's summary.json, checked whole: a mapping whose ``seeds`` are mappings, each with its integer ``seed``
    and finite ``cum_avg_regret``; else a ValueError naming the file and what is wrong."""
    path = os.path.join(folder, "summary.json")
    s = read_json(path)
    if not isinstance(s, dict):
        raise ValueError(f"{path}: damaged: a run's summary is a JSON object, found {type(s).__name__}")
    seeds = s.get("seeds")
    if not isinstance(seeds, list) or not seeds:
        raise ValueError(f"{path}: damaged: no 'seeds' list (one entry a seed)")
    for k, x in enumerate(seeds):
        ok = (
            isinstance(x, dict)
            and type(x.get("seed")) is int
            and isinstance(x.get("cum_avg_regret"), (int, float))
            and math.isfinite(x["cum_avg_regret"])
        )
        if not ok:
            raise ValueError(
                f"{path}: damaged: seeds[{k}] is not a seed's record (an object with an integer 'seed' and a "
                f"finite 'cum_avg_regret'): {str(x)[:80]}"
            )
    return s


def run_settings(method: str, hparams: dict) -> dict:
    """The model settings a run changed from its method's defaults (what ``--set`` gave it): the
    ``hparams`` entries that differ from the learner's constructor defaults, leaving out the
    method's own arguments (its rule, the literal reading's) and the fields linked from the data.
    An argument whose default is None (derived, as β, ε, init; or off, as sampler.size) is compared
    with what the learner makes of it given the rest. {} for an unknown method."""
    try:
        learner, model = method_spec(method)
        cls = learner_class(learner)
    except ValueError:
        return {}
    if not hparams:
        return {}
    hparams = upgrade_settings(hparams, learner)  # a run made before a setting existed: as it ran then
    params = inspect.signature(cls.__init__).parameters
    # (a group the method sets in part, the literal reading's network, is compared field by field below)
    own = [
        k
        for k in hparams
        if k in params and (k not in model or isinstance(model[k], dict)) and k not in LINKED_FROM_DATA
    ]
    # a group of Options (self_duel): saved as a mapping with its derived fields in force, compared as made
    derived = [k for k in own if params[k].default is None or isinstance(params[k].default, Options)]
    changed = {
        k: hparams[k]
        for k in own
        if k not in derived and params[k].default is not inspect.Parameter.empty and hparams[k] != params[k].default
    }
    if derived:
        try:
            made = _made_hparams(method, hparams, changed)
        except (TypeError, ValueError):  # a run made by older code: its plain settings only
            return changed
        # None recorded: the default itself (runs made before hparams held the derived value)
        for k in derived:
            given, was = hparams[k], made.get(k)
            if isinstance(given, dict) and isinstance(was, dict):  # a group: the fields that differ
                given = {f: v for f, v in given.items() if v is not None and was.get(f) != v}
            if given is not None and given != {} and given != was:
                changed[k] = given
    return changed


def find_run(
    run_dir: str,
    rounds: int,
    num_seeds: int,
    base_seed: int,
    first_seed: int = 0,
    made_with: Optional[tuple[str, dict, dict]] = None,
    on_streams: Optional[dict] = None,
    one: bool = False,
) -> Optional[str]:
    """The newest finished run in ``run_dir`` made with these settings, seed ids first_seed.. (its log dir), or None.
    ``made_with`` = (method, model settings given, data settings): the run must also have been made with
    exactly those (:func:`made_with_settings`); ``on_streams`` (data settings): on those streams, whatever its model
    settings (:func:`made_with_data`); None: any. ``one``: ``run_dir`` is one run's log dir, checked alone."""
    for folder in [run_dir] if one else _versions(run_dir):
        path = os.path.join(folder, "summary.json")
        if not (os.path.exists(path) and os.path.exists(os.path.join(folder, "curves.csv"))):
            continue
        s = read_summary(folder)
        if (
            (s.get("rounds"), s.get("num_seeds"), s.get("base_seed")) == (rounds, num_seeds, base_seed)
            and [x["seed"] for x in s["seeds"]] == list(range(first_seed, first_seed + num_seeds))
            and (made_with is None or made_with_settings(folder, *made_with))
            and (on_streams is None or made_with_data(folder, on_streams))
        ):
            return folder
    return None


def _versions(run_dir: str) -> list[str]:
    """``run_dir``'s lightning_logs/version_N folders, newest first."""
    return sorted(
        glob.glob(os.path.join(glob.escape(run_dir), "lightning_logs", "version_*")),
        key=lambda p: int(p.rsplit("_", 1)[1]) if p.rsplit("_", 1)[1].isdigit() else -1,
        reverse=True,
    )


def unfinished_run(
    run_dir: str, data: dict, made_with: tuple[str, dict, dict], accelerator: str = "cpu"
) -> Optional[tuple[int, str, int]]:
    """The newest run in ``run_dir`` stopped before its horizon with a checkpoint to go on from, made with
    the model settings ``made_with`` (as :func:`find_run`) on the stream ``data`` (all of it: task, rounds,
    seeds, base seed) on the device ``accelerator`` ("cpu" or "gpu": another device's last bits would make
    a run that equals neither): (N of its version_N, the checkpoint, the rounds it holds), or None. A damaged
    ``last.ckpt`` falls back to the previous one (said on stderr); a run with neither whole is passed over, and
    so is one another process is running now (:func:`~nvldb_pl.machinery.host.hold_folder`: two grids started at once)."""
    stream, device = BanditDataModule(**data), {"cpu": "cpu", "gpu": "cuda"}.get(accelerator, accelerator)
    for folder in _versions(run_dir):
        ckpt = os.path.join(folder, "checkpoints", "last.ckpt")
        if not (os.path.exists(ckpt) or os.path.exists(f"{ckpt}.prev")) or not made_with_settings(folder, *made_with):
            continue
        held = hold_folder(folder)
        if held is None:
            continue
        held.close()  # (taken again for the run by run_experiment)
        try:
            ckpt = whole_checkpoint(ckpt, field="")
        except ValueError:
            continue
        saved = torch.load(ckpt, map_location="cpu", weights_only=False, mmap=True)
        spec = saved.get("BanditDataModule", {})
        t = int(saved["state_dict"]["rounds_done"])
        if (
            spec.get("spec", {}).get("rounds") == stream.spec.rounds
            and not stream.config_differences(spec)
            and (t < stream.spec.rounds or not os.path.exists(os.path.join(folder, "summary.json")))
            and saved.get("accelerator") == device
        ):
            return int(folder.rsplit("_", 1)[1]), ckpt, t
    return None


def _made_hparams(method: str, hp: dict, model: dict) -> dict:
    """The hyperparameters ``method``'s learner holds when built with ``model`` on the data ``hp`` records."""
    learner, own = method_spec(method)
    linked = {k: hp[k] for k in LINKED_FROM_DATA if k in hp}
    with torch.random.fork_rng():  # building the learner draws its initial weights
        return dict(learner_class(learner)(**merged({**linked, "num_seeds": 1}, own, model)).hparams)


def made_with_settings(folder: str, method: str, model: dict, data: dict) -> bool:
    """Whether the run in ``folder`` was made with exactly the model settings ``model`` (``--set``: every
    one as given, and no other change from the method's defaults) and the data settings ``data`` (those the
    learner holds, as d and K, read from its hparams; the others, as a table's file, from its summary.json's data)."""
    hp = run_hparams(folder)
    if not hp:  # a run from before hparams.yaml: its settings are unknown, so it stands for the defaults only
        return not model and not data
    given = merged(method_spec(method)[1], model)
    if any(isinstance(v, dict) for v in given.values()):  # a mapping given in part: compared as the learner fills it
        try:
            made = _made_hparams(method, upgrade_settings(hp, method_spec(method)[0]), model)
        except (TypeError, ValueError):
            return False
        given = {k: made.get(k) if isinstance(v, dict) else v for k, v in given.items()}
    return (
        made_with_data(folder, data, hp)
        and all(hp.get(k) == v for k, v in given.items())
        and set(run_settings(method, hp)) <= set(model)
    )


# the data settings that make a run's streams beside d and K (which its learner holds), with the value a run made
# without them has; preference: the link's
STREAM_SETTINGS = {
    "link": "logistic",
    "preference": None,
    "sampling": "per_seed",
    "task_args": None,
    "data_dir": None,
    "data_file": None,
    "label_column": None,
    "feature_columns": None,
    "header": None,
    "missing": None,
}


def stream_settings(data: dict) -> dict:
    """Every setting of :data:`STREAM_SETTINGS` as ``data`` (a call's, or a run's summary) has it, a default where
    absent (preference: the link)."""
    out = {k: data.get(k, default) for k, default in STREAM_SETTINGS.items()}
    out["link"] = out["link"] or "logistic"
    out["preference"] = out["preference"] or out["link"]
    out["sampling"] = out["sampling"] or "per_seed"
    out["task_args"] = out["task_args"] or None
    return out


def made_with_data(folder: str, data: dict, hp: Optional[dict] = None) -> bool:
    """Whether the run in ``folder`` ran on the streams of the data settings ``data``: d and K as its learner holds
    them, and every other data setting (:data:`STREAM_SETTINGS`, a default one too) as its summary.json's data
    records it. A run from before summaries recorded their data stands for the default settings only."""
    hp = run_hparams(folder) if hp is None else hp
    path = os.path.join(folder, "summary.json")
    ran = read_summary(folder).get("data") if os.path.isfile(path) else None
    if isinstance(ran, dict):
        if stream_settings(ran) != stream_settings(data):
            return False  # made on other streams (another link, preference, table, ...), named or by default
    elif any(k not in LINKED_FROM_DATA for k in data) and stream_settings(data) != stream_settings({}):
        return False  # its data settings unknown: it stands for the defaults only
    return all(hp.get(k) == v for k, v in data.items() if k in LINKED_FROM_DATA and k != "preference")


def stream_data(task: str, data_overrides: Optional[dict]) -> dict:
    """The data settings that make ``task``'s streams in a grid, d and K always named (a synthetic task's defaults
    where not given): what a run must have been made with to be paired with this call's."""
    shape = task_data(task, data_overrides)
    if task not in ALL_TASKS:  # a Task class: its init_args make the streams too (none given: a run made with none)
        shape = {"task_args": None, **shape}
    return {"dim": shape.get("dim", SYNTHETIC_DIM), "arms": shape.get("arms", StreamSpec.arms), **shape}


def finished_runs(
    out: str,
    tasks: list[str],
    methods: list[str],
    rounds: int,
    num_seeds: int,
    base_seed: int = 0,
    first_seed: int = 0,
    data_overrides: Optional[dict] = None,
) -> dict[tuple[str, str], str]:
    """{(task, method): log dir} of the newest finished run under ``out/runs`` of each, made with these settings on
    the streams of ``data_overrides`` (--dim, --arms, --data: a run on other streams is never paired with these)."""
    runs = {
        (t, m): find_run(
            os.path.join(out, "runs", t, m),
            rounds,
            num_seeds,
            base_seed,
            first_seed,
            on_streams=stream_data(t, data_overrides),
        )
        for t in tasks
        for m in methods
    }
    return {k: v for k, v in runs.items() if v}


def variant_name(method: str, folder: str) -> str:
    """``method{k=v;...}``: a run of ``method`` named with what it changed from the method's defaults (the flat keys
    ``--set`` takes, sorted); ``method`` where it changed nothing. A name holds no comma or space (a curves file's
    column)."""
    changed = flat_settings(run_settings(method, run_hparams(folder)))
    text = ";".join(f"{k}={v}" for k, v in sorted(changed.items())).replace(",", ";").replace(" ", "")
    return f"{method}{{{text}}}" if changed else method


def base_method(name: str) -> str:
    """The method of a run's name (:func:`variant_name`): ``NDB-UCB{network.width=8}`` -> ``NDB-UCB``."""
    return name.split("{", 1)[0]


def with_variants(
    runs: dict, out: str, rounds: int, num_seeds: int, base_seed: int = 0, first_seed: int = 0, data_overrides=None
) -> dict:
    """``runs`` ({(task, method): log dir}) with every other variant of each method beside it: the newest finished
    run of each other settings under ``out/runs/<task>/<method>`` on the same streams, T, seeds and base seed. Where
    a method has one variant its key stays as it is; where it has several, each is keyed by :func:`variant_name`
    (the defaults' run by the method alone), so that two settings of one method sit in one report and pair."""
    out_runs = {}
    for (task, method), folder in runs.items():
        kept = {variant_name(method, folder): folder}
        streams = stream_data(task, data_overrides)
        for other in _versions(os.path.join(out, "runs", task, method)):
            if (
                other == folder
                or find_run(other, rounds, num_seeds, base_seed, first_seed, on_streams=streams, one=True) is None
            ):
                continue
            kept.setdefault(variant_name(method, other), other)  # newest first: the newest of each settings
        if len(kept) == 1:
            out_runs[task, method] = folder
        else:
            out_runs.update({(task, name): f for name, f in kept.items()})
    return out_runs


def check_grid(tasks, methods, rounds, num_seeds, overrides, accelerator="cpu", data_overrides=None) -> None:
    """The whole grid's settings checked before any run (a ValueError naming the option): every method and task
    known, the accelerator there, each ``--set`` key taken by some method, the settings valid for each run."""
    for m in methods:
        method_spec(m)
    check_tasks(tasks)
    check_placement(accelerator)  # up front: not after the first tasks' runs
    # a key no learner run here takes (a typo: widht=5) would otherwise be dropped silently
    taken = set().union(*(accepts(method_spec(m)[0]) for m in methods)) if methods else set()
    ignored = sorted(set(overrides or {}) - taken)
    if ignored:
        moved = "".join(f"; {k} is {RENAMED['NVLDB'][k]} now" for k in ignored if k in RENAMED["NVLDB"])
        raise ValueError(
            f"--set: {ignored} is not an argument of any method run here ({', '.join(methods)}); "
            f"they take {sorted(taken)}{moved}"
        )
    check_settings(tasks, methods, rounds, num_seeds, overrides, data_overrides)


def run_grid(
    out: str,
    tasks: list[str],
    methods: list[str],
    rounds: int,
    num_seeds: int,
    base_seed: int = 0,
    overrides: Optional[dict] = None,
    log=print,
    accelerator: str = "cpu",
    data_overrides: Optional[dict] = None,
    first_seed: int = 0,
    checkpoint_every: Optional[int] = None,
    cell: Optional[tuple[int, int]] = None,
    threads: Optional[int] | str = "auto",
) -> dict[tuple[str, str], str]:
    """Run (or reuse, or go on with) every (task, method) on ``accelerator`` ("cpu" or "gpu"); returns their
    log dirs. ``data_overrides`` (e.g. ``{"dim": 20}``) apply to the synthetic tasks. Seed ids ``first_seed ..
    first_seed + num_seeds - 1``: the same streams as those seeds of a run from seed 0. A run stopped by a
    signal raises :class:`~nvldb_pl.loop.run.RunStopped` (``where``: its task and method), saved. ``checkpoint_every``:
    rounds between saves (default :data:`CHECKPOINT_EVERY`). ``cell`` (i, n): only the (task, method) pairs whose place
    in the grid's order (tasks, then methods) is i modulo n, one share of n that processes started at once (a job
    array's tasks, a cluster's workers) run apart; every check still covers the whole grid (:func:`check_grid`).
    ``threads``: each run's CPU threads (:func:`nvldb_pl.loop.run.run_experiment`)."""
    check_grid(tasks, methods, rounds, num_seeds, overrides, accelerator, data_overrides)
    done, total, began = {}, len(tasks) * len(methods), time.perf_counter()
    for place, (task, method) in enumerate(itertools.product(tasks, methods)):
        if cell is not None and place % cell[1] != cell[0]:
            continue
        if done and cell is None:  # the grid's progress, as --ray says it
            log(f"[grid]  {len(done)} of {total} done, {total - len(done)} left, {time.perf_counter() - began:.0f} s")
        learner, model = method_spec(method)
        model = merged(model, given_settings(method, overrides))
        run_dir = os.path.join(out, "runs", task, method)
        shape = task_data(task, data_overrides)
        # reused only if made with these settings: another --set, --dim or --data runs anew, beside it
        own = method_spec(method)[1]  # the method's own arguments; --set may override them
        settings = (
            method,
            {k: v for k, v in model.items() if k not in own or own[k] != v},
            stream_data(task, data_overrides),
        )
        found = find_run(run_dir, rounds, num_seeds, base_seed, first_seed, settings)
        if found:
            log(f"[reuse] {task:<10s} {method:<16s} {found}")
        else:
            start = time.perf_counter()
            data = {
                "task": task,
                "rounds": rounds,
                "num_seeds": num_seeds,
                "seed": base_seed,
                "first_seed_id": first_seed,
                **shape,
            }
            stopped = unfinished_run(run_dir, data, settings, accelerator)
            if stopped:
                log(f"[go on] {task:<10s} {method:<16s} from round {stopped[2]} ({stopped[1]})")
            try:
                summary, _ = run_experiment(
                    data,
                    model,
                    root_dir=run_dir,
                    learner=learner,
                    accelerator=accelerator,
                    checkpoint_every=checkpoint_every or CHECKPOINT_EVERY,
                    resume=stopped and stopped[:2],
                    threads=threads,
                )
            except RunStopped as stop:
                stop.where = f"{task} {method}"
                raise
            found = find_run(run_dir, rounds, num_seeds, base_seed, first_seed, settings)
            if found:  # finished: its summary and curves are what a grid reuses (NDB's V^-1 alone: 291 MB a save)
                shutil.rmtree(os.path.join(found, "checkpoints"), ignore_errors=True)
            log(
                f"[run]   {task:<10s} {method:<16s} R(T)/T {summary['R_T_over_T_mean']:.3f} "
                f"± {summary['R_T_over_T_std']:.3f}  {time.perf_counter() - start:7.1f}s"
                + (f" (rounds {stopped[2] + 1}-{rounds})" if stopped else "")
            )
        done[task, method] = found
    return done
