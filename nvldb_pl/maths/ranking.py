"""The ranking objective: the pair whose answer tells the learner most about the order of what is on offer.

Where people answer to build a ranking (a study of tastes, not a search for the best item), a pair of two good
items is no better than any other: every order matters. The rule here reads the learner's estimate as a Gaussian
belief about each pair's utility gap, Delta f_kk' ~ N(m, s^2) with m = f_k - f_k' and s = a_t ||.||_kk' (the
learner's own exploration norm, [S, K, K], as the regret rules take it), and asks the pair of largest BALD
(Houlsby et al. 2011, "Bayesian Active Learning for Classification and Preference Learning", eq. 4 with the probit
approximation of the answer's link):

    BALD(m, s) = h(Phi(m / sqrt(s^2 + 1))) - C / sqrt(s^2 + C^2) exp(-m^2 / (2 (s^2 + C^2))),  C^2 = pi ln 2 / 2

the entropy of the answer less its expected entropy given the gap, in bits: large where the order is open
(m near 0) and the gap is uncertain (s large), 0 where the learner is sure. Never a self-duel; ties go to the lowest
index (row-major), as the regret rules' do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from . import links

OBJECTIVES = ("regret", "rank")
_C2 = math.pi * math.log(2.0) / 2.0


def check_objective(objective: str, field: str = "objective") -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"{field}: {objective!r} is not one of {list(OBJECTIVES)}")
    return objective


def binary_entropy(p: torch.Tensor) -> torch.Tensor:
    """h(p) in bits, 0 at p = 0 and p = 1."""
    p = p.clamp(1e-12, 1 - 1e-12)
    return -(p * torch.log2(p) + (1 - p) * torch.log2(1 - p))


def bald(m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The expected information of an answer about a gap N(m, s^2) (the module's equation), elementwise, at least 0
    (the approximation of h(Phi(.)) dips a few thousandths of a bit below 0 where s is near 0)."""
    s2 = s * s
    answer = binary_entropy(torch.special.ndtr(m / torch.sqrt(s2 + 1.0)))
    given_gap = math.sqrt(_C2) / torch.sqrt(s2 + _C2) * torch.exp(-m * m / (2.0 * (s2 + _C2)))
    return (answer - given_gap).clamp(min=0.0)


@dataclass(frozen=True)
class InformativePair:
    """argmax_{k != k'} BALD(f_k - f_k', a_t norm_kk'): f [S, K], norm [S, K, K] -> (a1, a2), two [S] int64; with
    ``allowed`` [S, K, K] bool, among the allowed pairs only (:func:`question_mask`)."""

    beta: float = 1.0

    def __call__(self, f: torch.Tensor, norm: torch.Tensor, allowed=None) -> tuple[torch.Tensor, torch.Tensor]:
        return best_pair(bald(f.unsqueeze(2) - f.unsqueeze(1), self.beta * norm), allowed)


