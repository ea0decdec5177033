"""A researcher's parts with the mistakes the package must catch where they meet it (tests/loop/test_boundaries.py)."""

import numpy as np
import torch

from nvldb_pl.environments.tasks import Task
from nvldb_pl.maths.selection import SelectionRule


class FlatUtility(Task):
    """utility returns one number a seed ([S]) instead of one an arm ([S, K])."""

    def draw_parameter(self, dim, rng):
        return rng.standard_normal(dim)

    def utility(self, theta, x):
        return np.einsum("skd,sd->sk", x, theta).sum(1)


class TransposedUtility(FlatUtility):
    """utility returns [K, S]."""

    def utility(self, theta, x):
        return np.einsum("skd,sd->sk", x, theta).T


class NaNUtility(FlatUtility):
    def utility(self, theta, x):
        u = np.einsum("skd,sd->sk", x, theta)
        u[0, 0] = np.nan
        return u


class WrongContexts(FlatUtility):
    """draw_contexts returns [rounds, K, d + 1]."""

    def utility(self, theta, x):
        return np.einsum("skd,sd->sk", x, theta)

    def draw_contexts(self, num_rounds, arms, dim, rng):
        return rng.uniform(-1, 1, (num_rounds, arms, dim + 1))


class OutOfRangeArm(SelectionRule):
    def __call__(self, f, norm, noise, t):
        a1 = torch.argmax(f, dim=1)
        return a1, torch.full_like(a1, f.shape[1] + 2)


class FloatArms(SelectionRule):
    def __call__(self, f, norm, noise, t):
        return torch.zeros(f.shape[0]), torch.ones(f.shape[0])
