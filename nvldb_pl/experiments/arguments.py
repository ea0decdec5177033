"""The experiment commands' arguments, checked before any run (``reproduce.py``, ``sweep.py``, ``pair.py``):
``--set``/``--data`` parsed, the tasks named, and every (task, method) learner built once on torch's meta device, so
a bad value is named in one line before the first run rather than after the runs before it.
"""

from __future__ import annotations

import json
from typing import Optional

import torch

from ..environments import uci
from ..environments.stream import ALL_TASKS, StreamSpec
from ..environments.tasks import make_task
from ..learners.registry import init_args, learner_class, method_spec
from ..learners.settings import merged
from ..loop.data import BanditDataModule
from ..maths.checks import typed_args
from ..machinery.yaml_files import read_yaml

SYNTHETIC_DIM = StreamSpec.dim  # d of the synthetic tasks unless --dim (the paper's 5)
# Data settings of the tasks beyond their name (UCI: block-encoded dimension, arms, preference).
TASK_DATA = {
    "statlog": {"dim": 63, "arms": 7, "preference": "deterministic"},
    "magic": {"dim": 20, "arms": 2},
    "covertype": {"dim": 378, "arms": 7},
}


def accepts(learner: str) -> set[str]:
    return init_args(learner_class(learner))


def task_data(task: str, data_overrides: Optional[dict]) -> dict:
    """The data settings of ``task`` in a grid: a UCI task's own shape (its d, K, preference: --dim and --arms do
    not apply) with the other --data settings, a synthetic or table task's settings as given but for the UCI tasks'
    files (``data_dir``; ``data_file`` but for a table), which it reads none of."""
    given = dict(data_overrides or {})
    if task in TASK_DATA:
        return {**{k: v for k, v in given.items() if k not in ("dim", "arms")}, **TASK_DATA[task]}
    unread = ("data_dir",) if task == "table" else ("data_dir", "data_file")  # the UCI tasks' files: not read here
    return {k: v for k, v in given.items() if k not in unread}


def given_settings(method: str, overrides: Optional[dict]) -> dict:
    """The ``--set`` values ``method``'s learner takes, each parsed by the argument's type (``False`` is
    refused, not read as the text "False", which counts as true); a value that would change what defines the
    method (its rule, its variance weighting, the literal reading's settings) is refused: the run would be
    reported under a name it did not run."""
    learner, own = method_spec(method)
    cls = learner_class(learner)
    taken = typed_args(cls, {k: v for k, v in (overrides or {}).items() if k in accepts(learner)}, "--set")
    for key, value in taken.items():
        fixed = own.get(key)
        if isinstance(value, dict) and isinstance(fixed, dict):  # a group the method sets in part: field by field
            defining = [(f"{key}.{f}", v, fixed[f]) for f, v in value.items() if f in fixed]
        else:
            defining = [(key, value, fixed)] if key in own else []
        for name, v, o in defining:
            if v != o:
                raise ValueError(
                    f"--set: {name}={v!r} changes what {method} is ({name}={o!r}); run the method that names "
                    f"that setting instead (the report would show this run under {method}'s name)"
                )
    return taken


def check_settings(
    tasks: list[str],
    methods: list[str],
    rounds: int,
    num_seeds: int,
    overrides: Optional[dict] = None,
    data_overrides: Optional[dict] = None,
) -> None:
    """Every (task, method) of a grid built once, before any run: a bad ``--set`` value (``width=0``,
    ``beta=.inf``), a ``--dim`` or a memory need a method cannot meet, or a missing UCI file, is named now,
    not after the runs before it (hours at full size). The learners are built on torch's meta device:
    their checks run, nothing is allocated or drawn."""
    for task in tasks:
        shape = task_data(task, data_overrides)
        if task in uci.UCI_TASKS:
            uci.files(task)
        else:
            BanditDataModule(task=task, rounds=rounds, num_seeds=num_seeds, **shape)
        for method in methods:
            learner, model = method_spec(method)
            model = merged(model, given_settings(method, overrides))
            check_learner(f"{method} on {task}", learner, model, shape, rounds, num_seeds)


def check_learner(where: str, learner: str, model: dict, shape: dict, rounds: int, num_seeds: int) -> None:
    """``learner`` built with ``model`` on torch's meta device (its checks run; nothing is allocated or
    drawn); a bad value is raised as a ValueError starting with ``where``."""
    linked = {
        "dim": shape.get("dim", SYNTHETIC_DIM),
        "arms": shape.get("arms", StreamSpec.arms),
        "rounds": rounds,
        "num_seeds": num_seeds,
        "link": shape.get("link", "logistic"),
    }
    try:
        with torch.device("meta"):
            learner_class(learner)(**linked, **model)
    except (ValueError, TypeError) as err:  # TypeError: a value of another type (width="abc")
        raise ValueError(f"{where}: {err}") from None


def parse_overrides(items: list[str], flag: str = "--set") -> dict:
    """``key=value`` strings -> dict, values parsed as JSON where they parse (numbers, true/false), a list or mapping
    as YAML's flow style reads it (``[f1, f2]``, ``{a: 1e-3}``: as main.py's ``--data.KEY`` takes it, ``1e-3`` a
    number), else the text."""
    import yaml

    result = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"{flag}: expected key=value, got {item!r}")
        key, value = item.split("=", 1)
        try:
            result[key] = json.loads(value)
        except json.JSONDecodeError:
            result[key] = value
            if value.strip()[:1] in ("[", "{"):  # a list or mapping: a string's characters were taken one by one
                try:
                    result[key] = read_yaml(value)
                except yaml.YAMLError as err:
                    raise ValueError(
                        f"{flag}: {key}={value} is not a list or mapping ({' '.join(str(err).split())})"
                    ) from None
    return merged(result)  # network.width=8: the field of the group


def check_tasks(tasks: list[str]) -> None:
    """Up front, not after the runs of the tasks before a misspelt one."""
    unknown = [t for t in tasks if t not in ALL_TASKS and "." not in t]
    if unknown:
        raise ValueError(
            f"--tasks: unknown {unknown}; choose from {list(ALL_TASKS)} or give the import path of a "
            f"nvldb_pl.environments.tasks.Task subclass"
        )
    for t in tasks:
        if t not in ALL_TASKS:
            make_task(t, field="--tasks")


def check_positive(name: str, value: int) -> int:
    if value < 1:
        raise ValueError(f"{name}: must be >= 1, got {value}")
    return value
