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

Each test is an object built once from the config (:func:`make_test`), as the rules are: a
:class:`SelfDuelTest` takes the rule's pair with the learner's estimate and returns the pair played, and owns
what it learns from (the deep tests: their Gram Z, a :class:`nvldb_pl.maths.gram.GradientGram` shared with NDB).
A test of one's own subclasses :class:`SelfDuelTest` and is named by its import path in ``model.self_duel.test``
(``docs/extending.md``).

Shapes: f [S, K], D [S, K, K] (D[s, k, k'] = ||g_k - g_k'||), pairs (a1, a2) two [S] int64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import selection
from .checks import import_class
from .gram import GradientGram, gradient_pair_norms, sherman_morrison_  # noqa: F401  (their old home)


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


@dataclass(frozen=True)
class SelfDuelSettings:
    """What a self-duel test is built from (the learner's config, resolved).

    num_seeds: S; num_params: p, the network's parameters per seed (the length of g); lam: Z_0 = lambda I;
    beta: the rule's a_t; width: the deep test's width coefficient (``model.self_duel.width``, else beta);
    escape_rate: c of the escape test; second_arm: ``rule`` or ``deep``; strategy: the rule's name (the escape
    test builds the same rule with self-duels allowed)."""

    num_seeds: int
    num_params: int
    lam: float
    beta: float
    width: float
    escape_rate: float = 1.0
    second_arm: str = "rule"
    strategy: str = "ucb_asym"


class SelfDuelTest(torch.nn.Module):
    """When the greedy arm's self-duel replaces the rule's distinct pair, for S seeds; built as ``cls(settings)``
    (:class:`SelfDuelSettings`). Its buffers (if any) carry the seed dimension first and are saved with the learner.

    ``uses_gradients``: the test needs g [S, K, p] = df(x_k)/d(all parameters) of the round's contexts (then the
    learner computes it, and hands each answered duel's z = g_a1 - g_a2 to :meth:`remember`)."""

    uses_gradients = False

    def __init__(self, settings: SelfDuelSettings):
        super().__init__()
        self.settings = settings

    def forward(
        self,
        pair: tuple[torch.Tensor, torch.Tensor],
        f: torch.Tensor,
        norm: torch.Tensor,
        noise: torch.Tensor,
        t: int,
        g: torch.Tensor | None = None,
        allowed: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The pair played at round t: ``pair`` (the rule's, a2 != a1) or a replacement, from f [S, K], the rule's
        norms [S, K, K], the round's normals [S, K, K] and (``uses_gradients``) g [S, K, p]. ``allowed`` False (live
        use: nobody is asked "A or A?"): no self-duel may be returned."""
        return pair

    def remember(self, z: torch.Tensor) -> None:
        """A duel was answered (or asked): z [S, p] its gradient difference at selection time."""


class NoSelfDuel(SelfDuelTest):
    """``none``: the rule's distinct pair, always."""


class DeepTest(SelfDuelTest):
    """``deep_diag`` / ``deep_full``: :func:`deep_test` under Z (NDB's Gram, diagonal or full), and with
    ``second_arm`` ``deep`` :func:`deep_second_arm` for the distinct duels."""

    uses_gradients = True
    form = "diag"

    def __init__(self, settings: SelfDuelSettings):
        super().__init__(settings)
        self.gram = GradientGram(settings.num_seeds, settings.num_params, settings.lam, self.form)

    def forward(self, pair, f, norm, noise, t, g=None, allowed=True):
        a1, a2 = pair
        deep_second = self.settings.second_arm == "deep"
        if not (allowed or deep_second):
            return a1, a2
        D = self.gram.pair_norms(g)
        if deep_second:
            a2 = deep_second_arm(a1, f, D, self.settings.beta)
        if allowed:
            a1, a2 = deep_test((a1, a2), f, D, self.settings.width)
        return a1, a2

    def remember(self, z: torch.Tensor) -> None:
        self.gram.add_(z)


class DeepFullTest(DeepTest):
    """``deep_full``: the deep test with Z kept whole (Z^-1 by Sherman-Morrison)."""

    form = "full"


class EscapeTest(SelfDuelTest):
    """``escape``: the rule with self-duels allowed; :func:`escape` replaces a self-duel by the distinct pair with
    probability min(1, escape_rate / sqrt(t)) (the uniform from the round's last normal, noise[:, -1, 0])."""

    def __init__(self, settings: SelfDuelSettings):
        super().__init__(settings)
        self.allowed_rule = selection.make_rule(settings.strategy, settings.beta, False)

    def forward(self, pair, f, norm, noise, t, g=None, allowed=True):
        if not allowed:
            return pair
        uniform = torch.special.ndtr(noise[:, -1, 0])
        return escape(self.allowed_rule(f, norm, noise, t), pair, uniform, t, self.settings.escape_rate)


SELF_DUEL_TESTS = {"none": NoSelfDuel, "deep_diag": DeepTest, "deep_full": DeepFullTest, "escape": EscapeTest}


def resolve_test(name: str, field: str = "model.self_duel.test") -> type:
    """The test named ``name``: one of :data:`SELF_DUEL_TESTS`, or the import path of a :class:`SelfDuelTest`
    subclass; else one line naming ``field``."""
    if name in SELF_DUEL_TESTS:
        return SELF_DUEL_TESTS[name]
    if not isinstance(name, str) or "." not in name:
        raise ValueError(
            f"{field}={name!r} is not a known test; choose one of {list(SELF_DUEL_TESTS)} or give the import path "
            f"of a nvldb_pl.maths.selfduel.SelfDuelTest subclass"
        )
    return import_class(name, SelfDuelTest, field, "a nvldb_pl.maths.selfduel.SelfDuelTest subclass")


def make_test(name: str, settings: SelfDuelSettings) -> SelfDuelTest:
    """The test ``name`` (:func:`resolve_test`), built once from ``settings``."""
    return resolve_test(name)(settings)


def label(name: str) -> str:
    """A test's part of a name: its key, or the class name of a test of one's own."""
    return name if name in SELF_DUEL_TESTS else name.rpartition(".")[2]
