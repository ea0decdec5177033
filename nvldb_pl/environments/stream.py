"""The environment side of the loop: a stream of rounds for S seeds at once.

Every random draw is a pure function of (base seed, seed id, round) (:mod:`nvldb_pl.environments.seeding`): the
task parameter of seed i from ``(base, i, TAG_TASK)``, and round t's contexts, Thompson-sampling
noise and feedback uniforms from ``(base, i, TAG_ROUNDS, (t-1) // CHUNK_ROUNDS)``. So a seed can be regenerated
alone, in any batch of seeds, on any process, and the stream can start at any round (resume).

One batch (one round t, 1-indexed) is a dict:

* ``round``:     t, a Python int
* ``contexts``:  [S, K, d] float32, the context set X_t (what the learner sees)
* ``utilities``: [S, K] float64, u(x_{t,k}) (used only for feedback and regret)
* ``noise``:     [S, K, K] float64 standard normals (Thompson sampling draws)
* ``uniform``:   [S] float64 U[0,1) (Bernoulli feedback o_t = 1{uniform < g(du)})
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import torch
from torch.utils.data import IterableDataset

from ..maths import links
from ..maths.checks import class_path_and_args, require
from . import uci
from .regret import instant_regret
from .seeding import CHUNK_ROUNDS, TAG_DISJOINT, TAG_ROUNDS, TAG_TASK, rng_for
from .tasks import TASKS, make_task

TABLE = "table"  # a user's own CSV (data.data_file, data.label_column, data.feature_columns, data.header)
ALL_TASKS = TASKS + uci.UCI_TASKS + (TABLE,)
SAMPLINGS = ("per_seed", "disjoint")
PREFERENCES = links.LINKS + ("deterministic",)


def dataset_digest(dataset: tuple[np.ndarray, np.ndarray]) -> str:
    """sha256 of a table task's rows (X as read and standardized, y), first 16 hex digits."""
    import hashlib

    X, y = dataset
    h = hashlib.sha256(np.ascontiguousarray(X, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(y, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def task_and_args(task) -> tuple[str, Optional[dict]]:
    """``data.task`` as (name or class path, init_args or None): a string, or ``{class_path, init_args}``."""
    return class_path_and_args(task, "data.task")


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
    sampling: str = "per_seed"
    task_args: Optional[dict] = None  # a Task class's init_args

    def __post_init__(self) -> None:
        require(
            isinstance(self.task, str) and (self.task in ALL_TASKS or "." in self.task),
            "data.task",
            f"{self.task!r} is not a known task; choose one of {list(ALL_TASKS)} or give the import path of a "
            f"nvldb_pl.environments.tasks.Task subclass",
        )
        require(self.sampling in SAMPLINGS, "data.sampling", f"{self.sampling!r} is not one of {list(SAMPLINGS)}")
        for name, low in (("dim", 1), ("arms", 2), ("rounds", 1), ("num_seeds", 1)):
            value = getattr(self, name)
            require(
                isinstance(value, int) and not isinstance(value, bool) and value >= low,
                f"data.{name}",
                f"must be an integer >= {low}, got {value!r}",
            )
        require(self.first_seed_id >= 0, "data.first_seed_id", f"must be >= 0, got {self.first_seed_id}")

    @property
    def seed_ids(self) -> list[int]:
        return list(range(self.first_seed_id, self.first_seed_id + self.num_seeds))


class RoundStream(IterableDataset):
    """Streams rounds ``start_round+1 .. rounds`` of the task for all seeds.

    Synthetic tasks draw contexts from the seed's stream; UCI tasks (``dataset`` = (X, y)) take
    one instance per seed and round (see :meth:`_instances`) and encode it per arm.
    """

    def __init__(self, spec: StreamSpec, start_round: int = 0, dataset: Optional[tuple[np.ndarray, np.ndarray]] = None):
        self.spec = spec
        self.start_round = start_round
        self.dataset = dataset
        if dataset is None:
            self.task = make_task(spec.task, spec.task_args)
            self.thetas = np.stack(
                [self.task.draw_parameter(spec.dim, rng_for(spec.base_seed, i, TAG_TASK)) for i in spec.seed_ids]
            )

    def _checked(self, method: str, value, shape: tuple) -> np.ndarray:
        """A task's draw or utility as it meets the package: an array of ``shape``, finite, else one line naming
        the class, the method and what was expected ([rounds, K, d] contexts; [S, K] utilities)."""
        task = type(self.task)
        where = f"data.task: {task.__module__}.{task.__qualname__}.{method}"
        try:
            value = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where} returned no array of numbers ({err})") from None
        names = "[rounds, K, d]" if method == "draw_contexts" else "[S, K] (seeds, arms)"
        if value.shape != tuple(shape):
            raise ValueError(
                f"{where} returned shape {list(value.shape)}; expected {names} = {list(shape)} "
                f"(data.num_seeds = {len(self.spec.seed_ids)}, data.arms = {self.spec.arms}, data.dim = {self.spec.dim})"
            )
        if not np.isfinite(value).all():
            raise ValueError(f"{where} returned non-finite values (NaN or inf); every value must be finite")
        return value

    def _instances(self, seed_id: int, rounds: np.ndarray) -> np.ndarray:
        """Row indices for 1-indexed ``rounds`` of one seed.

        ``per_seed``: the seed's own shuffles of all n rows, one after another (without
        replacement until the data is exhausted, then a fresh shuffle). ``disjoint``: one
        shuffle from the base seed, seed i taking positions i*T .. (i+1)*T - 1 (no row is used by
        two seeds; needs n >= (last seed id + 1) * T, checked by the data module).
        """
        sp, n = self.spec, len(self.dataset[1])
        if sp.sampling == "disjoint":
            order = np.random.default_rng([sp.base_seed, TAG_DISJOINT]).permutation(n)
            return order[seed_id * sp.rounds + rounds - 1]
        out = np.empty(len(rounds), dtype=np.int64)
        epochs = (rounds - 1) // n
        for e in np.unique(epochs):
            perm = rng_for(sp.base_seed, seed_id, TAG_TASK, int(e)).permutation(n)
            out[epochs == e] = perm[(rounds[epochs == e] - 1) % n]
        return out

    def __len__(self) -> int:
        # The whole horizon, also when resuming at start_round: Lightning restores its batch
        # counter from the checkpoint (start_round batches done) and stops at this length.
        return self.spec.rounds

    def _chunk(self, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sp, n = self.spec, CHUNK_ROUNDS
        xs, zs, us = [], [], []
        for i in sp.seed_ids:
            rng = rng_for(sp.base_seed, i, TAG_ROUNDS, c)
            if self.dataset is None:
                xs.append(
                    self._checked(
                        "draw_contexts", self.task.draw_contexts(n, sp.arms, sp.dim, rng), (n, sp.arms, sp.dim)
                    )
                )
            else:  # the row index, encoded in __iter__
                xs.append(self._instances(i, np.arange(c * n + 1, c * n + n + 1)))
            zs.append(rng.standard_normal((n, sp.arms, sp.arms)))
            us.append(rng.random(n))
        return np.stack(xs, 1), np.stack(zs, 1), np.stack(us, 1)  # [n, S, ...]

    def _round(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(contexts [S, K, d], utilities [S, K]) from one round's draw."""
        if self.dataset is None:
            return x, self._checked("utility", self.task.utility(self.thetas, x), x.shape[:2])
        X, y = self.dataset
        contexts = uci.block_contexts(X[x], self.spec.arms)
        return contexts, np.eye(self.spec.arms)[y[x]]  # u_k = 1 if k = y

    def __iter__(self) -> Iterator[dict]:
        sp = self.spec
        chunk_id, cache = -1, None
        for t in range(self.start_round + 1, sp.rounds + 1):
            c, j = divmod(t - 1, CHUNK_ROUNDS)
            if c != chunk_id:
                chunk_id, cache = c, self._chunk(c)
            x, z, u = (a[j] for a in cache)
            contexts, utilities = self._round(x)
            yield {
                "round": t,  # a Python int: stays on the host, so checking it costs no device sync
                "contexts": torch.from_numpy(contexts.astype(np.float32)),
                "utilities": torch.from_numpy(utilities),
                "noise": torch.from_numpy(z),
                "uniform": torch.from_numpy(u),
            }


def preference_prob(preference: str, du: torch.Tensor) -> torch.Tensor:
    """P(o = 1) = P(a1 beats a2) given du = u_a1 - u_a2 under the environment's preference model ``preference``
    (a link of :mod:`nvldb_pl.maths.links`, or ``deterministic``: 1 if du > 0, 0.5 on a tie)."""
    if preference == "deterministic":
        return (du > 0).to(du.dtype) + 0.5 * (du == 0).to(du.dtype)
    return links.prob(preference, du)


def answer(batch: dict, a1: torch.Tensor, a2: torch.Tensor, preference: str) -> dict:
    """The environment's answer to round ``batch``'s pair (a1, a2) [S]: ``o`` [S] (1: a1 preferred), drawn
    o_t = 1{U_t < P(a1 beats a2)} from the round's own uniform U_t; ``du`` = u_a1 - u_a2 [S]; ``regret`` =
    (r^a_t, r^w_t) [S] each (the Objective section)."""
    u = batch["utilities"]
    rows = torch.arange(u.shape[0], device=u.device)
    du = u[rows, a1] - u[rows, a2]
    o = (batch["uniform"] < preference_prob(preference, du)).to(torch.float32)
    return {"o": o, "du": du, "regret": instant_regret(u, a1, a2)}
