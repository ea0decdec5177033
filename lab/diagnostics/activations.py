"""The built-in MLP's shape (d -> m -> m -> p, biases, He init, the last layer activated too) with another
activation, as a network of one's own (``model.network``), for the short-horizon screens of lab/results/short/.

    python scripts/sweep.py --rounds 300 --seeds 20 --tasks square \
        --grid '[{"network": {"class_path": "scripts.diagnostics.activations.MLP", "init_args": {"act": "leaky"}}}]'

ReLU passes no gradient where a unit is off, so an arm in a region where phi's units are dead has a zero
gradient there, and the deep test's width ||g_c - g_k||_{Z^-1} reads it as known; a leaky or smooth activation
keeps every arm's gradient non-zero.
"""

import math

import torch
from torch import nn

ACTS = {
    "relu": nn.ReLU,
    "leaky": lambda: nn.LeakyReLU(0.1),
    "gelu": nn.GELU,
    "elu": nn.ELU,
    "softplus": nn.Softplus,
}


class MLP(nn.Module):
    def __init__(self, dim: int = 5, width: int = 32, depth: int = 3, features: int = 5, act: str = "relu"):
        super().__init__()
        sizes = [dim] + [width] * (depth - 1) + [features]
        layers = []
        for inp, out in zip(sizes[:-1], sizes[1:]):
            lin = nn.Linear(inp, out)
            with torch.no_grad():
                lin.weight.normal_(0.0, math.sqrt(2.0 / inp))  # He, as the built-in's kaiming
                lin.bias.zero_()
            layers += [lin, ACTS[act]()]
        self.body = nn.Sequential(*layers)

    def forward(self, x):
        return self.body(x)
