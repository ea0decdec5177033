"""The Gram matrix V of eq. (gram_matrix) and the confidence widths ||dphi||_{V^-1}.

V_t = lambda I + sum_i dphi_i dphi_i^T / zeta_i^2, kept in float64, one d x d matrix per seed
([S, d, d]). Widths are computed from a Cholesky factor (never an explicit inverse):
||a||_{V^-1} = ||L^{-1} a||_2 with V = L L^T.
"""
from __future__ import annotations

import torch

GRAM_MODES = ("recompute", "incremental")


def gram_from_history(dphi: torch.Tensor, weight: torch.Tensor, lam: float) -> torch.Tensor:
    """lambda I + sum_i weight_i dphi_i dphi_i^T: dphi [S, t, d], weight [S, t] -> [S, d, d]."""
    dphi, weight = dphi.to(torch.float64), weight.to(torch.float64)
    eye = torch.eye(dphi.shape[-1], dtype=torch.float64, device=dphi.device)
    return torch.einsum("st,std,ste->sde", weight, dphi, dphi) + lam * eye


def rank_one_update(V: torch.Tensor, dphi: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Alg. 1 line 13: V + weight dphi dphi^T. V [S, d, d], dphi [S, d], weight [S]."""
    dphi = dphi.to(torch.float64)
    return V + weight.to(torch.float64)[:, None, None] * dphi.unsqueeze(2) * dphi.unsqueeze(1)


def pairwise_widths(phi: torch.Tensor, V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """N[s, k, k'] = ||phi_k - phi_k'||_{V^-1} for one round: phi [S, K, d], V [S, d, d] -> [S, K, K].

    Also returns ``ok`` [S]: False where V was not positive definite (its widths are NaN).
    """
    chol, info = torch.linalg.cholesky_ex(V)
    z = torch.linalg.solve_triangular(chol, phi.to(torch.float64).transpose(1, 2), upper=False)  # [S, d, K]
    diff = z.unsqueeze(3) - z.unsqueeze(2)  # [S, d, K, K]
    widths = diff.pow(2).sum(dim=1).sqrt()
    ok = info == 0
    return torch.where(ok[:, None, None], widths, torch.nan), ok
