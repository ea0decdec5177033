"""Linear contextual dueling baselines: u(x) = theta^T x, estimated by regularized logistic MLE.

Shared estimator (both papers): theta_t = argmin sum_{i<=t} -log g(s_i theta^T z_i) + lam/2 ||theta||^2
with z_i = x_{i,a1} - x_{i,a2}, solved to optimality each round (Newton, float64, warm start;
the public code uses BFGS to the same optimum), and the Gram matrix Sigma_t = lam I + sum z_i z_i^T.
Contexts are the task's raw d-dimensional contexts; selection is batched over seeds.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Optional

import torch

from ..maths import gram, objective, seedwise, selection
from .base import DuelingLearner, Estimate
from .settings import LinkedSettings, check_fields


@dataclass(frozen=True)
class LinearSettings(LinkedSettings):
    """The linear baselines' settings, checked as they are made (each refusal naming its field): ``lam`` the ridge of
    the MLE and Sigma_0 = lam I, ``beta`` the confidence width in force, ``refit_iterations`` Newton's per round."""

    lam: float = 1.0
    beta: float = 1.0
    refit_iterations: int = 8

    def checked(self):
        super().checked()
        check_fields(self, integers={"refit_iterations": 1}, numbers={"lam": True, "beta": True})
        return self


class LinearDueling(DuelingLearner):
    """Base of the linear baselines: theta [S, d] and Sigma [S, d, d] (float64) per seed.

    Args: dim, arms, rounds, num_seeds, link (linked from data); lam: ridge of the MLE and
    Sigma_0 = lam I; beta: confidence width (``None``: the method's own default, see
    :meth:`default_beta`); refit_iterations: Newton iterations per round.
    """

    def __init__(
        self,
        dim: int = 5,
        arms: int = 5,
        rounds: int = 2000,
        num_seeds: int = 20,
        link: str = "logistic",
        lam: float = 1.0,
        beta: Optional[float] = None,
        refit_iterations: int = 8,
    ):
        super().__init__(dim, arms, rounds, num_seeds, link)
        beta = self.default_beta(dim, rounds) if beta is None else beta
        s = self.settings = LinearSettings(dim, arms, rounds, num_seeds, link, lam, beta, refit_iterations).checked()
        self.save_hyperparameters(asdict(s))  # the beta in force (LightningCLI would otherwise save the given None)
        self.register_buffer("theta", torch.zeros(num_seeds, dim, dtype=torch.float64))
        self.register_buffer("Sigma", lam * torch.eye(dim, dtype=torch.float64).repeat(num_seeds, 1, 1))

    def default_beta(self, dim: int, rounds: int) -> float:
        """sqrt(d log T): the width the linear dueling codes run with."""
        return math.sqrt(dim * math.log(max(rounds, 2)))

    def estimate(self, contexts: torch.Tensor) -> Estimate:
        """Utilities ``f`` [S, K] = theta^T x_k, exploration norms ``norm`` [S, K, K] =
        ||x_k - x_k'||_{Sigma^-1} and ``x_norm`` [S, K] = ||x_k||_{Sigma^-1}, from one Cholesky factor of Sigma."""
        x = contexts.to(torch.float64)
        z, ok = gram.whiten(x, self.Sigma)
        norm = gram.norms_from_whitened(z, ok)
        f = seedwise.matvec(x, self.theta)
        self._flag_bad(~ok | ~torch.isfinite(f).all(dim=1), self.t + 1)
        return Estimate(f=f, norm=norm, x_norm=z.pow(2).sum(dim=1).sqrt())

    @torch.no_grad()
    def scores(self, contexts):
        return seedwise.matvec(contexts.to(torch.float64), self.theta)  # theta^T x

    @torch.no_grad()
    def update(self, duel):
        t = self.t
        with self._timed("gram"):
            z = (self.hist_xt[:, :, 2 * t - 2] - self.hist_xt[:, :, 2 * t - 1]).to(torch.float64)
            self.Sigma = gram.rank_one_update(
                self.Sigma, z, torch.ones(z.shape[0], dtype=torch.float64, device=z.device)
            )
        with self._timed("refit"):
            pairs = self.history().to(torch.float64)
            Z = pairs[:, :, 0] - pairs[:, :, 1]
            o = self.hist_o[:, :t].to(torch.float64)
            self.theta = objective.refit_theta(
                self.settings.link,
                self.theta,
                Z,
                o,
                torch.ones_like(o),
                torch.zeros_like(self.theta),
                self.settings.lam,
                self.settings.refit_iterations,
            )
            self._flag_bad(~torch.isfinite(self.theta).all(dim=1), t)


