"""What older versions of the package wrote differently, in one versioned table, oldest first.

Each :class:`Migration` is one change of what a file holds: the settings a learner's saved hyperparameters predate
(filled in as they were then), its state keys renamed or no longer kept, a setting renamed. A checkpoint (``format_version``) and a live save record the newest version they were
written at; reading one applies the migrations after it (a file without the key: all of them, which is how files
from before the table read). Every step only fills in what is absent or renames what is old, so applying it to a
file that does not need it changes nothing. Results files (sweep rows, ``hparams.yaml``) hold no version: all apply.

Used by the learners (:meth:`nvldb_pl.learners.base.DuelingLearner.upgraded_state`, their checkpoint hook), the
live API and the reports. This module imports nothing of the package, so that every layer may read it.

Adding a change: append a :class:`Migration` with the next version; never edit an entry a release has written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional


def _ndb_rule_to_strategy(hparams: dict) -> dict:
    """NDB's ``rule`` (``ucb``/``ts``) is the ``strategy`` ``ucb_asym``/``ts_asym`` (NVLDB's name for it)."""
    if "rule" not in hparams:
        return hparams
    return {**{k: v for k, v in hparams.items() if k != "rule"}, "strategy": f"{hparams['rule']}_asym"}


# groups of settings that are one mapping now: group -> {old flat name: its field}
NESTED = {
    "self_duel": {
        "self_duel_test": "test",
        "escape_rate": "escape_rate",
        "self_duel_width": "width",
        "second_arm": "second_arm",
    },
    "sampler": {"sample_size": "size", "sample_weighting": "weighting"},
    "compute": {"backward": "backward", "history_pass": "history_pass"},
    "network": {  # (the old ``network``, a module of one's own, is the group's ``module``)
        **{name: name for name in ("width", "depth", "parametrization", "activation", "bias", "init")},
        "network": "module",
    },
}


def _nesting(*groups: str) -> Callable[[dict], dict]:
    """A rewrite putting the flat settings of ``groups`` (:data:`NESTED`) into their mappings. A file that has a
    group's mapping keeps it (the flat ones there were only filled in by the steps before, as absent)."""

    def nest(hparams: dict) -> dict:
        out = dict(hparams)
        for group in groups:
            names = NESTED[group]
            given = out.get(group)  # the group's mapping, where a group's old name is its own only of its fields
            mapped = group in out and (
                group not in names or isinstance(given, dict) and set(given) <= {*names.values()}
            )
            held = out.pop(group) if mapped else None
            flat = {new: out.pop(old) for old, new in names.items() if old in out}
            if mapped or flat:
                out[group] = held if mapped else flat
        return out

    return nest


@dataclass(frozen=True)
class Migration:
    """One change, and how a file written before it is read.

    version: its place in the table (1, 2, ...). what: one line, the change. settings: learner class name ->
    the settings its saved hyperparameters predate, as they were then (filled in where absent). rewrite: learner
    class name -> a function of the saved hyperparameters (a renamed setting). renamed_state: learner class
    name -> {old state key: new}. dropped_state: learner class name -> state keys no longer kept. modules:
    {old module name under ``nvldb_pl.``: its new name}."""

    version: int
    what: str
    settings: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    rewrite: Mapping[str, Callable[[dict], dict]] = field(default_factory=dict)
    renamed_state: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    dropped_state: Mapping[str, tuple] = field(default_factory=dict)


