"""When a rule may duel an arm with itself: the self-duel tests, batched over seeds.

A self-duel (a1 = a2) costs nothing when a1 is the best arm and carries no information (Delta phi = 0,
zero loss gradient), so it is worth playing only when the learner is sure of a1. The paper's rules
self-duel as soon as f_a1 >= f_k + a_t ||Delta phi_{k,a1}||_{V^-1} for every k, a width that covers
theta's error given phi but not the representation's: the network is confident within a few rounds and a
learner self-dueling on a wrong arm stops learning. a2 != a1 (NDB's code) never self-duels and so pays
at least half the best-vs-second gap a round. Each test here takes the pair of a rule run with a2 != a1
and may replace it by the greedy arm's self-duel:

* :func:`deep_test`: (c, c) with c = argmax_k f_k where c's lead clears every other arm under the width
  of the whole network's gradient, f_c - f_k >= a_t ||g_c - g_k||_{Z^-1} for all k != c, Z = lambda I +
  sum_i (g_{i,a1} - g_{i,a2})(...)^T (NDB's Gram, its ``full`` or ``diag`` form): the representation's
  own error is in the width.
* :func:`deep_second_arm`: the rule's a1 kept, a2 = argmax_{k != a1} f_k + a_t ||g_k - g_a1||_{Z^-1} (the
  second arm of NDB-UCB under the deep test's Gram), so the distinct duels explore where the whole network
  is unsure, not only theta given phi.
* :func:`escape`: the rule run with self-duels allowed; a self-duel is replaced, with probability
  min(1, c / sqrt(t)), by the pair of the same rule with a2 != a1, so that a stuck learner keeps getting
  informative duels (sum_t c/sqrt(t) grows without bound, its regret as sqrt(T)).

Shapes: f [S, K], D [S, K, K] (D[s, k, k'] = ||g_k - g_k'||), pairs (a1, a2) two [S] int64.
"""

from __future__ import annotations

import math

import torch

from . import seedwise, selection

SELF_DUEL_TESTS = ("none", "deep_diag", "deep_full", "escape")


def confident_greedy(f: torch.Tensor, D: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(c [S], sure [S]): c = argmax_k f_k; sure where f_c - f_k >= beta D[c, k] for every k != c."""
    c = torch.argmax(f, dim=1)
    rows = torch.arange(f.shape[0], device=f.device)
    lead = f[rows, c].unsqueeze(1) - f  # f_c - f_k  [S, K]
    clears = (lead >= beta * D[rows, c]) | torch.nn.functional.one_hot(c, f.shape[1]).bool()  # k = c: no condition
    return c, clears.all(dim=1)


def deep_test(pair: tuple[torch.Tensor, torch.Tensor], f: torch.Tensor, D: torch.Tensor, beta: float):
    """The rule's distinct ``pair``, or (c, c) where :func:`confident_greedy` is sure."""
    c, sure = confident_greedy(f, D, beta)
    return torch.where(sure, c, pair[0]), torch.where(sure, c, pair[1])


def deep_second_arm(a1: torch.Tensor, f: torch.Tensor, D: torch.Tensor, beta: float) -> torch.Tensor:
    """a2 [S] = argmax_{k != a1} f_k + beta D[a1, k] (ties to the lowest index)."""
    return selection.optimistic_rival(a1, f, D, beta)


def escape(
    allowed: tuple[torch.Tensor, torch.Tensor],
    distinct: tuple[torch.Tensor, torch.Tensor],
    uniform: torch.Tensor,
    t: int,
    c: float = 1.0,
):
    """``allowed`` (self-duels allowed), its self-duels replaced by ``distinct`` where uniform [S] < c/sqrt(t)."""
    swap = (allowed[0] == allowed[1]) & (uniform < min(1.0, c / math.sqrt(t)))
    return torch.where(swap, distinct[0], allowed[0]), torch.where(swap, distinct[1], allowed[1])


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
