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
"""
from __future__ import annotations

import numpy as np

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
