"""A person fitted to real choices: Ecdat's ``Train`` stated-choice data as a task and a catalog.

2929 choices of 235 Dutch travellers between two train trips (``data/train.csv``, ``data/README.md``), each trip
z = (price, time, change, comfort) in the units of the mlogit vignette (price x 2.20371 / 100, time in hours,
changes, comfort 0 best to 2 worst). The person is the conditional logit fitted to every choice,

    P(trip 1 chosen over trip 2) = sigmoid(beta^T (z_1 - z_2)),   beta = argmax sum_i log-likelihood (Newton),

which is the package's logistic link on utilities u(z) = beta^T z: it answers the duels. The learner sees a trip as
its features standardized over the data's 5858 trips (mean 0, sd 1; d = 4), so the utility of a context x is
beta_std^T x, beta_std = beta * sd (a constant shift cancels in every duel).

:class:`TrainChoices` is a :class:`~nvldb_pl.environments.tasks.Task` (``data.task:
nvldb_pl.environments.train_choices.TrainChoices``, ``configs/train_choices.yaml``): each round's K contexts are trips
drawn at random from the data; every seed meets the same fitted person. :func:`catalog` gives N trips as items for
``scripts/duel.py`` and the page.
"""

from __future__ import annotations

import csv
import functools
import os

import numpy as np

from .tasks import Task

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "train.csv")
FEATURES = ("price", "time", "change", "comfort")
UNITS = np.array([2.20371 / 100, 1 / 60, 1.0, 1.0])  # the data's units -> the mlogit vignette's
PUBLISHED = {"price": -0.0673580, "time": -1.7205514, "change": -0.3263409, "comfort": -0.9457256}  # mlogit vignette


@functools.lru_cache(maxsize=1)
def load() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(trips z [2n, 4] in the vignette's units, chosen [n] 1 where trip 1 was chosen, traveller ids [n])."""
    with open(PATH, newline="") as fh:
        rows = list(csv.DictReader(fh))
    z = np.array([[float(r[f"{f}{k}"]) for k in (1, 2) for f in FEATURES] for r in rows]).reshape(-1, 4) * UNITS
    chosen = np.array([r["choice"] == "choice1" for r in rows], dtype=np.float64)
    return z, chosen, np.array([int(r["id"]) for r in rows])


@functools.lru_cache(maxsize=1)
def fit() -> tuple[np.ndarray, np.ndarray, float]:
    """The conditional logit's (beta [4], standard errors [4], log-likelihood) by Newton's method from 0."""
    z, y, _ = load()
    D = z[0::2] - z[1::2]  # z_1 - z_2 per choice
    beta = np.zeros(4)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-D @ beta))
        H = (D * (p * (1 - p))[:, None]).T @ D
        step = np.linalg.solve(H, D.T @ (y - p))
        beta = beta + step
        if np.abs(step).max() < 1e-12:
            break
    p = 1.0 / (1.0 + np.exp(-D @ beta))
    loglik = float(np.sum(y * np.log(p) + (1 - y) * np.log(1 - p)))
    return beta, np.sqrt(np.diag(np.linalg.inv(H))), loglik


def standardized() -> tuple[np.ndarray, np.ndarray]:
    """(every trip's features standardized over the data [2n, 4], beta_std = beta * sd [4])."""
    z, _, _ = load()
    mean, sd = z.mean(0), z.std(0)
    return (z - mean) / sd, fit()[0] * sd


class TrainChoices(Task):
    """Trips from the Train data as contexts (d = 4), utilities from the logit fitted to the real choices."""

    def draw_parameter(self, dim, rng):
        if dim != 4:
            raise ValueError(f"data.dim: the Train trips have 4 features (price, time, change, comfort), got {dim}")
        return standardized()[1]

    def draw_contexts(self, num_rounds, arms, dim, rng):
        trips = standardized()[0]
        return trips[rng.integers(len(trips), size=(num_rounds, arms))]

    def utility(self, theta, x):
        return np.einsum("skd,sd->sk", x, theta)


def catalog(n: int = 20, seed: int = 0) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``n`` distinct trips drawn from the data: (names, raw features [n, 4] in the data's units (price in cents of
    guilders, minutes, changes, comfort), contexts [n, 4] (standardized over the data), utilities [n])."""
    trips, beta_std = standardized()
    z, _, _ = load()
    _, first = np.unique(np.round(trips, 9), axis=0, return_index=True)  # one of each distinct trip
    pick = np.random.default_rng([2026, seed]).choice(np.sort(first), size=n, replace=False)
    raw = z[pick] / UNITS
    names = [f"trip {k + 1}" for k in range(n)]
    return names, np.round(raw, 6), trips[pick], trips[pick] @ beta_std
