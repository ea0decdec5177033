"""Regret of the paper's Objective section, kept per seed in a torchmetrics ``Metric``.

r^a_t = (2 u(x*) - u(x_a1) - u(x_a2)) / 2   (average regret)
r^w_t = u(x*) - max(u(x_a1), u(x_a2))       (weak regret)
R^a_T = sum_t r^a_t,  R^w_T = sum_t r^w_t

The metric's states are per seed ([S]), persistent (saved in checkpoints for exact resume), and reduce across processes by concatenation, so mean
and std over all seeds of a distributed run come from torchmetrics' own sync.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric

PREFIX = "regret."  # the metric's keys in a checkpoint's state_dict, beside the learner's own


def split_state(state_dict: dict) -> tuple[dict, dict]:
    """A fit checkpoint's state_dict -> (the learner's keys, the regret metric's keys without their prefix)."""
    learner = {k: v for k, v in state_dict.items() if not k.startswith(PREFIX)}
    regret = {k[len(PREFIX) :]: v for k, v in state_dict.items() if k.startswith(PREFIX)}
    return learner, regret


def instant_regret(utilities: torch.Tensor, a1: torch.Tensor, a2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(r^a_t, r^w_t), each [S], from utilities [S, K] and the chosen arms [S]."""
    best = utilities.max(dim=1).values
    u1 = torch.gather(utilities, 1, a1.unsqueeze(1)).squeeze(1)
    u2 = torch.gather(utilities, 1, a2.unsqueeze(1)).squeeze(1)
    return (2.0 * best - u1 - u2) / 2.0, best - torch.maximum(u1, u2)


class CumulativeRegret(Metric):
    """Cumulative average and weak regret per seed. ``compute()`` -> dict of [S_total] tensors."""

    full_state_update = False

    def __init__(self, seed_ids: list[int]):
        super().__init__()
        S = len(seed_ids)
        self.add_state("seed_ids", torch.tensor(seed_ids, dtype=torch.int64), dist_reduce_fx="cat", persistent=True)
        self.add_state("cum_avg", torch.zeros(S, dtype=torch.float64), dist_reduce_fx="cat", persistent=True)
        self.add_state("cum_weak", torch.zeros(S, dtype=torch.float64), dist_reduce_fx="cat", persistent=True)
        self.add_state("rounds", torch.zeros((), dtype=torch.int64), dist_reduce_fx="max", persistent=True)

    def update(self, r_avg: torch.Tensor, r_weak: torch.Tensor) -> None:
        self.cum_avg += r_avg.to(torch.float64)
        self.cum_weak += r_weak.to(torch.float64)
        self.rounds += 1

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """Restored states (resume) stand for as many updates as the rounds they hold (torchmetrics
        would otherwise warn that compute() comes before any update when a finished run is resumed)."""
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._update_count = max(self._update_count, int(self.rounds))

    def compute(self) -> dict[str, torch.Tensor]:
        return {"seed_ids": self.seed_ids, "cum_avg": self.cum_avg, "cum_weak": self.cum_weak, "rounds": self.rounds}
