"""Link functions g: R -> [0, 1] of the preference model P(o=1) = g(u(x_1) - u(x_2)).

The paper (Problem Setting) allows any exponential-family link; we ship the two classics:
``logistic`` (Bradley-Terry-Luce, the default) and ``probit`` (Thurstone-Mosteller).
Every function here is elementwise, so it works on any batch shape (seeds x history, ...).
"""

from __future__ import annotations

import math

import torch

LINKS = ("logistic", "probit")


def check_link(name: str, field: str = "link") -> str:
    if name not in LINKS:
        raise ValueError(f"{field}={name!r} is not a known link function; choose one of {list(LINKS)}")
    return name


def sigmoid(z: torch.Tensor) -> torch.Tensor:
    """1 / (1 + exp(-z)), the same in every element whatever the tensor's size.

    torch.sigmoid on CPU computes a vectorized body and a scalar tail that differ in the last
    bit, and which elements fall in the tail depends on the tensor's size, so on the number of
    seeds: a seed's results then depend on the seeds beside it. exp, + and / agree in both paths
    (tests/maths/test_math.py checks this). Saturates to 0 and 1 without NaN (exp(-z) = inf gives 0).
    On CUDA, ``torch.sigmoid``: one kernel that computes every element alike, 1 / (1 + exp(-z)) in
    the same IEEE steps (four kernels fewer, twice in each Adam step of a CUDA graph).
    """
    if z.device.type == "cuda":
        return torch.sigmoid(z)
    return 1.0 / (1.0 + torch.exp(-z))


def prob(link: str, z: torch.Tensor) -> torch.Tensor:
    """g(z): probability that the first item of a pair wins."""
    if link == "logistic":
        return sigmoid(z)
    return torch.special.ndtr(z)


def log_prob(link: str, z: torch.Tensor) -> torch.Tensor:
    """log g(z), computed stably for large |z|."""
    if link == "logistic":
        return torch.nn.functional.logsigmoid(z)
    return torch.special.log_ndtr(z)


def nll_first_derivative(link: str, z: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """d/dz of l(z) = -log g((-1)^(1-o) z) alone: the first of :func:`nll_derivatives`, bit for bit,
    without computing the second (the Adam steps' gradient needs only this one)."""
    if link == "logistic":
        return sigmoid(z) - o
    return nll_derivatives(link, z, o)[0]


def nll_derivatives(link: str, z: torch.Tensor, o: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First and second derivative in z of l(z) = -log g((-1)^(1-o) z), for Newton's method.

    Both are elementwise; the second is >= 0 for both links (log-concave g), so the refit
    of theta with W fixed is a convex problem.
    """
    if link == "logistic":
        p = sigmoid(z)
        return p - o, p * (1.0 - p)
    s = 2.0 * o - 1.0  # (-1)^(1-o)
    sz = s * z
    # Mills-ratio form r = pdf(sz)/cdf(sz), computed in log space for stability.
    r = torch.exp(-0.5 * sz * sz - 0.5 * math.log(2 * math.pi) - torch.special.log_ndtr(sz))
    return -s * r, r * (sz + r)
