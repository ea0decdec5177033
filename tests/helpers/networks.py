"""Networks that make a learner's step slow or fail, for the page's learning process (which imports them by path:
a monkeypatch in the test's process would not reach it)."""

import time

from torch import nn


class SlowMLP(nn.Module):
    """A small MLP whose every forward pass in training (the Adam steps) takes 3 ms more."""

    def __init__(self, dim: int = 5, hidden: int = 8, features: int = 5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, features))

    def forward(self, x):
        if self.training:
            time.sleep(0.003)
        return self.body(x)


class FailingMLP(SlowMLP):
    """A small MLP whose training fails as if memory ran out: from its tenth forward pass in training mode (the
    first few are the learner's checks of the network when it is built)."""

    calls = 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls >= 10:
                raise RuntimeError("out of memory")
        return self.body(x)
