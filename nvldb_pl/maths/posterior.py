"""A posterior over the items' utilities from the answers alone: Bayesian linear-logistic preference (Laplace).

The page's ranking reads this, not the network's point estimate: with tens of answers the network's features are
still near their random start, while a model linear in the item's own features, u(x) = w^T x, is what a handful of
answers can pin down (Chu and Ghahramani 2005 and Houlsby et al. 2011 with a linear kernel). Prior w ~ N(0, s^2 I);
each answer o_i (1: the first item won) of a pair with feature difference z_i [d] has likelihood g(s_i w^T z_i), g
the link. The posterior is approximated at its mode w* (Newton, float64 Cholesky solves) by N(w*, H^-1),

    H = I / s^2 + sum_i l''(w*^T z_i) z_i z_i^T          (l = -log g, l'' = p (1 - p) for the logistic link)

and s^2, the scale of the person's utilities, is read from the answers rather than assumed: each value of a grid is
weighted by its Laplace evidence (a flat prior over log s^2),

    log p(D | s^2) ~ -sum_i l(w*^T z_i) - ||w*||^2 / (2 s^2) - (d / 2) log s^2 - (1 / 2) log det H,

and the posterior is the weighted mixture, moment-matched to one Gaussian (the value of largest evidence alone gave
bands that held the truth 50-75% of the time where they said 90%: lab/results/short/ranking/README.md).

Item k's utility is N(x_k^T w*, x_k^T H^-1 x_k); any two items' gap f_k - f_j likewise, with its covariance. This is
the right posterior where the person's taste is linear in the features (the simulated persons of the τ tables and
the Train data's conditional logit); tests/maths/test_posterior.py checks its 90% bands' coverage in simulation.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from . import links
from .ranking import settled

PRIOR_VARIANCES = tuple(4.0**k for k in range(-2, 5))  # 1/16 .. 256: the evidence's grid over s^2


def _modes(
    z: torch.Tensor, c: torch.Tensor, prior_vars, link: str, start: Optional[torch.Tensor] = None, iterations: int = 50
):
    """The mode w* of the linear-logistic posterior (Newton, float64 Cholesky solves) at every prior variance of
    ``prior_vars`` [G] at once, given c [n] answers won by the first item of each pair of gap z [n, d]: w* [G, d],
    the curvature H = I / s^2 + sum_i c_i l''(w*^T z_i) z_i z_i^T [G, d, d] and -log p(D | w*) [G] (each variance's
    iterations stop where its own would: one batch of G solves). From ``start`` [G, d] (the modes of fewer of the
    same person's answers), else from 0; a start from which Newton does not converge is dropped for 0."""
    G, d = len(prior_vars), z.shape[1]
    inv = 1.0 / torch.tensor(prior_vars, dtype=torch.float64)  # [G]
    eye = torch.eye(d, dtype=torch.float64)
    w = torch.zeros(G, d, dtype=torch.float64) if start is None else start.to(torch.float64).clone()
    active = torch.ones(G, dtype=torch.bool)

    one = torch.ones_like(c)
    zt = z.T.unsqueeze(0)  # [1, d, n]

    def hessian(d2):  # [G, n] -> z^T diag(c d2_g) z + I / s2_g  [G, d, d]
        return (zt * (c * d2).unsqueeze(1)) @ z + inv[:, None, None] * eye

    for _ in range(iterations):
        d1, d2 = links.nll_derivatives(link, w @ z.T, one)  # [G, n]
        grad = (c * d1) @ z + w * inv[:, None]
        step = torch.cholesky_solve(grad.unsqueeze(2), torch.linalg.cholesky(hessian(d2))).squeeze(2)
        w = torch.where(active[:, None], w - step, w)
        active &= ~(step.abs().amax(dim=1) < 1e-10)
        if not bool(active.any()):
            break
    if start is not None and (bool(active.any()) or not bool(torch.isfinite(w).all())):
        return _modes(z, c, prior_vars, link, None, iterations)
    f = w @ z.T
    _, d2 = links.nll_derivatives(link, f, one)
    nll = -(c * links.log_prob(link, f)).sum(dim=1)
    return w, hessian(d2), nll


def _counted_rows(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of z [n, d] (equal in every bit) and how often each occurs, float64 [m]."""
    rows = np.ascontiguousarray(z.detach().cpu().numpy())
    key = rows.view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).ravel()  # a row's bytes: one sortable key
    _, first, count = np.unique(key, return_index=True, return_counts=True)
    return torch.from_numpy(rows[first]).to(z.device), torch.from_numpy(count).to(z.device, torch.float64)


def linear_posterior(z, o, link: str = "logistic", with_evidence: bool = False, modes: Optional[list] = None):
    """The posterior N(mean [d], cov [d, d]) of w given answers o [n] on pairs of feature difference z [n, d]
    (first item minus second), and the prior variance the evidence gives (its weighted mean); ``with_evidence``: and,
    fourth, the log evidence log p(D), each grid value's Laplace evidence averaged over the grid (a flat prior over
    log s^2), which compares feature maps of other dimensions (:func:`taste_posterior`). No answer: the prior at
    s^2 = 1 (evidence 0). ``modes``: a list the caller keeps for one person (empty at first): Newton starts from the
    modes it holds [G, d] (those of the person's answers before: 3-4 steps instead of 11-14, the same posterior to
    rounding) and leaves this fit's there."""
    z = torch.as_tensor(z, dtype=torch.float64)
    o = torch.as_tensor(o, dtype=torch.float64)
    if z.dim() != 2 or o.shape != (z.shape[0],):
        raise ValueError(f"z [n, d] and o [n]: got shapes {list(z.shape)} and {list(o.shape)}")
    if not (bool(torch.isfinite(z).all()) and bool(((o == 0) | (o == 1)).all())):
        raise ValueError("z: finite feature differences, o: answers 0 or 1")
    d = z.shape[1]
    if z.shape[0] == 0:
        out = torch.zeros(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64), 1.0
        return (*out, 0.0) if with_evidence else out
    s2s = torch.tensor(PRIOR_VARIANCES, dtype=torch.float64)
    # each answer as the gap of the item it preferred (g(-v) = 1 - g(v)), the answers of one such gap counted together
    won, count = _counted_rows(torch.where(o[:, None] == 1, z, -z))
    start = modes[0] if modes and modes[0].shape == (len(PRIOR_VARIANCES), d) else None
    w, H, nll = _modes(won, count, PRIOR_VARIANCES, link, start)  # every grid value at once
    if modes is not None:
        modes[:] = [w]
    chol = torch.linalg.cholesky(H)
    half_logdet = torch.log(torch.diagonal(chol, dim1=1, dim2=2)).sum(dim=1)
    evidence = -nll - (w * w).sum(dim=1) / (2 * s2s) - 0.5 * d * torch.log(s2s) - half_logdet  # [G]
    # the prior variance is not known either: each grid value weighted by its evidence (a flat prior over log s^2),
    # the mixture's mean and covariance (moment-matched): picking the best value alone made the bands too narrow
    top = float(evidence.max())
    weights = torch.exp(evidence - top)
    log_evidence = top + math.log(float(weights.sum()) / len(PRIOR_VARIANCES))
    weights = weights / weights.sum()
    mean = weights @ w
    spread = w - mean
    cov = torch.einsum("g,gij->ij", weights, torch.cholesky_inverse(chol)) + torch.einsum(
        "g,gi,gj->ij", weights, spread, spread
    )
    s2 = float(weights @ s2s)
    return (mean, cov, s2, log_evidence) if with_evidence else (mean, cov, s2)


# The separable map joins the average once there are this many answers, a priori exp(SEPARABLE_LOG_PRIOR) as likely
# as each of the others (lab/screens/rows/taste6.md: it helps ideal points, and asking under it before 40 answers
# did not hold on noisy persons).
SEPARABLE_AFTER = 40
SEPARABLE_LOG_PRIOR = -2.0


def taste_maps(items, separable: bool = False) -> dict:
    """The feature maps a taste is read in, from the items' own features [N, d] (any scale): ``linear``, the features
    standardized over the items (a column with one value for every item: 0); ``quadratic``, those with their squares
    and pairwise products, over sqrt(d) (an ideal point, an interaction); with ``separable``, also the standardized
    features and their squares alone, over sqrt(d) (an ideal point in 2d coefficients). Each a function
    [n, d] -> [n, q], so that the items and the history's rows are read alike."""
    x = torch.as_tensor(items, dtype=torch.float64)
    mean, std = x.mean(0), x.std(0, unbiased=False)
    std = torch.where(std > 1e-12 * x.abs().amax(0).clamp(min=1.0), std, torch.inf)

    def linear(v):
        return (torch.as_tensor(v, dtype=torch.float64) - mean) / std

    def quadratic(v):
        z = linear(v)
        i, j = torch.triu_indices(z.shape[1], z.shape[1], offset=1)
        return torch.cat([z, z * z - 1.0, z[:, i] * z[:, j]], dim=1) / math.sqrt(z.shape[1])

    def separable_map(v):
        z = linear(v)
        return torch.cat([z, z * z - 1.0], dim=1) / math.sqrt(z.shape[1])

    return {"linear": linear, "quadratic": quadratic, **({"separable": separable_map} if separable else {})}


def taste_posterior(
    items,
    first,
    second,
    o,
    link: str = "logistic",
    separable_after: Optional[int] = SEPARABLE_AFTER,
    modes: Optional[dict] = None,
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The posterior over the utilities of ``items`` [N, d] given answers o [n] (1: ``first`` [n, d] preferred to
    ``second`` [n, d]), averaged over the feature maps of :func:`taste_maps` by their evidence (Bayesian model
    averaging: a linear taste keeps the linear map's posterior, one that is not gains the quadratic's or the
    separable's once the answers say so); the separable map from ``separable_after`` answers on, with its prior
    ``SEPARABLE_LOG_PRIOR`` (None: the linear and quadratic maps alone). Returns the means f [N], their covariance
    [N, N] (moment-matched over the maps) and each map's weight. ``modes``: a dict the caller keeps for one person
    and these items (empty at first), each map's modes to start from (:func:`linear_posterior`)."""
    fits, weights = [], {}
    separable = separable_after is not None and len(o) >= separable_after
    for name, phi in taste_maps(items, separable).items():
        F = phi(items)
        z = phi(first) - phi(second) if len(o) else torch.zeros(0, F.shape[1], dtype=torch.float64)
        kept = None if modes is None else modes.setdefault(name, [])
        mean, cov, _, log_ev = linear_posterior(z, o, link, with_evidence=True, modes=kept)
        log_ev += SEPARABLE_LOG_PRIOR if name == "separable" else 0.0
        fits.append((log_ev, F @ mean, F @ cov @ F.T))
        weights[name] = log_ev
    top = max(f[0] for f in fits)
    p = torch.tensor([math.exp(f[0] - top) for f in fits], dtype=torch.float64)
    p = p / p.sum()
    f = sum(pk * m[1] for pk, m in zip(p, fits))
    cov = sum(pk * (m[2] + torch.outer(m[1] - f, m[1] - f)) for pk, m in zip(p, fits))
    return f, cov, {name: float(pk) for name, pk in zip(weights, p)}


def item_posterior(x, mean: torch.Tensor, cov: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Utilities of items x [N, d] under N(mean, cov): their means f [N] and covariance [N, N]."""
    x = torch.as_tensor(x, dtype=torch.float64)
    return x @ mean, x @ cov @ x.T


def posterior_ranking_view(f: torch.Tensor, cov_f: torch.Tensor, link: str, level: float = 0.9) -> dict:
    """The page's ranking (as :func:`nvldb_pl.maths.ranking.ranking_view` gives it) from a posterior over the item
    utilities, f [K] with covariance cov_f [K, K]: ``vs_average`` g(f_k - mean f); ``low``, ``high`` the ``level``
    central interval of that probability (its gap f_k - mean f is N(., c_k^T cov_f c_k), c_k = e_k - 1/K); and
    ``settled``, the expected share of pairs in the order shown, mean_{k<j} Phi(|f_k - f_j| / sd(f_k - f_j))."""
    K = f.shape[0]
    c = torch.eye(K, dtype=f.dtype) - 1.0 / K
    sd = torch.sqrt(torch.clamp(torch.einsum("kn,nm,km->k", c, cov_f, c), min=0.0))
    q = math.sqrt(2.0) * torch.erfinv(torch.tensor(level, dtype=f.dtype)).item()  # the two-sided quantile
    d = f - f.mean()
    g = lambda v: links.prob(link, v)  # noqa: E731
    var = torch.diagonal(cov_f).unsqueeze(1) + torch.diagonal(cov_f).unsqueeze(0) - 2 * cov_f  # Var(f_k - f_j)
    gaps = torch.sqrt(torch.clamp(var, min=0.0))
    return {"vs_average": g(d), "low": g(d - q * sd), "high": g(d + q * sd), "settled": settled(f, gaps)}
