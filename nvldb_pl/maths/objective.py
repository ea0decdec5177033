"""The training objective: weights zeta (eq. wi), loss (eq. total_loss), theta refit (Alg. 1 line 10).

Shapes carry the seed dimension first: history tensors are [S, t] (or [S, t, d]), parameters
[S, d]; every reduction over the history is per seed, so seeds never mix.
"""

from __future__ import annotations

import functools

import torch

from . import links, seedwise


def zeta(delta: torch.Tensor, link: str, epsilon: float, mode: str) -> torch.Tensor:
    """zeta_i of eq. (wi): max(sigma_i, epsilon), sigma_i^2 = g(delta)(1 - g(delta)); 1 if ``none``.

    ``delta`` is Delta f_i for the estimated variance, or the true Delta u_i for ``oracle``.
    Returned detached: zeta is a weight, not a path for gradients.
    """
    if mode == "none":
        return torch.ones_like(delta)
    p = links.prob(link, delta.detach())
    return torch.clamp(torch.sqrt(p * (1.0 - p)), min=epsilon)


def weighted_nll(link: str, delta_f: torch.Tensor, o: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """sum_i -log g((-1)^(1-o_i) Delta f_i) / zeta_i^2, per seed: [S, t] -> [S] (eq. total_loss)."""
    sign = 2.0 * o.to(delta_f.dtype) - 1.0
    return -(weight.to(delta_f.dtype) * links.log_prob(link, sign * delta_f)).sum(dim=1)


def ridge(theta: torch.Tensor, theta0: torch.Tensor, lam: float) -> torch.Tensor:
    """lambda/2 ||theta - theta_0||^2 per seed: [S, d] -> [S]."""
    return 0.5 * lam * (theta - theta0).pow(2).sum(dim=1)


def theta_objective(link, theta, dphi, o, weight, theta0, lam) -> torch.Tensor:
    """eq. (total_loss) as a function of theta alone, W fixed: [S, d] -> [S]."""
    return weighted_nll(link, seedwise.matvec(dphi, theta), o, weight) + ridge(theta, theta0, lam)


def theta_gradient(link, theta, dphi, o, weight, theta0, lam, z=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient [S, d] and Hessian [S, d, d] of :func:`theta_objective` (``z``: dphi theta if at hand)."""
    z = seedwise.matvec(dphi, theta) if z is None else z
    d1, d2 = links.nll_derivatives(link, z, o)
    grad = seedwise.einsum("st,std->sd", weight * d1, dphi) + lam * (theta - theta0)
    lam_eye = _lam_eye(lam, theta.shape[1], theta.dtype, theta.device)
    hess = seedwise.einsum("st,std,ste->sde", weight * d2, dphi, dphi) + lam_eye
    return grad, hess


@functools.lru_cache(maxsize=16)
def _lam_eye(lam: float, d: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """lambda I [d, d], made once per (lambda, d, dtype, device) and never written to."""
    return lam * torch.eye(d, dtype=dtype, device=device)


STEP_SIZES = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.0)


@functools.lru_cache(maxsize=None)
def _step_sizes(device: torch.device) -> torch.Tensor:
    """STEP_SIZES made on ``device`` by kernels (exact halvings; a tensor from host data would be a
    blocking copy on CUDA), once per device."""
    ones = torch.ones(1, dtype=torch.float64, device=device)
    return torch.cat([ones, torch.full((4,), 0.5, dtype=torch.float64, device=device).cumprod(0), 0 * ones])


def cholesky_solve(b: torch.Tensor, chol: torch.Tensor) -> torch.Tensor:
    """x = (L L^T)^{-1} b for a batch: b [S, d, k], L [S, d, d] lower. On CUDA as two triangular
    solves (cuBLAS): torch runs a batched ``cholesky_solve`` there through MAGMA, whose potrs
    allocates inside a CUDA graph's capture and breaks it (lab/results/gpu/README.md); elsewhere
    ``torch.cholesky_solve`` (LAPACK's potrs: the CPU results stay what they were)."""
    if chol.device.type != "cuda":
        return torch.cholesky_solve(b, chol)
    return triangular_cholesky_solve(b, chol)


def triangular_cholesky_solve(b: torch.Tensor, chol: torch.Tensor) -> torch.Tensor:
    """(L L^T)^{-1} b as L^{-T} (L^{-1} b): two triangular solves, capturable in a CUDA graph."""
    y = seedwise.solve_triangular(chol, b, upper=False)
    return seedwise.solve_triangular(chol.transpose(-1, -2), y, upper=True)


@torch.no_grad()
def refit_theta(link, theta, dphi, o, weight, theta0, lam, iterations: int = 8) -> torch.Tensor:
    """argmin_theta of eq. (total_loss) with W (hence dphi) and zeta fixed: Alg. 1 line 10.

    A convex d-dimensional problem (g log-concave, lambda > 0), solved by Newton's method in
    float64 with a per-seed backtracking choice among ``STEP_SIZES`` (0 included, so the loss
    never increases). Fixed iteration count: no host synchronisation. All arguments are per
    seed: theta, theta0 [S, d]; dphi [S, t, d]; o, weight [S, t].
    """
    theta = theta.to(torch.float64)
    dphi, o, weight, theta0 = (a.to(torch.float64) for a in (dphi, o, weight, theta0))
    steps = _step_sizes(theta.device)
    sign = (2.0 * o - 1.0).unsqueeze(1)  # (-1)^(1-o_i), [S, 1, t]
    seeds = torch.arange(theta.shape[0], device=theta.device)
    for _ in range(iterations):
        z0 = seedwise.matvec(dphi, theta)  # dphi theta at the current theta, [S, t]
        grad, hess = theta_gradient(link, theta, dphi, o, weight, theta0, lam, z=z0)
        direction = -cholesky_solve(grad.unsqueeze(-1), seedwise.cholesky_ex(hess)[0]).squeeze(-1)
        # Loss along the Newton direction, for every step size at once: z = dphi^T(theta + a dir).
        zd = seedwise.matvec(dphi, direction).unsqueeze(1)
        z = z0.unsqueeze(1) + steps.view(1, -1, 1) * zd  # [S, C, t]
        nll = -(weight.unsqueeze(1) * links.log_prob(link, sign * z)).sum(dim=2)
        cands = theta.unsqueeze(1) + steps.view(1, -1, 1) * direction.unsqueeze(1)  # [S, C, d]
        losses = nll + 0.5 * lam * (cands - theta0.unsqueeze(1)).pow(2).sum(dim=2)
        best = torch.argmin(torch.nan_to_num(losses, nan=float("inf")), dim=1)
        theta = cands[seeds, best]
    return theta