class MaxInP(LinearDueling):
    """MaxInP (Saha 2021, "Optimal algorithms for stochastic contextual preference bandits", Alg. 1).

    Candidate set C_t = {i : (x_i - x_j)^T theta + beta ||x_i - x_j||_{Sigma^-1} > 0 for all j != i};
    play the pair of C_t x C_t with the largest ||x_i - x_j||_{Sigma^-1}. It is the linear form of
    NVLDB's UCB-CSYM, so the rule is :class:`nvldb_pl.maths.selection.CandidateSymmetric` (UCB) on raw
    contexts. beta defaults to 2 sqrt(d log T), the value the VACDB authors' MaxInP code runs with.
    """

    method = "MaxInP"

    def default_beta(self, dim: int, rounds: int) -> float:
        return 2.0 * super().default_beta(dim, rounds)

    @functools.cached_property
    def selection_rule(self) -> selection.SelectionRule:
        return selection.make_rule("ucb_csym", self.settings.beta)  # built once, at the first round

    @torch.no_grad()
    def select(self, contexts, noise, t):
        with self._timed("select"):
            est = self.estimate(contexts)
            return self.selection_rule(est.f, est.norm, noise, t)


class CoLSTIM(LinearDueling):
    """CoLSTIM (Bengs, Saha, Hüllermeier 2022, "Stochastic contextual dueling bandits under linear
    stochastic transitivity models", Alg. 1), on per-round context sets.

    First arm: a1 = argmax_k theta^T x_k + eps_k ||x_k||_{Sigma^-1}, with eps_k standard Gumbel
    (the perturbation matching the logistic link) clipped to +-sqrt(d log T); with probability
    min(1, d log(dT) / sqrt(t)) one eps is shared by all arms, otherwise each arm draws its own.
    Second arm: a2 = argmax_j (x_j - x_a1)^T theta + beta ||x_j - x_a1||_{Sigma^-1} (the
    optimistic comparison against a1); beta defaults to sqrt(d log T).
    Randomness comes from the round's normals (row 0: per-arm eps, entries (1,0) and (1,1): the
    sharing coin and the shared eps) through Phi, so it is a pure function of the seed and round.
    """

    method = "CoLSTIM"
    EXTENDABLE = False  # the perturbation clip and the sharing probability depend on T

    @torch.no_grad()
    def select(self, contexts, noise, t):
        with self._timed("select"):
            hp = self.settings
            est = self.estimate(contexts)
            f, width, norm = est.f, est.norm, est.x_norm
            u = torch.special.ndtr(noise.to(torch.float64)).clamp(1e-12, 1 - 1e-12)
            gumbel = -torch.log(-torch.log(u))
            clip = math.sqrt(hp.dim * math.log(max(hp.rounds, 2)))
            p_shared = min(1.0, hp.dim * math.log(hp.dim * hp.rounds) / math.sqrt(t))
            eps = torch.where((u[:, 1, 0] < p_shared).unsqueeze(1), gumbel[:, 1, 1:2], gumbel[:, 0, :])
            a1 = torch.argmax(f + eps.clamp(-clip, clip) * norm, dim=1)
            w = torch.gather(width, 2, a1.view(-1, 1, 1).expand(-1, f.shape[1], 1)).squeeze(2)  # ||x_j - x_a1||
            a2 = torch.argmax(f + hp.beta * w, dim=1)  # (x_j - x_a1)^T theta differs from f_j by a constant
            return a1, a2
