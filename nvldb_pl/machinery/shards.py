"""A run's checkpoint over any number of processes: merge the ranks' files, take any rank's share.

Under ``seed_parallel`` every process saves its own seeds (rank 0 to ``last.ckpt``, rank r to
``last.ckpt.rank{r}``, each keeping ``.prev``). Seeds are independent, so a run saved by W
processes goes on exactly with another number W': the W files at a round they all hold are merged
into one checkpoint of every seed (rank order is seed-id order) and each new process takes its
contiguous share (:func:`nvldb_pl.environments.seeding.shard`). Per seed are the learner's tensors with a
leading seed dimension (all but ``SHARED_BUFFERS`` and 0-d ones), Adam's moments and
the DuelingLoop's rounds not yet logged; everything else (round counter, loops, curves gathered
over all seeds) is the same in every file and taken from rank 0's.
"""

from __future__ import annotations

import os
from typing import Callable

import torch

from .host import checkpoint_problem

# a learner's tensors without a leading seed dimension (DuelingLearner.SHARED_BUFFERS is this tuple)
SHARED_BUFFERS = ("rounds_done", "reg", "base_seed")

Loader = Callable[[str], dict]


def rank_path(base: str, rank: int) -> str:
    """Rank ``rank``'s file of the checkpoint ``base`` (``last.ckpt``, ``last.ckpt.rank1``, ...)."""
    return base if rank == 0 else f"{base}.rank{rank}"


def base_path(path: str) -> str:
    """``last.ckpt`` for ``last.ckpt`` or its ``.prev``."""
    return path[: -len(".prev")] if path.endswith(".prev") else path


def saved_processes(ckpt: dict, base: str) -> int:
    """How many processes the run that saved ``ckpt`` (read from ``base`` or its ``.prev``) had. A checkpoint
    from before this was recorded: 1 + the rank files next to ``base`` (``.rank1``, ``.rank2``, ... or their ``.prev``)."""
    if "processes" in ckpt:
        return int(ckpt["processes"])
    base, n = base_path(base), 1
    while any(os.path.exists(p) for p in (rank_path(base, n), f"{rank_path(base, n)}.prev")):
        n += 1
    return n


def seed_count(ckpt: dict) -> int:
    return len(ckpt["state_dict"]["seed_id"])


def _per_seed(name: str, x, n: int) -> bool:
    return torch.is_tensor(x) and x.dim() > 0 and x.shape[0] == n and name.rsplit(".", 1)[-1] not in SHARED_BUFFERS


def _map_seeds(ckpts: list[dict], join: Callable[[list[torch.Tensor]], torch.Tensor]) -> dict:
    """rank 0's checkpoint with every per-seed tensor replaced by ``join`` of the files' tensors."""
    first, n = ckpts[0], seed_count(ckpts[0])
    out = dict(first)
    out["state_dict"] = {
        k: join([c["state_dict"][k] for c in ckpts]) if _per_seed(k, v, n) else v
        for k, v in first["state_dict"].items()
    }
    out["optimizer_states"] = [
        {
            **opt,
            "state": {
                p: {
                    k: join([c["optimizer_states"][i]["state"][p][k] for c in ckpts]) if _per_seed(k, v, n) else v
                    for k, v in st.items()
                }
                for p, st in opt["state"].items()
            },
        }
        for i, opt in enumerate(first.get("optimizer_states", []))
    ]
    loop = first.get("callbacks", {}).get("DuelingLoop")
    if loop is not None:
        pending = zip(*(c["callbacks"]["DuelingLoop"]["pending"] for c in ckpts))
        out["callbacks"] = {
            **first["callbacks"],
            "DuelingLoop": {
                **loop,
                "pending": [
                    (blocks[0][0], join([b[1] for b in blocks]), join([b[2] for b in blocks])) for blocks in pending
                ],
            },
        }
    return out


def merge(ckpts: list[dict]) -> dict:
    """One checkpoint of every seed from the ranks' files of one round, in rank order."""
    rounds = {int(c["state_dict"]["rounds_done"]) for c in ckpts}
    if len(rounds) != 1:
        raise ValueError(f"ckpt_path: the ranks' files hold different rounds {sorted(rounds)}")
    return {**_map_seeds(ckpts, torch.cat), "processes": 1}


def take(ckpt: dict, start: int, count: int) -> dict:
    """The share of seeds at positions ``start .. start + count - 1`` of a merged checkpoint."""
    return _map_seeds([ckpt], lambda xs: xs[0][start : start + count].clone())


def whole_files(base: str, rank: int, load: Loader) -> dict[int, dict]:
    """{round: checkpoint} of rank ``rank``'s file of ``base`` and its ``.prev``, those that read whole."""
    files = (rank_path(base, rank), f"{rank_path(base, rank)}.prev")
    ckpts = [load(p) for p in files if os.path.exists(p) and checkpoint_problem(p) is None]
    return {int(c["state_dict"]["rounds_done"]): c for c in ckpts}


def load_merged(base: str, load: Loader) -> dict:
    """Every seed of the run whose rank-0 file is ``base`` (or its ``.prev``), at the latest round all
    its ranks hold: the files of each rank r < W (W: the processes that run had, from the newest whole
    rank-0 file) are read, their ``.prev`` included, and merged. A ValueError naming the files if the
    ranks share no round."""
    base = base_path(base)
    first = whole_files(base, 0, load)
    if not first:
        raise ValueError(f"ckpt_path: neither {base} nor its .prev reads whole")
    processes = saved_processes(first[max(first)], base)
    found = [{r: c for r, c in first.items() if saved_processes(c, base) == processes}]
    found += [whole_files(base, rank, load) for rank in range(1, processes)]
    common = set(found[0]).intersection(*map(set, found[1:]))
    if not common:
        raise ValueError(
            f"ckpt_path: the {processes} ranks' files next to {base} share no round "
            f"(rounds per rank: {[sorted(f) for f in found]})"
        )
    return merge([f[max(common)] for f in found])


def load_share(base: str, load: Loader, world_size: int, rank: int) -> dict:
    """Rank ``rank``'s share of the run saved next to ``base``, for a run of ``world_size`` processes."""
    merged = load_merged(base, load)
    local = seed_count(merged) // world_size
    return {**take(merged, rank * local, local), "processes": world_size}
