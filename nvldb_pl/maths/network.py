"""The utility estimator f(x; theta, W) = theta^T phi(x; W) of eq. (nn), stacked over seeds.

Two parametrizations (``parametrization``):

* ``ntk`` (eq. nn, literally): phi(x; W) = sqrt(m) ReLU(W^L ReLU(W^{L-1} ... ReLU(W^1 x))) with
  W^1 in R^{m x d}, W^l in R^{m x m} (2 <= l <= L-1), W^L in R^{d x m}; no biases.
* ``standard`` (what the public neural-bandit codes write with ``nn.Linear``, NDB's included):
  phi(x; W, b) = ReLU(W^L ... ReLU(W^1 x + b^1) ... + b^L): no sqrt(m) factor, optional biases.
  With Adam, whose step size does not shrink with m, the sqrt(m) factor makes one step move f
  about sqrt(m) times further as the network widens; this form does not.

``activation`` sets the nonlinearity of every layer (the last one's included): ``relu`` (eq. nn),
``gelu`` (x Phi(x), Phi the standard normal CDF, exact form) or ``silu`` (x sigmoid(x)). A smooth
activation passes a gradient where a ReLU unit is off, so no unit of phi dies and every arm keeps a
non-zero gradient (``docs/paper.md``, "Activation").

In both, phi is the last layer's output and theta the last-layer parameter that shallow
exploration acts on. phi has dimension p = d in eq. (nn) (W^L in R^{d x m}, V is d x d);
``feature_dim`` sets another p (W^L in R^{p x m}, theta in R^p, V p x p): with p = m, phi is as
wide as the hidden layers, as in the public codes where the last layer is ``nn.Linear(m, 1)``.
Every parameter carries a leading seed dimension S: W^l is [S, out, in], theta is [S, d].
Internally the network runs feature-major (points as columns, [S, d, N]): h <- ReLU(W^l h) is one
batched matmul whose long dimension is N, about 2x faster on CPU than the row-major form for
these skinny layers (d = 5 inputs and outputs).
The seeds never mix: summing their losses gives each seed its own gradient, and Adam is
elementwise, so each seed follows its own trajectory.

Initializations (``init``); ``paper`` goes with ``ntk`` only, ``torch`` and ``normal`` with
``standard`` only, ``kaiming`` with either:
* ``paper``: eq. (init). W^l = blockdiag(w, w) with w ~ N(0, 4/m) for l < L and
  W^L = (omega, -omega) with omega ~ N(0, 2/m); theta_0 ~ N(0, 1/d). When a layer's input size
  is odd (e.g. d = 5) the block-diagonal matrix is cut to its first ``in`` columns.
  Requires an even width m.
* ``kaiming``: W^l ~ N(0, 2 / fan_in) (He: keeps the scale of a ReLU layer's output), theta_0 ~
  N(0, 1/p), biases 0.
* ``torch``: PyTorch's default for ``nn.Linear``: every weight and bias of a layer
  U(-1/sqrt(fan_in), 1/sqrt(fan_in)); theta_0 likewise (fan_in = d).
* ``normal``: every weight, bias and theta_0 N(0, 1), as NDB's public code.
Biases are drawn after W and theta_0 from the same generator, so adding them changes no other draw.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from . import seedwise

PARAMETRIZATIONS = ("ntk", "standard")
ACTIVATIONS = ("relu", "gelu", "silu")
INITS_OF = {"ntk": ("kaiming", "paper"), "standard": ("kaiming", "torch", "normal")}  # the first is the default


def _paper_layer(out: int, inp: int, var: float, gen: torch.Generator) -> torch.Tensor:
    w = torch.randn(out // 2, (inp + 1) // 2, generator=gen, dtype=torch.float64) * math.sqrt(var)
    return torch.block_diag(w, w)[:, :inp]


def activate(h: torch.Tensor, activation: str) -> torch.Tensor:
    """The layers' nonlinearity, elementwise: ReLU, GELU (exact, erf form) or SiLU."""
    if activation == "relu":
        return torch.relu(h)
    if activation == "gelu":
        return nn.functional.gelu(h)
    if activation == "silu":
        return nn.functional.silu(h)
    raise ValueError(f"model.activation: {activation!r} is not one of {list(ACTIVATIONS)}")


