"""One validation style: a bad value raises ``ValueError("<field>: <what is wrong>")`` where it enters."""

from __future__ import annotations

import os

import math
from typing import Optional

import numpy as np

from . import links


def require(cond: bool, field: str, msg: str) -> None:
    """Raise ``ValueError(f"{field}: {msg}")`` unless ``cond``."""
    if not cond:
        raise ValueError(f"{field}: {msg}")


# the fields every learner takes from the data module (one source of truth: data.<field>)
LINKED_FROM_DATA = ("dim", "arms", "rounds", "num_seeds", "link")


def shadow_note(module: str) -> str:
    """Where ``module``'s top-level name was imported from an installed package while the working folder holds a
    module of that name (``./yaml.py``): the words that say which was taken (else "")."""
    import os
    import sys

    top = module.split(".")[0]
    here = os.getcwd()
    own = next(
        (f for f in (os.path.join(here, top + ".py"), os.path.join(here, top, "__init__.py")) if os.path.isfile(f)),
        None,
    )
    taken = getattr(sys.modules.get(top), "__file__", None)
    if own is None or taken is None or os.path.realpath(taken) == os.path.realpath(own):
        return ""
    return (
        f"; the installed module {top} ({taken}) was taken, not {own}: a module of one's own never shadows an "
        f"installed one, so rename it (e.g. my_{top}.py)"
    )


def import_class(path: str, base: type, field: str, what: str) -> type:
    """The subclass of ``base`` at import path ``path`` (``module.Name``), or ValueError naming ``field``."""
    import importlib

    module, _, attr = str(path).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), attr) if module else None
    except ImportError as err:
        raise ValueError(f"{field}: cannot import {path!r} ({err})") from None
    except AttributeError:
        raise ValueError(f"{field}: module {module!r} has no {attr!r}{shadow_note(module)}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{field}: {path!r} is not {what}")
    return cls


def class_path_and_args(value, field: str) -> tuple[str, Optional[dict]]:
    """A part named in the config (``data.task``, ``model.network.module``) as (name or class path, init_args or None):
    a string, or a mapping ``{class_path, init_args}``; anything else in a mapping is refused naming ``field``."""
    if not isinstance(value, dict):
        return value, None
    unknown = sorted(set(value) - {"class_path", "init_args"})
    require(
        not unknown and isinstance(value.get("class_path"), str),
        field,
        f"a class given as a mapping has class_path (and init_args), got {sorted(value)}",
    )
    args = value.get("init_args") or None
    require(args is None or isinstance(args, dict), field, f"init_args must be a mapping, got {args!r}")
    return value["class_path"], dict(args) if args else None


def check(cond: bool, field: str, msg: str) -> None:
    """:func:`require` for a model field (``data.x`` for the fields linked from data)."""
    require(cond, f"data.{field} (linked to model.{field})" if field in LINKED_FROM_DATA else f"model.{field}", msg)


FLOAT32_MAX = 3.4028234663852886e38


def check_number(value: float, field: str, strict: bool = True) -> None:
    """A hyperparameter that must be a finite number > 0 (``strict``) or >= 0 (a YAML ``.inf`` or ``.nan``
    is a float too)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = number and math.isfinite(value) and (value > 0 if strict else value >= 0)
    check(ok, field, f"must be a finite number {'>' if strict else '>='} 0, got {value!r}")
    check(  # the learners compute in float32: a larger factor overflows there (a RuntimeError deep in a step)
        value <= FLOAT32_MAX,
        field,
        f"must be at most {FLOAT32_MAX:.4g} (float32's largest, in which the learner computes), got {value!r}",
    )


def check_integer(value, field: str, low: int) -> None:
    """A hyperparameter that must be an integer >= ``low`` (from Python, a sweep's JSON or a script's
    ``--set``, a 1.5 or a "4" is refused here rather than deep inside a run)."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= low
    check(ok, field, f"must be an integer >= {low}, got {value!r}")


def check_linked(dim: int, arms: int, rounds: int, num_seeds: int, link: str) -> None:
    """The fields every learner takes from the data module, checked first (naming ``data.<field>``)."""
    check(link in links.LINKS, "link", f"{link!r} is not a known link function; choose one of {list(links.LINKS)}")
    for name, value in (("dim", dim), ("rounds", rounds), ("num_seeds", num_seeds)):
        check_integer(value, name, 1)
    check_integer(arms, "arms", 2)


def config_differences(saved: dict, current: dict, prefix: str, skip=()) -> list[str]:
    """Every field (but ``skip``) whose checkpointed value differs from the config's (resume); a group of settings
    (a mapping in both) field by field, ``model.network.width``."""
    out = []
    for k, v in current.items():
        if k in saved and k not in skip and saved[k] != v:
            if isinstance(v, dict) and isinstance(saved[k], dict):
                out += config_differences(saved[k], v, f"{prefix}{k}.")
            else:
                out.append(f"{prefix}{k}: checkpoint {saved[k]!r}, config {v!r}")
    return out


