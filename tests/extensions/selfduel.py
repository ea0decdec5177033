"""A researcher's self-duel test: the greedy arm duels itself once a seed has answered ``after`` duels, counted in a
buffer of its own (saved with the learner, resumed with it)."""

import torch

from nvldb_pl.maths.selfduel import SelfDuelTest


class SelfDuelAfterTen(SelfDuelTest):
    uses_gradients = True  # asks for g, and is handed each answered duel's gradient difference
    after = 10

    def __init__(self, settings):
        super().__init__(settings)
        self.register_buffer("answered", torch.zeros(settings.num_seeds, dtype=torch.int64))

    def forward(self, pair, f, norm, noise, t, g=None, allowed=True):
        if g is None or g.shape[-1] != self.settings.num_params:
            raise RuntimeError("the learner did not hand over the round's gradients")
        if not allowed:
            return pair
        c = torch.argmax(f, dim=1)
        sure = self.answered >= self.after
        return torch.where(sure, c, pair[0]), torch.where(sure, c, pair[1])

    def remember(self, z):
        self.answered += 1


class ArmOutOfRange(SelfDuelTest):
    """Returns arm K: the mistake the boundary check names."""

    def forward(self, pair, f, norm, noise, t, g=None, allowed=True):
        return pair[0], torch.full_like(pair[1], f.shape[1])
