"""A learner's settings as it saves them: a dict read by attribute, and the constructor arguments they are collected
from (:meth:`nvldb_pl.learners.base.DuelingLearner.save_hyperparameters`); :class:`LinkedSettings`, the first fields
of every built-in learner's typed, frozen settings (the values it reads: ``self.settings``); :class:`Options`, a group of
rarely changed settings given as one mapping (``self_duel``, ``sampler``, ``compute``)."""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..maths.checks import check, check_integer, check_linked, check_number


class Settings(dict):
    """A learner's settings as it saved them (:meth:`~nvldb_pl.learners.base.DuelingLearner.save_hyperparameters`): a dict whose keys read
    as attributes too (``hp.lr``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self[name] = value


def _arguments(frame) -> dict:
    """The arguments of the ``__init__`` call running in ``frame``, by name (``**kwargs`` spread), without self."""
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    out = {k: frame.f_locals[k] for k in code.co_varnames[1:n] if k in frame.f_locals}
    if code.co_flags & inspect.CO_VARKEYWORDS:
        out.update(frame.f_locals.get(code.co_varnames[n + bool(code.co_flags & inspect.CO_VARARGS)], {}))
    return out


def init_arguments(obj, frame) -> dict:
    """Every argument of the ``__init__`` calls building ``obj``, from ``frame`` (the innermost) outward, by name: a
    subclass's value over its base's, as Lightning's ``save_hyperparameters`` collects them."""
    given = {}
    while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is obj:
        given.update(_arguments(frame))  # the innermost first: an outer (subclass) call's arguments win
        frame = frame.f_back
    return given


@dataclass(frozen=True)
class LinkedSettings:
    """The fields every learner takes from the data module (checked by the learner's base:
    :func:`nvldb_pl.maths.checks.check_linked`); a learner's typed settings extend it with its own, each with its value
    in force (a default derived from others filled in), frozen: what its steps read (``self.settings``), while its
    saved hparams keep the same values for a checkpoint."""

    dim: int
    arms: int
    rounds: int
    num_seeds: int
    link: str

    @classmethod
    def of(cls, hp: dict):
        """From a learner's hyperparameters (the names it does not know are a subclass's own; a group of
        :class:`Options`, saved as a mapping, read as its class)."""
        out = {}
        for f in fields(cls):
            if isinstance(f.default, Options):
                out[f.name] = type(f.default).of(hp.get(f.name), f.name)
            elif f.name in hp:
                out[f.name] = hp[f.name]
        return cls(**out)

    def checked(self):
        """Every constraint on these settings, each refusal naming its field (:func:`check_fields`); then self. A
        learner's settings extend it with their own table and cross-field rules."""
        check_linked(self.dim, self.arms, self.rounds, self.num_seeds, self.link)
        return self


def check_fields(s, integers: dict = {}, numbers: dict = {}, choices: dict = {}, rules=tuple) -> None:
    """One learner's table of constraints on its settings ``s``, by field path (``sampler.size`` reads
    ``s.sampler.size``; a value None, a default, is not checked): ``integers`` {field: the lowest allowed},
    ``numbers`` {field: strict, > 0, or not, >= 0, finite}, ``choices`` {field: the values allowed}; then the
    cross-field rules, ``rules()`` (read once the table holds) giving (holds, field, why it is refused) in order."""

    def value(path):
        v = s
        for name in path.split("."):
            v = getattr(v, name)
        return v

    for path, low in integers.items():
        if value(path) is not None:
            check_integer(value(path), path, low)
    for path, strict in numbers.items():
        if value(path) is not None:
            check_number(value(path), path, strict)
    for path, allowed in choices.items():
        check(value(path) in allowed, path, f"{value(path)!r} is not one of {list(allowed)}")
    for holds, path, why in rules():
        check(holds, path, why)


@dataclass(frozen=True)
class Options:
    """A group of settings given as one mapping (in YAML ``sampler: {size: 256}``, on the command line
    ``--model.sampler.size 256``): the fields left out keep their defaults; saved as a mapping (:meth:`saved`)."""

    @classmethod
    def of(cls, value: Any, name: str) -> "Options":
        """From a mapping (a saved file's, a sweep's ``--set sampler={size: 8}``), an instance, or None (the
        defaults); anything else, or a key that is not a field, is refused naming ``name`` (the setting)."""
        if value is None or isinstance(value, cls):
            return value or cls()
        names = [f.name for f in fields(cls)]
        check(isinstance(value, dict), name, f"{value!r} is not a mapping of {names}")
        unknown = [k for k in value if k not in names]
        check(not unknown, f"{name}.{unknown[0] if unknown else ''}", f"not one of {names}")
        return cls(**value)

    def saved(self) -> dict:
        """The mapping a learner's hparams hold."""
        return asdict(self)


def merged(*layers: dict) -> dict:
    """The settings of ``layers``, each over the ones before it; a group of :class:`Options` given as a mapping
    (``network: {width: 8}``) merges field by field with the one before, and a dotted key (``network.width``) is
    that group's field (but ``data.*``, a grid's data settings, stays as it is)."""
    out: dict = {}
    for layer in layers:
        for key, value in layer.items():
            group, dot, name = key.partition(".")
            if dot and group != "data":
                key, value = group, {name: value}
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                value = {**out[key], **value}
            out[key] = value
    return out


def flat_settings(settings: dict) -> dict:
    """:func:`merged`'s inverse for display: a group's mapping as its dotted fields (``network.width``)."""
    return {
        f"{k}.{f}" if isinstance(v, dict) else k: fv if isinstance(v, dict) else v
        for k, v in settings.items()
        for f, fv in (v.items() if isinstance(v, dict) else [(None, v)])
    }
