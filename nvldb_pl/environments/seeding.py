"""The random streams every draw of a run comes from, and how seeds split over processes.

Every random draw is a pure function of (base seed, seed id, purpose, ...): the task parameter
(``TAG_TASK``), round blocks of contexts, Thompson normals and feedback uniforms (``TAG_ROUNDS``),
a learner's initial parameters (``TAG_INIT``), UCI rows without overlap (``TAG_DISJOINT``), a
bounded training sample (``TAG_SAMPLE``) and the GP baseline's hyperparameter fits (``TAG_FIT``). So a
seed can be regenerated alone, in any batch of seeds, on any process, from any round.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

TAG_TASK, TAG_ROUNDS, TAG_INIT, TAG_DISJOINT, TAG_SAMPLE, TAG_FIT = 0, 1, 2, 3, 4, 5
CHUNK_ROUNDS = 64  # rounds drawn per generator; part of the stream's definition, not a setting


def rng_for(base_seed: int, seed_id: int, tag: int, *more: int) -> np.random.Generator:
    """The generator of one (base seed, seed id, purpose, ...) stream."""
    return np.random.default_rng([base_seed, seed_id, tag, *more])


def torch_seed(base_seed: int, seed_id: int, tag: int, *more: int) -> int:
    """A seed for a torch generator, drawn from the (base seed, seed id, purpose, ...) stream."""
    return int(rng_for(base_seed, seed_id, tag, *more).integers(2**62))


def resolve_base_seed(seed: Optional[int]) -> int:
    """``seed`` if given, else the global seed set by ``seed_everything`` (0 if none)."""
    if seed is not None:
        return int(seed)
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


def shard(num_seeds: int, first_seed_id: int, world_size: int, rank: int) -> tuple[int, int]:
    """(local number of seeds, first local seed id) of ``rank``; refuses an uneven split."""
    if num_seeds % world_size:
        raise ValueError(
            f"data.num_seeds={num_seeds} does not split evenly over {world_size} processes "
            f"(trainer.devices x trainer.num_nodes); use a multiple of {world_size}"
        )
    local = num_seeds // world_size
    return local, first_seed_id + rank * local
