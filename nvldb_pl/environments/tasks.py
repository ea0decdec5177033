"""Synthetic utility functions of the paper's appendix ("Synthetic Dataset").

Each task draws an unknown parameter Theta per seed and maps contexts to utilities:

* ``cos``:       u(x) = cos(3 Theta^T x),            Theta in R^d, Theta ~ U[-1,1]^d
* ``square``:    u(x) = 10 (Theta^T x)^2,            Theta in R^d, Theta ~ U[-1,1]^d
* ``quadratic``: u(x) = x^T Theta Theta^T x,         Theta in R^{d x d}, entries ~ U[-1,1]

The appendix writes Theta in R^d for all three; read literally, ``quadratic`` would be
``square`` / 10. We follow the neural-bandit literature it cites (x^T A^T A x with a d x d
matrix A), i.e. Theta is a d x d matrix and u(x) = ||Theta^T x||^2.

Shapes: ``theta`` is [S, d] (or [S, d, d] for quadratic), contexts are [S, K, d] and the
utilities returned are [S, K]. All in float64 so that regret arithmetic is exact enough.

A task of one's own subclasses :class:`Task` and is named by its import path in ``data.task``
(``data.task: mymodule.MyTask``, or ``{class_path: mymodule.MyTask, init_args: {...}}``), as
``docs/extending.md`` shows; the three built-in names stay.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..maths.checks import import_class, typed_args

TASKS = ("cos", "square", "quadratic")


def draw_theta(task: str, dim: int, rng: np.random.Generator) -> np.ndarray:
    """One seed's unknown parameter: [d] or [d, d] for ``quadratic``."""
    shape = (dim, dim) if task == "quadratic" else (dim,)
    return rng.uniform(-1.0, 1.0, size=shape)


def utility(task: str, theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Utilities u(x) for a batch. theta: [S, d] or [S, d, d]; x: [S, K, d] -> [S, K]."""
    if task == "quadratic":
        proj = np.einsum("skd,sde->ske", x, theta)  # Theta^T x per arm
        return np.einsum("ske,ske->sk", proj, proj)
    z = np.einsum("skd,sd->sk", x, theta)
    if task == "cos":
        return np.cos(3.0 * z)
    return 10.0 * z * z


def draw_contexts(num_rounds: int, arms: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """Appendix listing 1: x ~ U[-1,1]^d, then x / ||x||_2. Returns [rounds, K, d]."""
    x = rng.uniform(-1.0, 1.0, size=(num_rounds, arms, dim))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class Task:
    """A synthetic dueling task: contexts, and a utility u(x) with an unknown parameter drawn per seed.

    The stream draws each seed's parameter with :meth:`draw_parameter` from that seed's own
    generator and each round's contexts with :meth:`draw_contexts` (so a seed's draws do not depend on
    the other seeds), then asks :meth:`utility` for the arms' utilities; the learner never sees them.
    Subclasses implement :meth:`draw_parameter` and :meth:`utility`; the constructor's keyword
    arguments are the task's ``init_args``.
    """

    def draw_parameter(self, dim: int, rng: np.random.Generator) -> np.ndarray:
        """One seed's unknown parameter (any shape), drawn from ``rng`` only."""
        raise NotImplementedError

    def utility(self, theta: np.ndarray, x: np.ndarray) -> np.ndarray:
        """u(x): theta [S, ...] (the seeds' parameters stacked), x [S, K, d] -> [S, K] float64."""
        raise NotImplementedError

    def draw_contexts(self, num_rounds: int, arms: int, dim: int, rng: np.random.Generator) -> np.ndarray:
        """[rounds, K, d] contexts; by default the paper's: U[-1, 1]^d scaled to unit norm."""
        return draw_contexts(num_rounds, arms, dim, rng)


class BuiltinTask(Task):
    """``cos``, ``square`` or ``quadratic`` of the paper's appendix (the functions above)."""

    def __init__(self, name: str):
        self.name = name

    def draw_parameter(self, dim, rng):
        return draw_theta(self.name, dim, rng)

    def utility(self, theta, x):
        return utility(self.name, theta, x)


def make_task(name: str, init_args: Optional[dict] = None, field: str = "data.task") -> Task:
    """The task ``name``: a built-in name, or the import path of a :class:`Task` subclass built with ``init_args``."""
    if name in TASKS:
        if init_args:
            raise ValueError(f"{field}: the built-in task {name!r} takes no init_args, got {sorted(init_args)}")
        return BuiltinTask(name)
    cls = import_class(
        name,
        Task,
        field,
        f"a built-in task {list(TASKS)}, a UCI or table task, nor the import path of a nvldb_pl.environments.tasks.Task subclass",
    )
    init_args = typed_args(cls, dict(init_args or {}), f"{field}_args")  # a number given as text refused by name
    try:
        return cls(**init_args)
    except TypeError as err:
        raise ValueError(f"{field}: {name} does not take these init_args: {err}") from None
