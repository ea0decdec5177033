"""A researcher's network for phi: one seed's module, with LayerNorm (which the hand-written gradient does not know)."""

from torch import nn


class LayerNormMLP(nn.Module):
    def __init__(self, dim: int = 5, hidden: int = 16, features: int = 5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, features))

    def forward(self, x):
        return self.body(x)


class WithBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Linear(8, 5))

    def forward(self, x):
        return self.body(x)


class DropoutGELU(nn.Module):
    """A stochastic network: dropout between GELU layers (on in the Adam steps only)."""

    def __init__(self, dim: int = 5, hidden: int = 24, features: int = 5, p: float = 0.2):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.GELU(),
            nn.Dropout(p),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Dropout(p),
            nn.Linear(hidden, features),
        )

    def forward(self, x):
        return self.body(x)
