"""``--trainer.strategy seed_parallel``: independent seeds spread over processes (CPU or GPUs).

Plain DDP would broadcast rank 0's weights to every rank and average gradients: the seeds would
stop being independent experiments. :class:`SeedParallelStrategy` keeps DDP's launcher and
process group but never wraps the model, so nothing is broadcast or all-reduced in training.

Each rank runs its own shard of seed ids: with S seeds (``data.num_seeds``, the total) on W
processes, rank r runs ids ``first + r*S/W .. first + (r+1)*S/W - 1`` (S must divide evenly;
otherwise the run is refused up front). Every random draw is a function of (base seed, seed id,
round), so per-seed results equal those of one process running all S seeds. The regret curves
are gathered every log flush (:meth:`nvldb_pl.loop.callbacks.DuelingLoop.flush`) so that rank 0 logs
mean and std over all seeds, and the per-seed regret metric reduces by concatenation through
torchmetrics, so ``summary.json`` lists every seed.

Checkpoints: every rank saves its own state, rank 0 to ``last.ckpt`` and rank r to
``last.ckpt.rank{r}`` next to it, keeping the one before as ``<name>.prev``. A kill can land
between two ranks' saves, so on resume the ranks agree on the latest round that every rank has
(its ``last`` or its ``prev``) and each loads that file: the ranks always restart together. A run
saved by another number of processes goes on too: each rank takes its share of the merged seeds
(:mod:`nvldb_pl.machinery.shards`).
"""

from __future__ import annotations

import os

import torch
from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry

from . import shards
from .host import write_keeping_previous


def started_as_first_process() -> bool:
    """Whether this process is the run's global rank 0, from the variables a launcher sets before
    the script starts (Lightning's own launcher for ranks above 0, torchrun, SLURM, node ranks
    started by hand): one process, and one only, creates the run's folder."""
    return all(os.environ.get(k, "0") == "0" for k in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID"))


def end_process_group() -> None:
    """Destroy the run's process group, if one was started, while the interpreter is still whole.

    Lightning does this at exit for NCCL only. A gloo group left to the interpreter's finalization
    can abort its process as its worker threads are torn down ("terminate called without an active
    exception", SIGABRT: torch's issue #190489) at the very end of a finished run."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


class SeedParallelStrategy(DDPStrategy):
    """DDP's processes without DDP's model wrapper: one shard of independent seeds per rank."""

    strategy_name = "seed_parallel"

    def configure_ddp(self) -> None:  # no DistributedDataParallel: no broadcast, no gradient averaging
        pass

    def _rank_path(self, filepath) -> str:
        return shards.rank_path(str(filepath), self.global_rank)

    def save_checkpoint(self, checkpoint, filepath, storage_options=None) -> None:
        write_keeping_previous(
            self._rank_path(filepath),
            lambda tmp: self.checkpoint_io.save_checkpoint(checkpoint, tmp, storage_options=storage_options),
        )

    def load_checkpoint(self, checkpoint_path, weights_only=None):
        def load(p):
            return self.checkpoint_io.load_checkpoint(p, weights_only=weights_only)

        base = shards.base_path(str(checkpoint_path))
        first = shards.whole_files(base, 0, load)  # rank 0's files say how many processes saved the run
        if first and shards.saved_processes(first[max(first)], base) != self.world_size:  # another number:
            return shards.load_share(base, load, self.world_size, self.global_rank)  # re-shard the seeds
        found = first if self.global_rank == 0 else shards.whole_files(base, self.global_rank, load)  # damaged: skipped
        mine = sorted(found, reverse=True) + [-1] * (2 - len(found))
        every = self.all_gather(torch.tensor(mine[:2], device=self.root_device)).view(-1, 2).cpu().tolist()
        common = set(every[0]).intersection(*map(set, every[1:])) - {-1}
        if not common:
            raise FileNotFoundError(
                f"ckpt_path: the ranks' checkpoints next to {checkpoint_path} share no round (rounds per rank: {every})"
            )
        return found[max(common)]

    def remove_checkpoint(self, filepath) -> None:
        path = self._rank_path(filepath)
        for p in (path, f"{path}.prev"):
            if os.path.exists(p):
                os.remove(p)


if "seed_parallel" not in StrategyRegistry:
    StrategyRegistry.register(
        "seed_parallel",
        SeedParallelStrategy,
        start_method="popen",
        description="independent seeds sharded over processes, no DDP wrapper",
    )
