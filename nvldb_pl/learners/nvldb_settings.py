"""NVLDB's settings, typed and frozen (:class:`NVLDBSettings`), and its arguments checked before anything is built
(:func:`resolved_args`): each refusal names its field, a setting that could not take effect is refused rather
than run under a name it did not earn, and the values derived from a default (epsilon, beta, network.init, network.bias,
self_duel.test) are filled in as they are in force (the learner saves those). What each setting means is NVLDB's
arguments, :data:`ARGUMENTS` (the docstring of :class:`nvldb_pl.learners.nvldb.NVLDB`, which the CLI's help
shows)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import Optional

from ..maths import gram, selection, selfduel
from ..maths.checks import check_linked
from .network_settings import ComputeOptions, NetworkOptions, NetworkSettings, SamplerOptions
from .settings import Options, check_fields


ARGUMENTS = """\
The paper symbol in brackets; a group given as a mapping is documented on its class; the zeta and Gram
details: docs/paper.md.

Args:
    dim, arms, rounds, num_seeds, link: linked from the data module (d, K, T, S, g).
    strategy: the rule, one of :data:`nvldb_pl.maths.selection.STRATEGIES`, or the import path of a
        :class:`nvldb_pl.maths.selection.SelectionRule` subclass.
    variance_aware: zeta_i = max(sigma_hat_i, epsilon) if true (NVLDB), 1 if false (NLDB).
    oracle_variance: the true sigma_i instead of sigma_hat_i (needs variance_aware).
    network: phi(x; W), :class:`~nvldb_pl.learners.network_settings.NetworkOptions`: the MLP of eq. (nn) (width
        m, depth L, parametrization, activation, bias, init) or a module of one's own.
    feature_dim: the dimension p of phi, theta and V; ``None`` = d, eq. (nn).
    lr: Adam's step size [eta].
    lam: the regularization [lambda] of eq. (total_loss) and V_0 = lambda I.
    beta: the confidence width coefficient [a_t]; ``None`` = 1, the paper's (a baseline swapped in keeps its own).
    epsilon: the lower bound on zeta [epsilon] of eq. (wi); ``None`` = 1/sqrt(d), the order its theorem asks.
    grad_steps: Adam steps per update [n].
    episode: an update every H rounds [H].
    train_network: line 9, the n Adam steps.
    refit_theta: line 10, theta refit with W fixed.
    refit_iterations: the refit's Newton iterations.
    gram_mode: ``recompute`` or ``incremental`` (the module's docstring).
    distinct_arms: the rule never duels an arm with itself, as NDB's public code (the equations allow it).
    self_duel: when the greedy arm's self-duel replaces the rule's pair,
        :class:`~nvldb_pl.learners.nvldb_settings.SelfDuelOptions`; default the deep test where distinct_arms.
    sampler: the rows each Adam step trains on, :class:`~nvldb_pl.learners.network_settings.SamplerOptions`.
    compute: how the steps are computed, not what, :class:`~nvldb_pl.learners.network_settings.ComputeOptions`.
    w_reg: mu >= 0 of mu/2 sum_l ||W^l - W^l_0||^2 in the loss, a prior toward the initial weights (not in eq.
        total_loss: 0 is the paper, configs/literal/); 0.1 by measurement (lab/results/short/prior/README.md).
"""  # NVLDB's docstring's arguments (nvldb_pl.learners.nvldb.NVLDB.__doc__), what the CLI's help shows


@dataclass(frozen=True)
class SelfDuelOptions(Options):
    """``model.self_duel``: when the greedy arm's self-duel replaces the rule's distinct pair
    (:mod:`nvldb_pl.maths.selfduel`), in YAML a mapping (``self_duel: {test: escape, escape_rate: 2}``), on the
    command line ``--model.self_duel.test escape``; the fields left out keep these defaults.

    Args:
        test: ``deep_diag`` (where c = argmax f clears every other arm under the whole network's gradient width,
            NDB's diagonal Gram), ``deep_full`` (its full Gram), ``escape`` (the rule with self-duels allowed, a
            self-duel replaced by the distinct pair with probability min(1, escape_rate / sqrt(t))), ``none``
            (a2 != a1 always), or the import path of a :class:`nvldb_pl.maths.selfduel.SelfDuelTest` subclass
            (built from :class:`~nvldb_pl.maths.selfduel.SelfDuelSettings`). ``None``: ``deep_diag`` where
            distinct_arms, else ``none``.
        escape_rate: c of ``escape``.
        width: the deep test's width coefficient (f_c - f_k >= this times ||g_c - g_k||_{Z^-1}); ``None`` = beta.
        second_arm: ``rule`` (the rule's own a2) or ``deep`` (with a deep test: a2 = argmax_{k != a1}
            f_k + a_t ||g_k - g_a1||_{Z^-1}, :func:`nvldb_pl.maths.selfduel.deep_second_arm`, a1 the rule's).
    """

    test: Optional[str] = None
    escape_rate: float = 1.0
    width: Optional[float] = None
    second_arm: str = "rule"


@dataclass(frozen=True)
class NVLDBSettings(NetworkSettings):
    """NVLDB's settings with their values in force (the network's, :class:`NetworkSettings`, then its own): what
    the learner reads; its saved hparams hold the same values, by name, in its arguments' order."""

    strategy: str = "ucb_asym"
    variance_aware: bool = True
    oracle_variance: bool = False
    beta: float = 1.0
    episode: int = 1
    train_network: bool = True
    refit_theta: bool = True
    refit_iterations: int = 8
    gram_mode: str = "recompute"
    w_reg: float = 0.1
    distinct_arms: bool = True
    self_duel: SelfDuelOptions = SelfDuelOptions(test="deep_diag")

    def checked(self):
        """NVLDB's constraints (:func:`~nvldb_pl.learners.settings.check_fields`), then the network learner's;
        self. A setting that could not take effect is refused rather than run under a name it did not earn."""
        sd, test = self.self_duel, self.self_duel.test
        own, deep = own_test(test), test in ("deep_diag", "deep_full")
        check_fields(
            self,
            integers={"episode": 1, "refit_iterations": 1},
            numbers={
                "beta": True,
                "epsilon": True,
                "w_reg": False,
                "self_duel.escape_rate": True,
                "self_duel.width": True,
            },
            choices={"gram_mode": gram.GRAM_MODES, "self_duel.second_arm": ("rule", "deep")},
            rules=lambda: (
                (  # a run that never updates would be named for a learner it is not
                    self.episode <= self.rounds,
                    "episode",
                    f"an update every {self.episode} rounds never comes within data.rounds={self.rounds}: the "
                    f"network and theta would stay at their initial draw for the whole run; give model.episode <= "
                    f"{self.rounds}",
                ),
                (
                    not (self.variance_aware and self.epsilon >= 0.5 and self.epsilon_given),
                    "epsilon",
                    f"{self.epsilon:g} >= 0.5, the largest sigma_i can be, so zeta_i = epsilon for every duel and "
                    "variance_aware does nothing (NLDB); give epsilon < 0.5",
                ),
                (not self.oracle_variance or self.variance_aware, "oracle_variance", "needs variance_aware=true"),
                (
                    test == "none" or self.distinct_arms,
                    "self_duel.test",
                    f"{selfduel.label(test)} decides the self-duels itself; it needs distinct_arms=true",
                ),
                (
                    sd.escape_rate == 1.0 or test == "escape" or own,
                    "self_duel.escape_rate",
                    f"it is the escape test's rate; with self_duel.test {test} it would change nothing",
                ),
                (
                    sd.width is None or deep or own,
                    "self_duel.width",
                    f"it is the deep test's width; with self_duel.test {test} it would change nothing",
                ),
                (
                    self.refit_iterations == 8 or self.refit_theta,
                    "refit_iterations",
                    "they are the theta refit's Newton iterations; with refit_theta false they would change nothing",
                ),
                (
                    not self.epsilon_given or self.variance_aware,
                    "epsilon",
                    "it bounds zeta of the variance weights; with variance_aware false (zeta = 1) it would change "
                    "nothing",
                ),
                (
                    sd.second_arm == "rule" or deep,
                    "self_duel.second_arm",
                    "deep takes the deep test's Gram; it needs self_duel.test deep_diag or deep_full",
                ),
            ),
        )
        super().checked()
        if self.variance_aware and self.epsilon >= 0.5:  # sigma_i = sqrt(g(1 - g)) <= 1/2: zeta_i = epsilon always
            warnings.warn(
                f"model.epsilon: {self.epsilon:g} >= 0.5, the largest sigma_i can be, so zeta_i = epsilon for every "
                f"duel and variance_aware does nothing (the default 1/sqrt(d) at d={self.dim}); give model.epsilon "
                "< 0.5 to weight duels by their variance",
                category=UserWarning,
            )
        return self

    @property
    def epsilon_given(self) -> bool:
        """epsilon is not its default 1/sqrt(d) (the default's value, as a save holds it, is still the default)."""
        return not math.isclose(self.epsilon, 1.0 / math.sqrt(self.dim))

    @property
    def variance_mode(self) -> str:
        """zeta of eq. (wi): ``estimated`` (NVLDB), ``oracle`` (the true sigma) or ``none`` (zeta = 1, NLDB)."""
        return variance_mode(self.variance_aware, self.oracle_variance)

    @property
    def own_test(self) -> bool:
        """``self_duel.test`` is a class of one's own (checked where it meets the loop, as a rule is)."""
        return own_test(self.self_duel.test)

    @property
    def p(self) -> int:
        """The dimension of phi, theta and V: feature_dim, or d (eq. nn)."""
        return self.dim if self.feature_dim is None else self.feature_dim


def self_duel_settings(s: NVLDBSettings, num_params: int) -> selfduel.SelfDuelSettings:
    """What the self-duel test is built from: the seeds, the network's parameter count p (Z is p x p), and the
    settings of ``model.self_duel`` in force (its width ``None``: beta)."""
    sd = s.self_duel
    width = s.beta if sd.width is None else sd.width
    return selfduel.SelfDuelSettings(
        num_seeds=s.num_seeds,
        num_params=num_params,
        lam=s.lam,
        beta=s.beta,
        width=width,
        escape_rate=sd.escape_rate,
        second_arm=sd.second_arm,
        strategy=s.strategy,
    )


def method_name(learner, s: NVLDBSettings) -> str:
    """The name a run is reported under: ``NVLDB-UCB-ASYM`` (``NLDB-`` without the variance weighting); a subclass by
    its class name; a network of one's own in brackets, ``-oracle`` with the true variance (never the estimate's
    name)."""
    cls = type(learner)
    name = cls.__name__
    if (cls.__module__, cls.__qualname__) == ("nvldb_pl.learners.nvldb", "NVLDB"):
        prefix = "NVLDB" if s.variance_aware else "NLDB"
    else:
        prefix = name + ("" if s.variance_aware else "-NLDB")
    out = prefix + "-" + selection.rule_label(s.strategy)
    if learner.custom_network:
        out += f"[{learner.net.path.rpartition('.')[2]}]"
    return out + ("-oracle" if s.oracle_variance else "")


def variance_mode(variance_aware: bool, oracle_variance: bool) -> str:
    """zeta of eq. (wi) for these settings: ``estimated``, ``oracle`` or ``none``."""
    return ("oracle" if oracle_variance else "estimated") if variance_aware else "none"


def own_test(self_duel_test: str) -> bool:
    """``self_duel.test`` names a class of one's own, not one of :data:`nvldb_pl.maths.selfduel.SELF_DUEL_TESTS`."""
    return selfduel.resolve_test(self_duel_test) not in selfduel.SELF_DUEL_TESTS.values()


def resolved_args(args: dict) -> dict:
    """NVLDB's constructor arguments ``args`` (by name) -> the same with the derived values in force (checked by
    :meth:`NVLDBSettings.checked` as the learner reads them; what a derivation needs, first). Raises ValueError naming
    the field."""
    dim, distinct_arms, epsilon, beta = (args[k] for k in ("dim", "distinct_arms", "epsilon", "beta"))
    check_linked(*(args[k] for k in ("dim", "arms", "rounds", "num_seeds", "link")))
    selection.check_strategy(args["strategy"])
    network = NetworkOptions.of(args["network"], "network").resolved(args["feature_dim"])
    self_duel = SelfDuelOptions.of(args["self_duel"], "self_duel")
    if epsilon is None:
        epsilon = 1.0 / math.sqrt(dim)  # the order Theorem (Variance-aware UCB methods) asks for
    if beta is None:
        beta = 1.0  # the paper's a_t (appendix "Hyperparameters")
    if self_duel.test is None:  # the default: the deep test where the rule keeps a2 != a1
        self_duel = replace(self_duel, test="deep_diag" if distinct_arms else "none")
    # saved with the values in force, also where they came from a default; groups as mappings
    groups = dict(
        network=network.saved(),
        self_duel=self_duel.saved(),
        sampler=SamplerOptions.of(args["sampler"], "sampler").saved(),
        compute=ComputeOptions.of(args["compute"], "compute").saved(),
    )
    return {**args, **dict(epsilon=epsilon, beta=beta), **groups}
