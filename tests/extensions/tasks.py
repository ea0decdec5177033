"""A researcher's own task: u(x) = sin(freq * Theta^T x), Theta ~ N(0, I / d) per seed."""

import numpy as np

from nvldb_pl.environments.tasks import Task


class Sine(Task):
    def __init__(self, freq: float = 2.0):
        self.freq = freq

    def draw_parameter(self, dim, rng):
        return rng.standard_normal(dim) / np.sqrt(dim)

    def utility(self, theta, x):
        return np.sin(self.freq * np.einsum("skd,sd->sk", x, theta))