_PARAMETRIZATION = {"parametrization": "ntk", "bias": False, "feature_dim": None, "distinct_arms": False}

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the network's parametrization settings: files before them ran eq. (nn) literally, the rule's a2 free",
        settings={"NVLDB": _PARAMETRIZATION, "NDB": _PARAMETRIZATION},
    ),
    Migration(
        2,
        "NDB no longer subclasses NVLDB: the (unused) V it kept is dropped",
        dropped_state={"NDB": ("V",)},
    ),
    Migration(
        3,
        "NVLDB's self-duel test: files before it played the rule's own pair",
        settings={"NVLDB": {"self_duel_test": "none", "escape_rate": 1.0}},  # (the rate unused without the test)
    ),
    Migration(
        4,
        "the deep test's width and second arm: files before them used beta and the rule's a2",
        settings={"NVLDB": {"self_duel_width": None, "second_arm": "rule"}},
    ),
    Migration(
        5,
        "the package laid out by role (maths, environments, learners, loop, machinery, experiments)",
    ),
    Migration(
        6,
        "one name per idea: environments/streams.py (the random streams) is environments/seeding.py",
    ),
    Migration(
        7,
        "the deep test an object owning its Gram, shared with NDB",
        renamed_state={
            "NVLDB": {"U": "self_duel.gram.U", "Zinv": "self_duel.gram.Zinv"},
            "NDB": {"Vinv": "gradient_gram.Zinv", "U": "gradient_gram.U"},
        },
    ),
    Migration(
        8,
        "one name for the rule: NDB's rule (ucb, ts) is its strategy (ucb_asym, ts_asym)",
        rewrite={"NDB": _ndb_rule_to_strategy},
    ),
    Migration(
        9,
        "the activation a setting: files before it were ReLU in every layer",
        settings={"NVLDB": {"activation": "relu"}, "NDB": {"activation": "relu"}},
    ),
    Migration(
        10,
        "NVLDB's prior toward the initial weights on by default (w_reg 0.1): files without the setting ran 0",
        settings={"NVLDB": {"w_reg": 0.0}},
    ),
    Migration(
        11,
        "the learners plain torch algorithms: the regret metric is the Lightning adapter's (a checkpoint keeps it)",
        dropped_state={"DuelingLearner": ("regret.seed_ids", "regret.cum_avg", "regret.cum_weak", "regret.rounds")},
    ),
    Migration(
        12,
        "a live save records the map its contexts are read through (standardize, input_map): a save before it, read "
        "by nvldb_pl.live.files, reads them as given; a package before it would drop the map",
    ),
    Migration(
        13,
        "NVLDB's self-duel settings nested: self_duel_test, escape_rate, self_duel_width, second_arm are "
        "self_duel's test, escape_rate, width, second_arm",
        rewrite={"NVLDB": _nesting("self_duel")},
    ),
    Migration(
        14,
        "NVLDB's sample_size, sample_weighting are sampler's size, weighting; backward, history_pass compute's",
        rewrite={"NVLDB": _nesting("sampler", "compute")},
    ),
    Migration(
        15,
        "the network's width, depth, parametrization, activation, bias, init are network's fields, and a network of "
        "one's own (network) is network's module",
        rewrite={"NVLDB": _nesting("network"), "NDB": _nesting("network")},
    ),
)

# settings that are now a field of a mapping, by their old names (a config file or a command line naming them)
RENAMED = {
    "NVLDB": {
        old: f"{group}.{new}" for group, names in NESTED.items() for old, new in names.items() if old not in NESTED
    }
}
VERSION = MIGRATIONS[-1].version  # what a file written now records (``format_version``)


def check_version(since) -> Optional[int]:
    """A file's recorded ``format_version``: None (a file from before the table) or a version this package knows;
    a ValueError for anything else (a newer package's file would be read by this one's rules)."""
    if since is None:
        return None
    if isinstance(since, bool) or not isinstance(since, int):
        raise ValueError(f"format_version: {since!r} is not a version number (1 to {VERSION})")
    if since > VERSION:
        raise ValueError(
            f"format_version {since}: written by a newer nvldb_pl (this one reads up to {VERSION}); "
            f"update the package to read it"
        )
    if since < 1:
        raise ValueError(f"format_version: {since!r} is not a version number (1 to {VERSION})")
    return since


def _after(since: Optional[int]) -> tuple[Migration, ...]:
    return tuple(m for m in MIGRATIONS if m.version > (check_version(since) or 0))


def upgrade_settings(hparams: Mapping, learner, since: Optional[int] = None) -> dict:
    """Saved hyperparameters of ``learner`` written at version ``since`` (None: before the table), in this version's
    terms: settings renamed, those they predate filled in. ``learner``: a class name, as a checkpoint names it, or the
    lineage of the class (its name and the package's classes it derives from, most derived first: a user's subclass
    of NVLDB gets NVLDB's migrations)."""
    lineage = (learner,) if isinstance(learner, str) else tuple(learner)
    out = dict(hparams)
    for m in _after(since):  # in order: a later rewrite sees what an earlier step filled in
        name = next((n for n in lineage if n in m.settings), None)
        out = {**m.settings.get(name, {}), **out}
        name = next((n for n in lineage if n in m.rewrite), None)
        if name is not None:
            out = m.rewrite[name](out)
    return out


def renamed_settings(settings: Mapping, lineage: tuple[str, ...]) -> dict:
    """A config's settings of a learner (``lineage``: its class names, most derived first) with the old names of
    renamed settings in their new places, and nothing filled in (a config gives only what it gives)."""
    out = dict(settings)
    for m in MIGRATIONS:
        name = next((n for n in lineage if n in m.rewrite), None)
        if name is not None:
            out = m.rewrite[name](out)
    return out


def upgrade_state(state: Mapping, lineage: tuple[str, ...], since: Optional[int] = None) -> dict:
    """A saved state dict in this version's terms: for the learner classes ``lineage`` (the package's classes a
    learner is or derives from, by name), the keys no longer kept left out and the renamed ones under their new
    names, for the migrations after version ``since``."""
    renamed, dropped = {}, set()
    for m in _after(since):
        for name in lineage:
            renamed.update(m.renamed_state.get(name, {}))
            dropped.update(m.dropped_state.get(name, ()))
    return {renamed.get(k, k): v for k, v in state.items() if k not in dropped}
