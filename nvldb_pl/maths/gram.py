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


def gradient_pair_norms(
    g: torch.Tensor, Zinv: torch.Tensor | None = None, U: torch.Tensor | None = None
) -> torch.Tensor:
    """||g_k - g_k'||_{Z^-1} for all pairs: g [S, K, p] with Zinv [S, p, p] (full) or U [S, p] (diag Z) -> [S, K, K]."""
    M = (
        seedwise.bmm(seedwise.bmm(g, Zinv), g.transpose(1, 2))
        if Zinv is not None
        else seedwise.bmm(g / U.unsqueeze(1), g.transpose(1, 2))
    )
    diag = torch.diagonal(M, dim1=1, dim2=2)
    return (diag.unsqueeze(2) + diag.unsqueeze(1) - 2 * M).clamp(min=0).sqrt()


def sherman_morrison_(Zinv: torch.Tensor, z: torch.Tensor) -> None:
    """(Z + z z^T)^-1 in place from Zinv [S, p, p] = Z^-1 and z [S, p]."""
    vz = seedwise.bmm(Zinv, z.unsqueeze(2))
    u = vz / (1.0 + (z.unsqueeze(2) * vz).sum(1, keepdim=True)).sqrt()
    Zinv.baddbmm_(u, u.transpose(1, 2), alpha=-1.0)


GRADIENT_GRAM_FORMS = ("full", "diag")


class GradientGram(torch.nn.Module):
    """Z = lambda I + sum_i z_i z_i^T over all p network parameters, S seeds (float64): NDB's V and the deep
    self-duel test's Z (:mod:`nvldb_pl.maths.selfduel`), z_i = g(x_{i,a1}) - g(x_{i,a2}) the duel's gradient
    difference at selection time.

    ``full`` keeps Z^-1 as buffer ``Zinv`` [S, p, p], updated by Sherman-Morrison rank-one steps (O(p^2) a duel,
    never a p x p inverse or Cholesky in the loop); ``diag`` keeps diag(Z) as buffer ``U`` [S, p], with
    ||z||^2_{Z^-1} ~ sum_j z_j^2 / U_j (the diagonal approximation neural-bandit codes use at larger widths)."""

    def __init__(self, num_seeds: int, p: int, lam: float, form: str = "full"):
        super().__init__()
        if form not in GRADIENT_GRAM_FORMS:
            raise ValueError(f"gram: {form!r} is not one of {list(GRADIENT_GRAM_FORMS)}")
        self.form = form
        if form == "full":
            self.register_buffer("Zinv", torch.eye(p, dtype=torch.float64).repeat(num_seeds, 1, 1) / lam)  # Z_0^-1
        else:
            self.register_buffer("U", torch.full((num_seeds, p), lam, dtype=torch.float64))  # diag Z_0

    @staticmethod
    def bytes_per_seed(p: int, form: str) -> int:
        """The float64 state one seed keeps: p x p (``full``) or p (``diag``) numbers."""
        return p * (p if form == "full" else 1) * 8

    def pair_norms(self, g: torch.Tensor) -> torch.Tensor:
        """||g_k - g_k'||_{Z^-1} of one round: g [S, K, p] (float64) -> [S, K, K]."""
        full = self.form == "full"
        return gradient_pair_norms(g, self.Zinv if full else None, None if full else self.U)

    @torch.no_grad()
    def add_(self, z: torch.Tensor) -> None:
        """Z gains z z^T for each seed's duel: z [S, p]."""
        if self.form == "full":
            sherman_morrison_(self.Zinv, z)
        else:
            self.U = self.U + z.pow(2)