def refuse_other_state(held: dict, own: dict, what: str, legacy=()) -> None:
    """Raise unless the state dict ``held`` (a checkpoint's) has the keys and tensor shapes of ``own`` (the
    learner this code builds from the same config): a file saved by another version of the package, whose
    learner kept other buffers, would otherwise fail inside torch's ``load_state_dict`` with a traceback.
    ``legacy``: keys an older version saved that the learner drops on load."""
    missing, unexpected = sorted(set(own) - set(held)), sorted(set(held) - set(own) - set(legacy))
    shapes = [
        f"{k} {list(held[k].shape)} (here {list(v.shape)})"
        for k, v in own.items()
        if k in held and hasattr(held[k], "shape") and tuple(held[k].shape) != tuple(v.shape)
    ]
    differ = (
        ([f"it lacks {missing}"] if missing else [])
        + ([f"it holds {unexpected} besides"] if unexpected else [])
        + ([f"other shapes: {'; '.join(shapes)}"] if shapes else [])
    )
    if differ:
        raise ValueError(
            f"{what}'s state is not the one this code's learner keeps ({', '.join(differ)}): it was saved "
            f"by another version of nvldb_pl; go on with that version, or start a new run"
        )


def refuse_other_config(*differences: list[str]) -> None:
    """Raise naming every field of ``differences`` (lists from :func:`config_differences`), if any."""
    differ = [d for found in differences for d in found]
    if differ:
        raise ValueError("the checkpoint was made with another config: " + "; ".join(differ))


def typed_value(cls: type, name: str, value, field: str):
    """``value`` for argument ``name`` of ``cls.__init__``, parsed by the argument's annotated type, one way
    wherever a value arrives as text (``--set``, ``--vary``, ``--grid``, the live API's keyword arguments):
    a bool is ``true``/``false`` (any case) or a bool, an int an integer, a float a number, a str a string,
    None (JSON's null) an Optional's None; anything that is not clearly a value of the type is refused naming
    ``field``. Arguments of other types (unions of classes, dicts) are passed as given."""
    import typing

    import inspect

    owner = next(  # the class whose constructor names the argument (a subclass's **kwargs pass it up its MRO)
        (k for k in cls.__mro__ if "__init__" in vars(k) and name in inspect.signature(k.__init__).parameters), cls
    )
    try:
        hints = typing.get_type_hints(owner.__init__)
    except Exception:  # an annotation that does not resolve: take the value as given
        return value
    hint = hints.get(name)
    return value if hint is None else _typed(hint, name, value, field)


def _typed(hint, name: str, value, field: str):
    """:func:`typed_value` for the annotation ``hint``; a group of settings (a dataclass) given as a mapping, field
    by field (``network.width``)."""
    import dataclasses
    import typing

    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        hints = typing.get_type_hints(hint)
        return {k: _typed(hints[k], f"{name}.{k}", v, field) if k in hints else v for k, v in value.items()}
    args = typing.get_args(hint)
    optional = (
        typing.get_origin(hint) in (typing.Union, getattr(__import__("types"), "UnionType", None))
        and type(None) in args
    )
    if optional:
        rest = [a for a in args if a is not type(None)]
        if value is None:  # (JSON's null; the text "none" may be a value, as self_duel_test's)
            return None
        if len(rest) != 1:
            return value
        hint = rest[0]
    text = isinstance(value, str)
    shown = f"{name}={value!r}"
    if isinstance(value, np.generic) and not isinstance(value, np.bool_):  # a value read out of a numpy array
        value = value.item()
    if hint is bool:
        if isinstance(value, bool):
            return value
        if text and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ValueError(f"{field}: {shown} is not a bool; give true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text:
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ValueError(f"{field}: {shown} is not an integer")
    if hint is float:  # an int is a float's value too, kept as given (a sweep's row identity)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        if text:
            for parse in (int, float):
                try:
                    return parse(value.strip())
                except ValueError:
                    pass
        raise ValueError(f"{field}: {shown} is not a number")
    if hint is str:
        if text:
            return value
        raise ValueError(f"{field}: {shown} is not a string")
    return value


def typed_args(cls: type, args: dict, field: str) -> dict:
    """:func:`typed_value` for every entry of ``args`` that ``cls.__init__`` takes (the others as given)."""
    return {k: typed_value(cls, k, v, field) for k, v in args.items()}


def check_memory(need: int, what: str, fields: str = "data.num_seeds / data.rounds") -> None:
    """Refuse up front a config whose preallocated state cannot fit in memory, with the numbers."""
    avail = available_memory_bytes()
    if need > 0.9 * avail:
        raise ValueError(
            f"{fields}: this config preallocates about {need / 2**30:.2f} GiB ({what}) but "
            f"{avail / 2**30:.2f} GiB of memory is available; lower them, or spread the seeds "
            f"over processes"
        )


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux), else physical memory, else no limit."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62
