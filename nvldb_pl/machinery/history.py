"""The memory one block of a learner's history takes, checked against the device before round 1. The passes
themselves (how the Adam steps walk the history) are the learner's: :mod:`nvldb_pl.learners.history`, whose names this
module still gives for code written against it."""

from __future__ import annotations

from typing import Optional

import torch

from ..learners.history import (  # noqa: F401  (the old names of these)
    HISTORY_PASSES,
    TRAIN_CHUNK_ROUNDS,
    block_bytes,
    history_blocks,
    resolve_history_pass,
    sample_rows,
    settle_adam,
)
from ..maths.checks import check
from . import host


def check_block_memory(
    mode: str,
    rounds: int,
    sample_size: Optional[int],
    device: torch.device,
    processes: int,
    seeds: int,
    width: int,
    depth: int,
) -> None:
    """Refuse, before round 1, a pass whose one block of history cannot fit at the horizon: ``full``, ``masked``
    and ``graphed`` walk all T rounds in one block, so their activations grow with T and a run would run out of
    memory hours in. ``processes``: this host's processes (seed_parallel on a CPU), which share its memory."""
    rows = min(rounds, sample_size or (TRAIN_CHUNK_ROUNDS if mode == "chunked" else rounds))
    need, sharing = block_bytes(depth, seeds, width, rows), ""
    if device.type == "cuda":  # a GPU per process
        free = torch.cuda.mem_get_info(device)[0]
    else:
        free = host.available_memory_bytes()
        if processes > 1:
            free, sharing = free // processes, f" for each of the {processes} processes on this host"
    check(
        need <= 0.9 * free,
        "compute.history_pass",
        f"{mode} walks {rows} rounds of history in one block, about {need / 2**30:.1f} GiB of "
        f"activations an Adam step at round T={rounds} ({seeds} seeds, width {width}, depth "
        f"{depth}), but {free / 2**30:.1f} GiB is free on {device}{sharing}; use compute.history_pass chunked "
        f"(blocks of {TRAIN_CHUNK_ROUNDS} rounds), model.sampler.size, fewer seeds a process (seed_parallel) or "
        f"a smaller width",
    )


def check_learner_memory(learner, processes: int = 1) -> None:
    """:func:`check_block_memory` for a network learner (:class:`nvldb_pl.learners.neural.NeuralLearner`) on its
    device, at its horizon; ``processes``: this host's processes of the run."""
    s = learner.settings
    check_block_memory(
        learner.history_pass,
        s.rounds,
        s.sampler.size,
        learner.device,
        processes,
        learner.num_local,
        s.network.width,
        s.network.depth,
    )
