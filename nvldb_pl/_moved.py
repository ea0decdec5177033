"""The modules' names before the package was laid out by role: each old name imports its new module, so a config,
a saved learner or a user's code written against the old layout still runs (``nvldb_pl.module.NVLDB`` is
``nvldb_pl.learners.nvldb.NVLDB``)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "links": "maths.links",
    "network": "maths.network",
    "backward": "maths.backward",
    "objective": "maths.objective",
    "gram": "maths.gram",
    "selection": "maths.selection",
    "selfduel": "maths.selfduel",
    "seedwise": "maths.seedwise",
    "user_network": "maths.user_network",
    "checks": "maths.checks",
    "streams": "environments.seeding",
    "environments.streams": "environments.seeding",  # one name per idea: stream.py is the round stream
    "tasks": "environments.tasks",
    "uci": "environments.uci",
    "metrics": "environments.regret",
    "learner": "learners.base",
    "neural": "learners.neural",
    "module": "learners.nvldb",
    "registry": "learners.registry",
    "baselines": "learners",
    "baselines.gp": "learners.gp",
    "baselines.linear": "learners.linear",
    "baselines.ndb": "learners.ndb",
    "baselines.random_pair": "learners.random_pair",
    "baselines.vacdb": "learners.vacdb",
    "callbacks": "loop.callbacks",
    "data": "loop.data",
    "run": "loop.run",
    "trainer_checks": "loop.trainer_checks",
    "host": "machinery.host",
    "devices": "machinery.devices",
    "checkpoint": "machinery.checkpoint",
    "resume": "machinery.resume",
    "shards": "machinery.shards",
    "parallel": "machinery.parallel",
    "graphs": "machinery.graphs",
    "own_defaults": "machinery.own_defaults",
    "messages": "machinery.messages",
    "grid": "experiments.grid",
    "report": "experiments.report",
}


class OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import nvldb_pl.<old>`` gives the module now at ``nvldb_pl.<new>`` (the same object, not a copy)."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname[len("nvldb_pl.") :] if fullname.startswith("nvldb_pl.") else None
        if old in MOVED:
            return importlib.util.spec_from_loader(fullname, self, is_package=old == "baselines")
        return None

    def create_module(self, spec):
        return importlib.import_module("nvldb_pl." + MOVED[spec.name[len("nvldb_pl.") :]])

    def exec_module(self, module):
        pass  # the module ran under its new name


def install() -> None:
    if not any(isinstance(f, OldNames) for f in sys.meta_path):
        sys.meta_path.insert(0, OldNames())  # before the path finders: a stale folder (__pycache__) must not win
