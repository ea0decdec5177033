"""The environment side of the loop: a stream of rounds for S seeds at once.

Every random draw is a pure function of (base seed, seed id, round): the task parameter of
seed i from ``(base, i, TAG_TASK)``, and round t's contexts, Thompson-sampling noise and
feedback uniforms from ``(base, i, TAG_ROUNDS, (t-1) // CHUNK_ROUNDS)``. So a seed can be regenerated
alone, in any batch of seeds, on any process, and the stream can start at any round (resume).

One batch (one round t, 1-indexed) is a dict:

* ``round``:     int64 scalar t
* ``contexts``:  [S, K, d] float32, the context set X_t (what the learner sees)
* ``utilities``: [S, K] float64, u(x_{t,k}) (used only for feedback and regret)
* ``noise``:     [S, K, K] float64 standard normals (Thompson sampling draws)
* ``uniform``:   [S] float64 U[0,1) (Bernoulli feedback o_t = 1{uniform < g(du)})
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from .links import check_link
from .tasks import check_task, draw_contexts, draw_theta, utility

TAG_TASK, TAG_ROUNDS, TAG_INIT = 0, 1, 2
CHUNK_ROUNDS = 64  # rounds drawn per generator; part of the stream's definition, not a setting


def rng_for(base_seed: int, seed_id: int, tag: int, *more: int) -> np.random.Generator:
    """The generator of one (base seed, seed id, purpose, ...) stream."""
    return np.random.default_rng([base_seed, seed_id, tag, *more])


def resolve_base_seed(seed: Optional[int]) -> int:
    """``seed`` if given, else the global seed set by ``seed_everything`` (0 if none)."""
    if seed is not None:
        return int(seed)
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


def _require(cond: bool, field: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{field}: {msg}")


@dataclass
class StreamSpec:
    """What defines a stream; validated on construction so errors name the config field."""

    task: str = "cos"
    dim: int = 5
    arms: int = 5
    rounds: int = 2000
    num_seeds: int = 20
    first_seed_id: int = 0
    base_seed: int = 0

    def __post_init__(self) -> None:
        check_task(self.task, "data.task")
        for name, low in (("dim", 1), ("arms", 2), ("rounds", 1), ("num_seeds", 1)):
            value = getattr(self, name)
            _require(isinstance(value, int) and not isinstance(value, bool) and value >= low,
                     f"data.{name}", f"must be an integer >= {low}, got {value!r}")
        _require(self.first_seed_id >= 0, "data.first_seed_id", f"must be >= 0, got {self.first_seed_id}")

    @property
    def seed_ids(self) -> list[int]:
        return list(range(self.first_seed_id, self.first_seed_id + self.num_seeds))


class RoundStream(IterableDataset):
    """Streams rounds ``start_round+1 .. rounds`` of the synthetic task for all seeds."""

    def __init__(self, spec: StreamSpec, start_round: int = 0):
        self.spec = spec
        self.start_round = start_round
        self.thetas = np.stack(
            [draw_theta(spec.task, spec.dim, rng_for(spec.base_seed, i, TAG_TASK)) for i in spec.seed_ids]
        )

    def __len__(self) -> int:
        return self.spec.rounds - self.start_round

    def _chunk(self, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sp, n = self.spec, CHUNK_ROUNDS
        xs, zs, us = [], [], []
        for i in sp.seed_ids:
            rng = rng_for(sp.base_seed, i, TAG_ROUNDS, c)
            xs.append(draw_contexts(n, sp.arms, sp.dim, rng))
            zs.append(rng.standard_normal((n, sp.arms, sp.arms)))
            us.append(rng.random(n))
        return np.stack(xs, 1), np.stack(zs, 1), np.stack(us, 1)  # [n, S, ...]

    def __iter__(self) -> Iterator[dict]:
        sp = self.spec
        chunk_id, cache = -1, None
        for t in range(self.start_round + 1, sp.rounds + 1):
            c, j = divmod(t - 1, CHUNK_ROUNDS)
            if c != chunk_id:
                chunk_id, cache = c, self._chunk(c)
            x, z, u = (a[j] for a in cache)
            yield {
                "round": torch.tensor(t, dtype=torch.int64),
                "contexts": torch.from_numpy(x.astype(np.float32)),
                "utilities": torch.from_numpy(utility(sp.task, self.thetas, x)),
                "noise": torch.from_numpy(z),
                "uniform": torch.from_numpy(u),
            }


class BanditDataModule(pl.LightningDataModule):
    """Owns the round stream of a synthetic dueling task (appendix protocol).

    Args:
        task: utility function, one of ``cos``, ``square``, ``quadratic``.
        dim: context dimension d.
        arms: number of arms K per round (>= 2).
        rounds: horizon T (one epoch = T rounds).
        num_seeds: S, independent experiments run together as a batch dimension.
        first_seed_id: seed ids are ``first_seed_id .. first_seed_id + S - 1``.
        seed: base seed of every random draw; ``None`` takes ``seed_everything``'s value.
        link: preference link g of the environment, ``logistic`` (BTL) or ``probit``.
    """

    def __init__(
        self,
        task: str = "cos",
        dim: int = 5,
        arms: int = 5,
        rounds: int = 2000,
        num_seeds: int = 20,
        first_seed_id: int = 0,
        seed: Optional[int] = None,
        link: str = "logistic",
    ):
        super().__init__()
        self.link = check_link(link, "data.link")
        self.spec = StreamSpec(task, dim, arms, rounds, num_seeds, first_seed_id, resolve_base_seed(seed))
        self.start_round = 0  # set by the module when resuming

    @property
    def seed_ids(self) -> list[int]:
        return self.spec.seed_ids

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RoundStream(self.spec, self.start_round), batch_size=None, num_workers=0)