def layer_sizes(dim: int, width: int, depth: int, feature_dim: int | None = None) -> list[int]:
    """[d, m, ..., m, p]: the input, the L - 1 hidden widths and phi's dimension p (``None``: d, eq. nn)."""
    return [dim] + [width] * (depth - 1) + [dim if feature_dim is None else feature_dim]


def parameter_count(dim: int, width: int, depth: int, bias: bool, feature_dim: int | None = None) -> int:
    """p = |W^1..W^L| + |theta| (+ the biases): the parameters of one seed's network f = theta^T phi(x; W)."""
    sizes = layer_sizes(dim, width, depth, feature_dim)
    return sum(i * o for i, o in zip(sizes[:-1], sizes[1:])) + sizes[-1] + (sum(sizes[1:]) if bias else 0)


def init_weights(
    dim: int, width: int, depth: int, init: str, gen: torch.Generator, feature_dim: int | None = None
) -> list[torch.Tensor]:
    """One seed's [W^1, ..., W^L, theta_0] (float64, CPU), drawn from ``gen``; theta_0 has phi's
    dimension p (``feature_dim``, default d)."""
    sizes = layer_sizes(dim, width, depth, feature_dim)
    p = sizes[-1]
    weights = []
    if init in ("torch", "normal"):
        for inp, out in zip(sizes[:-1], sizes[1:]):
            weights.append(_standard(init, (out, inp), inp, gen))
        return weights + [_standard(init, (p,), p, gen)]
    for layer, (inp, out) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = layer == depth - 1
        if init == "kaiming":
            weights.append(torch.randn(out, inp, generator=gen, dtype=torch.float64) * math.sqrt(2.0 / inp))
        elif last:  # W^L = (omega, -omega)
            omega = torch.randn(out, inp // 2, generator=gen, dtype=torch.float64) * math.sqrt(2.0 / width)
            weights.append(torch.cat([omega, -omega], dim=1))
        else:
            weights.append(_paper_layer(out, inp, 4.0 / width, gen))
    theta0 = torch.randn(p, generator=gen, dtype=torch.float64) / math.sqrt(p)
    return weights + [theta0]


def _standard(init: str, shape: tuple, fan_in: int, gen: torch.Generator) -> torch.Tensor:
    """``torch``: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (nn.Linear's default); ``normal``: N(0, 1);
    ``kaiming`` (biases only): 0."""
    if init == "kaiming":
        return torch.zeros(*shape, dtype=torch.float64)
    if init == "normal":
        return torch.randn(*shape, generator=gen, dtype=torch.float64)
    return (2.0 * torch.rand(*shape, generator=gen, dtype=torch.float64) - 1.0) / math.sqrt(fan_in)


def init_biases(
    dim: int, width: int, depth: int, init: str, gen: torch.Generator, feature_dim: int | None = None
) -> list[torch.Tensor]:
    """One seed's [b^1, ..., b^L] (float64), drawn from ``gen`` after :func:`init_weights`."""
    sizes = layer_sizes(dim, width, depth, feature_dim)
    return [_standard(init, (out,), inp, gen) for inp, out in zip(sizes[:-1], sizes[1:])]


class StackedMLP(nn.Module):
    """S independent copies of f(x; theta, W). Shapes: x [S, N, d] -> phi [S, N, d], f [S, N].
    ``activation``: one of :data:`ACTIVATIONS`, applied after every layer.

    Parameters, in ``parameters()`` order: W^1..W^L [S, out, in], theta [S, d], then (with
    ``bias``) b^1..b^L [S, out]. ``scale`` is the output factor: sqrt(m) (ntk) or 1 (standard).
    """

    def __init__(
        self,
        num_seeds: int,
        dim: int,
        width: int,
        depth: int,
        parametrization: str = "ntk",
        bias: bool = False,
        feature_dim: int | None = None,
        activation: str = "relu",
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"model.activation: {activation!r} is not one of {list(ACTIVATIONS)}")
        if depth < 2:
            raise ValueError(f"model.depth: eq. (nn) needs at least W^1 and W^L, got depth={depth}")
        if parametrization not in PARAMETRIZATIONS:
            raise ValueError(f"model.parametrization: {parametrization!r} is not one of {list(PARAMETRIZATIONS)}")
        self.width = width
        self.activation = activation
        self.scale = math.sqrt(width) if parametrization == "ntk" else 1.0
        sizes = layer_sizes(dim, width, depth, feature_dim)
        self.weights = nn.ParameterList(
            nn.Parameter(torch.zeros(num_seeds, out, inp)) for inp, out in zip(sizes[:-1], sizes[1:])
        )
        self.theta = nn.Parameter(torch.zeros(num_seeds, sizes[-1]))
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(num_seeds, out)) for out in sizes[1:]) if bias else []
        self.register_buffer("theta0", torch.zeros(num_seeds, sizes[-1]))
        for layer, w in enumerate(self.layer_params()):  # W^l_0 (and b^l_0), the initial values
            self.register_buffer(f"w0_{layer}", torch.zeros_like(w))

    def layer_params(self) -> list[torch.Tensor]:
        """W^1..W^L then b^1..b^L: every network parameter except theta."""
        return list(self.weights) + list(self.biases)

    def param_list(self) -> list[torch.Tensor]:
        """Every parameter in ``parameters()`` order: W^1..W^L, theta, b^1..b^L."""
        return list(self.weights) + [self.theta] + list(self.biases)

    @torch.no_grad()
    def load_seed_init(
        self, per_seed: list[list[torch.Tensor]], biases: list[list[torch.Tensor]] | None = None
    ) -> None:
        """Copy each seed's [W^1..W^L, theta_0] (from :func:`init_weights`) and, with biases, its
        [b^1..b^L] (from :func:`init_biases`) into the stack."""
        for layer, w in enumerate(self.weights):
            w.copy_(torch.stack([p[layer] for p in per_seed]))
        for layer, b in enumerate(self.biases):
            b.copy_(torch.stack([p[layer] for p in biases]))
        for layer, w in enumerate(self.layer_params()):
            getattr(self, f"w0_{layer}").copy_(w)
        theta0 = torch.stack([p[-1] for p in per_seed])
        self.theta.copy_(theta0)
        self.theta0.copy_(theta0)

    def initial_layer_params(self) -> list[torch.Tensor]:
        """W^l_0 (and b^l_0), in :meth:`layer_params` order."""
        return [getattr(self, f"w0_{layer}") for layer in range(len(self.layer_params()))]

    def distance_to_init(self) -> torch.Tensor:
        """sum_l ||W^l - W^l_0||_F^2 (+ ||b^l - b^l_0||^2) per seed: [S]."""
        return sum((w - w0).pow(2).flatten(1).sum(1) for w, w0 in zip(self.layer_params(), self.initial_layer_params()))

    def training_pass(self):
        """The Adam steps' passes; the built-in MLP draws no noise, so nothing changes (see
        :meth:`nvldb_pl.maths.user_network.StackedNetwork.training_pass`)."""
        return contextlib.nullcontext()

    def features_t(self, x_t: torch.Tensor) -> torch.Tensor:
        """phi(x; W), eq. (nn) (or its standard form), feature-major: x_t [S, d, N] -> [S, d, N]."""
        h = x_t
        for layer, w in enumerate(self.weights):
            h = seedwise.bmm(w, h)
            if self.biases:  # added after the matmul: baddbmm's rounding depends on the batch size
                h = h + self.biases[layer].unsqueeze(2)
            h = activate(h, self.activation)
        return h if self.scale == 1.0 else self.scale * h

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """phi(x; W), eq. (nn): [S, N, d] -> [S, N, d]."""
        return self.features_t(x.transpose(1, 2)).transpose(1, 2)

    def utility_t(self, phi_t: torch.Tensor) -> torch.Tensor:
        """f = theta^T phi from feature-major phi_t [S, d, N] -> [S, N]."""
        return seedwise.bmm(self.theta.to(phi_t.dtype).unsqueeze(1), phi_t).squeeze(1)

    def utility(self, phi: torch.Tensor, theta: torch.Tensor | None = None) -> torch.Tensor:
        """f = theta^T phi: [S, N, d] -> [S, N]."""
        theta = self.theta if theta is None else theta
        return seedwise.matvec(phi, theta.to(phi.dtype))
