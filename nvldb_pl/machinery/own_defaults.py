"""A class named by ``class_path`` runs with its own defaults: nothing inherited silently from the default class.

jsonargparse starts ``model`` from the default class (:class:`nvldb_pl.learners.nvldb.NVLDB`) with every argument
at NVLDB's default, and when a config or the command line names another class it carries over each of
those values the new class accepts. A subclass whose own default is ``lr=0.01`` then runs with NVLDB's
``lr=0.001``, silently. :func:`restore_own_defaults` puts back the chosen class's own default for every
argument that the user did not give (on the command line or in a ``--config`` file) and that holds the
default class's value; values the user gave are kept, also where they were given for another class.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from typing import Iterable, Optional

import yaml

NOT_GIVEN = inspect.Parameter.empty


def own_defaults(cls: type) -> dict:
    """The arguments of ``cls.__init__`` that have a default, with it."""
    return {
        name: p.default
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.default is not NOT_GIVEN and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def _keys_of(value) -> set[str]:
    """The argument names a group's value gives: ``{class_path, init_args: {...}}`` or ``{name: value}``; a
    mapping's fields as ``name.field`` (``network: {width: 8}`` gives ``network.width``)."""
    if not isinstance(value, dict):
        return set()
    given = {k: v for k, v in value.items() if k not in ("class_path", "init_args", "dict_kwargs")}
    given.update(value.get("init_args") or {})
    return {f"{k}.{f}" for k, v in given.items() if isinstance(v, dict) for f in v} | {
        k for k, v in given.items() if not isinstance(v, dict)
    }


def _fields(value) -> Optional[dict]:
    """A group of settings as {field: value}: a dataclass instance or a mapping; else None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return dict(value) if isinstance(value, dict) else None


def _read_yaml(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # named by check_config_files or the parser
        return None


def given_keys(args: Iterable[str], group: str) -> set[str]:
    """The names of ``group``'s arguments (``model``, ``data``) that ``args`` (a command line after the
    subcommand) gives, directly (``--model.lr``, ``--model.init_args.lr``, ``--model '{...}'``) or in a
    ``--config`` file."""
    args, keys = list(args), set()
    pairs = []
    for i, a in enumerate(args):
        flag, sep, value = a.partition("=")
        if not sep:
            value = args[i + 1] if i + 1 < len(args) else ""
        pairs.append((flag, value))
    for flag, value in pairs:
        if flag in ("--config", "-c"):
            config = _read_yaml(value) if os.path.isfile(value) else None
            if isinstance(config, dict):
                keys |= _keys_of(config.get(group))
        elif flag.startswith(f"--{group}.init_args."):
            keys.add(".".join(flag[len(f"--{group}.init_args.") :].split(".")[:2]))
        elif flag.startswith(f"--{group}.") and flag != f"--{group}.class_path":
            keys.add(".".join(flag[len(f"--{group}.") :].split(".")[:2]))
        elif flag == f"--{group}":
            try:
                keys |= _keys_of(json.loads(value))
            except (json.JSONDecodeError, TypeError):
                keys |= _keys_of(yaml.safe_load(value) if value.lstrip().startswith("{") else None)
    return keys


def restore_own_defaults(
    init_args: dict, chosen: type, default: type, given: set[str], skip: Iterable[str] = ()
) -> list[str]:
    """Set, in place, each argument of ``init_args`` (the parsed values for class ``chosen``) that is not
    in ``given`` and equals ``default``'s default to ``chosen``'s own default where the two differ; a group of
    settings (``network``) field by field (``network.width`` in ``given``: kept). Returns the names changed."""
    if chosen is default:
        return []
    mine, theirs, changed = own_defaults(chosen), own_defaults(default), []
    for name, value in list(init_args.items()):  # (a parsed group's fields come as ``network.width``)
        group, dot, field = name.partition(".")
        if dot and group in mine and group in theirs and name not in given:
            own, other = _fields(mine[group]) or {}, _fields(theirs[group]) or {}
            if field in own and field in other and _same(value, other[field]) and not _same(own[field], other[field]):
                init_args[name] = own[field]
                changed.append(name)
            continue
        if name in given or name in skip or name not in mine or name not in theirs:
            continue
        if any(g.startswith(name + ".") for g in given):
            continue
        if _same(value, theirs[name]) and not _same(mine[name], theirs[name]):
            init_args[name] = mine[name]
            changed.append(name)
    return changed


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # an object without a plain equality
        return a is b


def class_of(path: Optional[str]):
    """The class at import path ``path`` (``None`` if it does not import)."""
    if not path or "." not in path:
        return None
    import importlib

    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
