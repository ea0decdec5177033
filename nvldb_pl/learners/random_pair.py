"""A uniformly random pair: the reference point every learner must beat."""

from __future__ import annotations

import torch

from .base import DuelingLearner
from .settings import LinkedSettings


class RandomPair(DuelingLearner):
    """a1 and a2 drawn independently and uniformly from [K] each round (they may coincide).

    The draw is the argmax of the round's own standard normals (rows 0 and 1 of ``noise``), so it
    is a pure function of (base seed, seed id, round) like every other random choice here.
    """

    method = "Random"

    def __init__(self, dim: int = 5, arms: int = 5, rounds: int = 2000, num_seeds: int = 20, link: str = "logistic"):
        super().__init__(dim, arms, rounds, num_seeds, link)
        self.settings = LinkedSettings(dim, arms, rounds, num_seeds, link)  # nothing of its own
        self.save_hyperparameters()

    @torch.no_grad()
    def select(self, contexts, noise, t):
        with self._timed("select"):
            return torch.argmax(noise[:, 0, :], dim=1), torch.argmax(noise[:, 1, :], dim=1)

    def scores(self, contexts):
        return torch.zeros(contexts.shape[:2], dtype=torch.float64, device=contexts.device)  # learns nothing

    def update(self, duel):
        """Learns nothing."""
