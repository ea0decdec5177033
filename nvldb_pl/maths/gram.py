"""The Gram matrix V of eq. (gram_matrix) and the exploration norms ||dphi||_{V^-1}.

V_t = lambda I + sum_i dphi_i dphi_i^T / zeta_i^2, kept in float64, one d x d matrix per seed
([S, d, d]). The norms (a_t times one is the paper's confidence width) are computed from a Cholesky factor (never an explicit inverse):
||a||_{V^-1} = ||L^{-1} a||_2 with V = L L^T.
"""

from __future__ import annotations

import torch

from . import seedwise

GRAM_MODES = ("recompute", "incremental")


def gram_from_history(dphi: torch.Tensor, weight: torch.Tensor, lam: float) -> torch.Tensor:
    """lambda I + sum_i weight_i dphi_i dphi_i^T: dphi [S, t, d], weight [S, t] -> [S, d, d]."""
    dphi, weight = dphi.to(torch.float64), weight.to(torch.float64)
    eye = torch.eye(dphi.shape[-1], dtype=torch.float64, device=dphi.device)
    return seedwise.einsum("st,std,ste->sde", weight, dphi, dphi) + lam * eye


def rank_one_update(V: torch.Tensor, dphi: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Alg. 1 line 13: V + weight dphi dphi^T. V [S, d, d], dphi [S, d], weight [S]."""
    dphi = dphi.to(torch.float64)
    return V + weight.to(torch.float64)[:, None, None] * dphi.unsqueeze(2) * dphi.unsqueeze(1)


def whiten(phi: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """z = L^{-1} phi^T with V = L L^T, so ||phi_k||_{V^-1} = ||z[:, :, k]||: phi [S, K, d] -> [S, d, K].

    Also returns ``ok`` [S]: False where V was not positive definite.
    """
    chol, info = seedwise.cholesky_ex(V)
    return seedwise.solve_triangular(chol, phi.to(torch.float64).transpose(1, 2), upper=False), info == 0


def pairwise_norms(phi: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """N[s, k, k'] = ||phi_k - phi_k'||_{V^-1} for one round: phi [S, K, d], V [S, d, d] -> [S, K, K].

    Also returns ``ok`` [S]: False where V was not positive definite (its norms are NaN).
    """
    z, ok = whiten(phi, V)
    return norms_from_whitened(z, ok), ok


def norms_from_whitened(z: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """||z_k - z_k'||_2 for all pairs, NaN where V was not positive definite: [S, d, K] -> [S, K, K]."""
    norms = (z.unsqueeze(3) - z.unsqueeze(2)).pow(2).sum(dim=1).sqrt()  # over d of [S, d, K, K]
    return torch.where(ok[:, None, None], norms, torch.nan)
