"""The utility estimator f(x; theta, W) = theta^T phi(x; W) of eq. (nn), stacked over seeds.

phi(x; W) = sqrt(m) ReLU(W^L ReLU(W^{L-1} ... ReLU(W^1 x))) with W^1 in R^{m x d},
W^l in R^{m x m} (2 <= l <= L-1), W^L in R^{d x m}; no biases, as in the paper.
Every parameter carries a leading seed dimension S: W^l is [S, out, in], theta is [S, d].
Internally the network runs feature-major (points as columns, [S, d, N]): h <- ReLU(W^l h) is one
batched matmul whose long dimension is N, about 2x faster on CPU than the row-major form for
these skinny layers (d = 5 inputs and outputs).
The seeds never mix: summing their losses gives each seed its own gradient, and Adam is
elementwise, so each seed follows its own trajectory.

Initializations (``init``):
* ``paper``: eq. (init). W^l = blockdiag(w, w) with w ~ N(0, 4/m) for l < L and
  W^L = (omega, -omega) with omega ~ N(0, 2/m); theta_0 ~ N(0, 1/d). When a layer's input size
  is odd (e.g. d = 5) the block-diagonal matrix is cut to its first ``in`` columns.
  Requires an even width m.
* ``kaiming``: W^l ~ N(0, 2 / fan_in) (He), theta_0 ~ N(0, 1/d).
"""
from __future__ import annotations

import math

import torch
from torch import nn

INITS = ("paper", "kaiming")


def _paper_layer(out: int, inp: int, var: float, gen: torch.Generator) -> torch.Tensor:
    w = torch.randn(out // 2, (inp + 1) // 2, generator=gen, dtype=torch.float64) * math.sqrt(var)
    return torch.block_diag(w, w)[:, :inp]


def init_weights(dim: int, width: int, depth: int, init: str, gen: torch.Generator) -> list[torch.Tensor]:
    """One seed's [W^1, ..., W^L, theta_0] (float64, CPU), drawn from ``gen``."""
    sizes = [dim] + [width] * (depth - 1) + [dim]
    weights = []
    for layer, (inp, out) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = layer == depth - 1
        if init == "kaiming":
            weights.append(torch.randn(out, inp, generator=gen, dtype=torch.float64) * math.sqrt(2.0 / inp))
        elif last:  # W^L = (omega, -omega)
            omega = torch.randn(out, inp // 2, generator=gen, dtype=torch.float64) * math.sqrt(2.0 / width)
            weights.append(torch.cat([omega, -omega], dim=1))
        else:
            weights.append(_paper_layer(out, inp, 4.0 / width, gen))
    theta0 = torch.randn(dim, generator=gen, dtype=torch.float64) / math.sqrt(dim)
    return weights + [theta0]


class StackedMLP(nn.Module):
    """S independent copies of f(x; theta, W). Shapes: x [S, N, d] -> phi [S, N, d], f [S, N]."""

    def __init__(self, num_seeds: int, dim: int, width: int, depth: int):
        super().__init__()
        if depth < 2:
            raise ValueError(f"model.depth: eq. (nn) needs at least W^1 and W^L, got depth={depth}")
        self.width = width
        sizes = [dim] + [width] * (depth - 1) + [dim]
        self.weights = nn.ParameterList(
            nn.Parameter(torch.zeros(num_seeds, out, inp)) for inp, out in zip(sizes[:-1], sizes[1:])
        )
        self.theta = nn.Parameter(torch.zeros(num_seeds, dim))
        self.register_buffer("theta0", torch.zeros(num_seeds, dim))
        for layer, w in enumerate(self.weights):  # W^l_0, the initial weights
            self.register_buffer(f"w0_{layer}", torch.zeros_like(w))

    @torch.no_grad()
    def load_seed_init(self, per_seed: list[list[torch.Tensor]]) -> None:
        """Copy each seed's [W^1..W^L, theta_0] (from :func:`init_weights`) into the stack."""
        for layer, w in enumerate(self.weights):
            w.copy_(torch.stack([p[layer] for p in per_seed]))
            getattr(self, f"w0_{layer}").copy_(w)
        theta0 = torch.stack([p[-1] for p in per_seed])
        self.theta.copy_(theta0)
        self.theta0.copy_(theta0)

    def distance_to_init(self) -> torch.Tensor:
        """sum_l ||W^l - W^l_0||_F^2 per seed: [S]."""
        return sum((w - getattr(self, f"w0_{layer}")).pow(2).flatten(1).sum(1) for layer, w in enumerate(self.weights))

    def features_t(self, x_t: torch.Tensor) -> torch.Tensor:
        """phi(x; W), eq. (nn), feature-major: x_t [S, d, N] -> phi_t [S, d, N]."""
        h = x_t
        for w in self.weights:
            h = torch.relu(torch.bmm(w, h))
        return math.sqrt(self.width) * h

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """phi(x; W), eq. (nn): [S, N, d] -> [S, N, d]."""
        return self.features_t(x.transpose(1, 2)).transpose(1, 2)

    def utility_t(self, phi_t: torch.Tensor) -> torch.Tensor:
        """f = theta^T phi from feature-major phi_t [S, d, N] -> [S, N]."""
        return torch.bmm(self.theta.to(phi_t.dtype).unsqueeze(1), phi_t).squeeze(1)

    def utility(self, phi: torch.Tensor, theta: torch.Tensor | None = None) -> torch.Tensor:
        """f = theta^T phi: [S, N, d] -> [S, N]."""
        theta = self.theta if theta is None else theta
        return torch.einsum("snd,sd->sn", phi, theta.to(phi.dtype))
