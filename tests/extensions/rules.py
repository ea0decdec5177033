"""A researcher's second-arm rule: the greedy arm against its most uncertain challenger."""

import torch

from nvldb_pl.maths.selection import SelectionRule


class MostUncertainChallenger(SelectionRule):
    def __call__(self, f, norm, noise, t):
        a1 = torch.argmax(f, dim=1)
        width = norm[torch.arange(f.shape[0]), a1]  # ||dphi_{a1,k}||  [S, K]
        width = width.masked_fill(torch.nn.functional.one_hot(a1, f.shape[1]).bool(), -torch.inf)
        return a1, torch.argmax(width, dim=1)
