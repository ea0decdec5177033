"""The six arm-selection rules of section "Arm Selection Methods", batched over seeds.

A rule is an object built once from the config (:func:`make_rule`), like an acquisition function:
the learner's estimate goes in, the pair comes out. Inputs for one round, every one with the
seed dimension S first:

* ``f``:     [S, K] estimated utilities theta_{t-1}^T phi(x_{t,k}; W_{t-1})
* ``norm``:  [S, K, K] exploration norms ||Delta phi_{t,k,k'}||_{V_{t-1}^{-1}} (see
  :func:`nvldb_pl.maths.gram.pairwise_norms`; the paper's confidence width is a_t times this)
* ``noise``: [S, K, K] standard normals (Thompson sampling; ASYM uses row 0)
* ``t``:     the round (1-indexed)

and the rule holds ``beta`` (the confidence width coefficient a_t) and ``distinct``. Each rule
returns (a1, a2), two [S] int64 tensors. Ties go to the lowest index (row-major for pairs), as
``torch.argmax`` does. A pair may repeat an arm (k, k) where the equation allows it.

Candidate set C_t (CSYM): the equation quantifies over all k' in [K], but for k' = k it would
read 0 > 0 and leave C_t empty; as the appendix listing does, k' = k is skipped. The greedy arm
argmax_k f_k is always kept in C_t, so C_t is never empty (it satisfies every condition except
under exact ties, where the strict inequality could drop it).

A rule of one's own subclasses :class:`SelectionRule` (its ``__call__`` as below) and is named by its
import path in ``model.strategy`` (``docs/extending.md``).

``distinct=True`` (NDB's public code; the paper's own listings let the loop over the second arm
include a1, whose width is 0, so they allow a self-duel) removes the diagonal: the ASYM second
arm is taken among k != a1, OSYM among pairs k != k', and CSYM among candidate pairs k != k';
when C_t holds one arm c, CSYM duels c with its optimistic competitor, as ASYM does:
argmax_{k != c} f_k + a_t ||Delta phi_{c,k}|| (TS: a_t ||Delta phi_{c,k}|| noise[c, k]).

TS-CSYM follows the main text: the sampled score has mean ||Delta phi||^2_{V^-1} and variance
||Delta phi||^4_{V^-1} / (4 log(K t^2)). The appendix listing departs from the equation (mean
a_t ||.||, scale (a_t ||.||)^2 / 4); we follow the equation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .checks import import_class

STRATEGIES = ("ucb_asym", "ucb_osym", "ucb_csym", "ts_asym", "ts_osym", "ts_csym")


def check_strategy(name: str, field: str = "model.strategy") -> str:
    """``name`` if it is one of :data:`STRATEGIES` or the import path of a :class:`SelectionRule` subclass."""
    if name not in STRATEGIES:
        if not isinstance(name, str) or "." not in name:
            raise ValueError(
                f"{field}={name!r} is not a known strategy; choose one of {list(STRATEGIES)} or give "
                f"the import path of a nvldb_pl.maths.selection.SelectionRule subclass"
            )
        import_class(name, SelectionRule, field, "a nvldb_pl.maths.selection.SelectionRule subclass")
    return name


def rule_label(strategy: str) -> str:
    """The rule's part of a method name: ``UCB-ASYM`` for ``ucb_asym``, the class name for a rule of one's own."""
    return strategy.upper().replace("_", "-") if strategy in STRATEGIES else strategy.rpartition(".")[2]


def _pair_argmax(score: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    K = score.shape[-1]
    flat = torch.argmax(score.flatten(1), dim=1)
    return flat // K, flat % K


def _off_diagonal(K: int, device) -> torch.Tensor:
    return ~torch.eye(K, dtype=torch.bool, device=device)


def candidate_set(f: torch.Tensor, norm: torch.Tensor, beta: float) -> torch.Tensor:
    """C_t as a mask [S, K]: a_t ||dphi_{k,k'}|| > f_k' - f_k for every k' != k."""
    K = f.shape[1]
    beats = beta * norm > (f.unsqueeze(1) - f.unsqueeze(2))  # [s, k, k']: a_t N_kk' > f_k' - f_k
    beats |= torch.eye(K, dtype=torch.bool, device=f.device)
    cand = beats.all(dim=2)
    greedy = torch.nn.functional.one_hot(torch.argmax(f, dim=1), K).bool()
    return cand | greedy


def optimistic_rival(
    c: torch.Tensor, f: torch.Tensor, width: torch.Tensor, beta: float, noise: torch.Tensor | None = None
) -> torch.Tensor:
    """c's optimistic competitor [S]: argmax_{k != c} f_k + a_t width[c, k] (TS: times noise[c, k]), from
    c [S], f [S, K] and width, noise [S, K, K]; ties to the lowest index."""
    rows = torch.arange(f.shape[0], device=f.device)
    score = f + beta * width[rows, c] * (noise[rows, c] if noise is not None else 1.0)
    score = score.masked_fill(torch.nn.functional.one_hot(c, f.shape[1]).bool(), -torch.inf)
    return torch.argmax(score, dim=1)


@dataclass(frozen=True)
class SelectionRule:
    """One of the six rules: ``ts`` (Thompson sampling, else UCB), a_t = ``beta``, ``distinct``."""

    ts: bool
    beta: float
    distinct: bool = False

    def __call__(self, f: torch.Tensor, norm: torch.Tensor, noise: torch.Tensor, t: int):
        """(a1, a2) [S] from f [S, K], norm [S, K, K], noise [S, K, K] at round t."""
        raise NotImplementedError


class Asymmetric(SelectionRule):
    """ASYM: a1 greedy (eq. ucb_uns_1st), a2 optimistic against a1."""

    def __call__(self, f, norm, noise, t):
        a1 = torch.argmax(f, dim=1)  # eq. (ucb_uns_1st)
        w = torch.gather(norm, 2, a1.view(-1, 1, 1).expand(-1, f.shape[1], 1)).squeeze(2)  # ||dphi_{k,a1}||
        if self.ts:  # u~_k ~ N(theta^T dphi_{k,a1}, a_t^2 ||dphi_{k,a1}||^2)
            f1 = torch.gather(f, 1, a1.unsqueeze(1))
            score = (f - f1) + self.beta * w * noise[:, 0, :]
        else:  # f_k + a_t ||dphi_{k,a1}||
            score = f + self.beta * w
        if self.distinct:
            score = score.masked_fill(torch.nn.functional.one_hot(a1, f.shape[1]).bool(), -torch.inf)
        return a1, torch.argmax(score, dim=1)


class OptimisticSymmetric(SelectionRule):
    """OSYM: the pair maximizing f_k + f_k' + a_t ||dphi_{k,k'}|| (TS: times a normal)."""

    def __call__(self, f, norm, noise, t):
        pair_sum = f.unsqueeze(2) + f.unsqueeze(1)  # theta^T (phi_k + phi_k')
        score = pair_sum + self.beta * norm * (noise if self.ts else 1.0)
        if self.distinct:
            score = score.masked_fill(~_off_diagonal(f.shape[1], f.device), -torch.inf)
        return _pair_argmax(score)


class CandidateSymmetric(SelectionRule):
    """CSYM: the widest pair of the candidate set C_t (TS: a sampled score, see the module doc)."""

    def __call__(self, f, norm, noise, t):
        beta = self.beta
        cand = candidate_set(f, norm, beta)
        both = cand.unsqueeze(2) & cand.unsqueeze(1)
        if self.ts:
            sq = norm * norm
            score = sq + sq / (2.0 * math.sqrt(math.log(f.shape[1] * t * t))) * noise
        else:
            score = norm
        if not self.distinct:
            return _pair_argmax(torch.where(both, score, -torch.inf))
        off = _off_diagonal(f.shape[1], f.device)
        a1, a2 = _pair_argmax(torch.where(both & off, score, -torch.inf))  # off-diagonal candidate pairs
        lone = cand.sum(dim=1) == 1  # C_t = {c}: c against its optimistic competitor (as ASYM)
        c = torch.argmax(cand.to(torch.int8), dim=1)
        partner = optimistic_rival(c, f, norm, beta, noise if self.ts else None)
        return torch.where(lone, c, a1), torch.where(lone, partner, a2)


RULES = {"asym": Asymmetric, "osym": OptimisticSymmetric, "csym": CandidateSymmetric}


def checked_pair(rule, pair, S: int, K: int, field: str = "model.strategy") -> tuple[torch.Tensor, torch.Tensor]:
    """A rule's (or a self-duel test's) of one's own (a1, a2) as it meets the loop: two integer tensors [S] of arms
    in [0, K), else one line naming ``field`` and the part's class."""
    name = f"{field}: {type(rule).__module__}.{type(rule).__qualname__}"
    if not isinstance(pair, tuple) or len(pair) != 2:
        raise ValueError(f"{name} returned {type(pair).__name__}; expected a tuple (a1, a2) of [S] arm tensors")
    for label, a in zip(("a1", "a2"), pair):
        if not torch.is_tensor(a) or a.dtype.is_floating_point or a.dtype.is_complex or a.dtype == torch.bool:
            what = f"a {a.dtype} tensor" if torch.is_tensor(a) else type(a).__name__
            raise ValueError(f"{name} returned {label} as {what}; expected an integer (int64) tensor [S] = [{S}]")
        if tuple(a.shape) != (S,):
            raise ValueError(f"{name} returned {label} of shape {list(a.shape)}; expected [S] = [{S}] (one arm a seed)")
        bad = (a < 0) | (a >= K)
        if bool(bad.any()):
            seed = int(torch.nonzero(bad)[0, 0])
            raise ValueError(
                f"{name} returned {label} = {int(a[seed])} (seed index {seed}); an arm is 0 .. {K - 1} (data.arms = {K})"
            )
    return pair[0].long(), pair[1].long()


def make_rule(strategy: str, beta: float, distinct: bool = False) -> SelectionRule:
    """The rule named ``strategy``, built once from the config: one of :data:`STRATEGIES`, or a
    :class:`SelectionRule` subclass by import path, built as ``cls(ts=False, beta=beta, distinct=distinct)``."""
    if check_strategy(strategy) not in STRATEGIES:
        return import_class(strategy, SelectionRule, "model.strategy", "")(ts=False, beta=beta, distinct=distinct)
    kind, form = strategy.split("_")
    return RULES[form](ts=kind == "ts", beta=beta, distinct=distinct)


def select(
    strategy: str, f: torch.Tensor, norm: torch.Tensor, beta: float, noise: torch.Tensor, t: int, distinct: bool = False
):
    """``make_rule(strategy, beta, distinct)(f, norm, noise, t)``, for one-off use (tests)."""
    return make_rule(strategy, beta, distinct)(f, norm, noise, t)