def best_pair(score: torch.Tensor, allowed=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The pair (k, k'), k != k', of largest ``score`` [S, K, K] among ``allowed`` [S, K, K] (None: every pair);
    ties to the lowest index, row-major. Two [S] int64."""
    K = score.shape[-1]
    keep = ~torch.eye(K, dtype=torch.bool, device=score.device)
    if allowed is not None:
        keep = keep & allowed
    flat = torch.argmax(score.masked_fill(~keep, -torch.inf).flatten(1), dim=1)
    return flat // K, flat % K


def posterior_pair(f: torch.Tensor, cov: torch.Tensor, allowed=None) -> tuple[int, int]:
    """The question of largest BALD under a posterior over the items' utilities, f [K] with covariance cov [K, K]
    (each gap f_k - f_k' ~ N(f_k - f_k', cov_kk + cov_k'k' - 2 cov_kk')), among ``allowed`` [K, K]."""
    var = torch.diagonal(cov).unsqueeze(1) + torch.diagonal(cov).unsqueeze(0) - 2 * cov
    score = bald(f.unsqueeze(1) - f.unsqueeze(0), torch.sqrt(var.clamp(min=0.0)))
    a1, a2 = best_pair(score.unsqueeze(0), None if allowed is None else allowed.unsqueeze(0))
    return int(a1[0]), int(a2[0])


def question_mask(shown: torch.Tensor, last=None, asked=()) -> torch.Tensor:
    """The pairs a person is asked next, [K, K] bool: never the pair just asked (``last``, (k, k') in either order)
    nor one of ``asked`` (pairs out to others and not answered yet),
    and while some items of ``shown`` [K] bool were never shown, a pair of two of them, or with one of them (every
    item early, each new item shown beside another new one while there are two). Where that leaves no pair, the
    first rule alone; where that leaves none either (two items), every pair but a
    self-duel."""
    K = shown.shape[0]
    every = ~torch.eye(K, dtype=torch.bool)
    fresh = every.clone()
    for a, b in ([last] if last is not None else []) + list(asked):
        fresh[a, b] = fresh[b, a] = False
    unseen = ~shown.to(torch.bool).cpu()
    both = fresh & unseen.unsqueeze(0) & unseen.unsqueeze(1)
    early = fresh & (unseen.unsqueeze(0) | unseen.unsqueeze(1))
    for ok in (both, early, fresh, every):  # the first that leaves a pair
        if bool(ok.any()):
            return ok
    return every


def ranking_view(f: torch.Tensor, norm: torch.Tensor, beta: float, link: str) -> dict:
    """What one learner's estimate says of its ranking, on scales a person reads, from f [K] and norm [K, K] (one
    seed; the exploration norms, read as above: f_k - f_j ~ N(m, (beta norm_kj)^2)).

    ``vs_average`` [K]: g(f_k - mean_j f_j), the learner's probability that item k is preferred to an item of the
    catalog's average utility (g the link); ``low``, ``high`` [K]: the same at f_k - mean f -/+ beta w_k, w_k =
    mean_{j != k} norm_kj (the item's average width against the others); ``settled``: the expected share of pairs
    in the order the ranking shows, mean_{k < j} Phi(|f_k - f_j| / (beta norm_kj)) (1: every pair certain; 0.5 for
    a learner that knows nothing), the learner's own estimate, as sure as its widths are."""
    K = f.shape[0]
    d = f - f.mean()
    off = ~torch.eye(K, dtype=torch.bool, device=f.device)
    w = (norm * off).sum(dim=1) / max(K - 1, 1)
    g = lambda z: links.prob(link, z)  # noqa: E731
    return {"vs_average": g(d), "low": g(d - beta * w), "high": g(d + beta * w), "settled": settled(f, beta * norm)}


def settled(f: torch.Tensor, sd: torch.Tensor) -> float:
    """The expected share of pairs in the order f [K] shows, mean_{k < j} Phi(|f_k - f_j| / sd_kj), the gaps' spreads
    sd [K, K] (a pair of spread 0: in order where its gap is not 0); 1 for fewer than two items."""
    K = f.shape[0]
    upper = torch.triu(torch.ones(K, K, dtype=torch.bool, device=f.device), diagonal=1)
    gap, width = (f.unsqueeze(1) - f.unsqueeze(0)).abs()[upper], sd[upper]
    sure = torch.where(width > 0, torch.special.ndtr(gap / width.clamp(min=1e-12)), (gap > 0).to(f.dtype))
    return float(sure.mean()) if sure.numel() else 1.0


def bradley_terry(n: int, pairs: list, prior: float = 1.0, iterations: int = 200) -> np.ndarray:
    """Bradley-Terry log-strengths of ``n`` items from ``pairs`` [(winner, loser), ...], P(i beats j) =
    sigmoid(s_i - s_j), by Newton's method on the log-likelihood plus a Gaussian prior s ~ N(0, 1/prior) (an item
    never compared stays at 0, the prior's mean; an item that always wins stays finite). Returns s [n]."""
    s = np.zeros(n)
    if not pairs:
        return s
    w, l_ = (np.array(x, dtype=int) for x in zip(*pairs))
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(s[w] - s[l_])))  # P(winner beats loser)
        grad = -prior * s
        np.add.at(grad, w, 1.0 - p)
        np.add.at(grad, l_, -(1.0 - p))
        h = p * (1.0 - p)
        hess = -prior * np.eye(n)
        np.add.at(hess, (w, w), -h)
        np.add.at(hess, (l_, l_), -h)
        np.add.at(hess, (w, l_), h)
        np.add.at(hess, (l_, w), h)
        step = np.linalg.solve(hess, grad)
        s = s - step
        if np.abs(step).max() < 1e-10:
            break
    return s
