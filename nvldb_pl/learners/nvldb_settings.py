"""NVLDB's settings, typed and frozen (:class:`NVLDBSettings`), and its arguments checked before anything is built
(:func:`resolved_args`): each refusal names its field, a setting that could not take effect is refused rather
than run under a name it did not earn, and the values derived from a default (epsilon, beta, network.init, network.bias,
self_duel.test) are filled in as they are in force (the learner saves those). What each setting means is NVLDB's
docstring (:class:`nvldb_pl.learners.nvldb.NVLDB`, which the CLI's help shows)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields, replace
from typing import Optional

from ..maths import gram, selection, selfduel
from ..maths.checks import check as _check
from ..maths.checks import check_integer, check_linked, check_number
from .network_settings import ComputeOptions, NetworkOptions, NetworkSettings, SamplerOptions
from .settings import Options


def _take(args: dict, names: str) -> list:
    return [args[k] for k in names.split()]


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
    """NVLDB's constructor arguments ``args`` (by name) -> the same with the derived values in force. Raises
    ValueError naming the field."""
    dim, arms, rounds, num_seeds, link = _take(args, "dim arms rounds num_seeds link")
    strategy, variance_aware, oracle_variance, distinct_arms = _take(
        args, "strategy variance_aware oracle_variance distinct_arms"
    )
    feature_dim = args["feature_dim"]
    beta, epsilon, episode, gram_mode = _take(args, "beta epsilon episode gram_mode")
    refit_theta, refit_iterations = _take(args, "refit_theta refit_iterations")
    self_duel = SelfDuelOptions.of(args["self_duel"], "self_duel")
    self_duel_test, escape_rate, self_duel_width, second_arm = (getattr(self_duel, f.name) for f in fields(self_duel))
    check_linked(dim, arms, rounds, num_seeds, link)
    selection.check_strategy(strategy)
    network = NetworkOptions.of(args["network"], "network").resolved(feature_dim)
    _check(gram_mode in gram.GRAM_MODES, "gram_mode", f"{gram_mode!r} is not one of {list(gram.GRAM_MODES)}")
    for name, value in (("episode", episode), ("refit_iterations", refit_iterations)):
        check_integer(value, name, 1)
    _check(  # a run that never updates would be named for a learner it is not
        episode <= rounds,
        "episode",
        f"an update every {episode} rounds never comes within data.rounds={rounds}: the network and theta would "
        f"stay at their initial draw for the whole run; give model.episode <= {rounds}",
    )
    # the default's value, as a checkpoint or save holds it, is still the default
    given_epsilon = epsilon is not None and not math.isclose(epsilon, 1.0 / math.sqrt(dim))
    if epsilon is None:
        epsilon = 1.0 / math.sqrt(dim)  # the order Theorem (Variance-aware UCB methods) asks for
    if beta is None:
        beta = 1.0  # the paper's a_t (appendix "Hyperparameters")
    for name, value in (("beta", beta), ("epsilon", epsilon)):
        check_number(value, name)
    if variance_aware and epsilon >= 0.5:  # sigma_i = sqrt(g(1 - g)) <= 1/2: zeta_i = epsilon for every duel
        said = f"{epsilon:g} >= 0.5, the largest sigma_i can be, so zeta_i = epsilon for every duel and "
        _check(not given_epsilon, "epsilon", said + "variance_aware does nothing (NLDB); give epsilon < 0.5")
        warnings.warn(
            "model.epsilon: "
            + said
            + f"variance_aware does nothing (the default 1/sqrt(d) at d={dim}); give model.epsilon < 0.5 "
            "to weight duels by their variance",
            category=UserWarning,
        )
    _check(not oracle_variance or variance_aware, "oracle_variance", "needs variance_aware=true")
    if self_duel_test is None:  # the default: the deep test where the rule keeps a2 != a1
        self_duel_test = "deep_diag" if distinct_arms else "none"
    own = own_test(self_duel_test)  # a user's class
    _check(
        self_duel_test == "none" or distinct_arms,
        "self_duel.test",
        f"{selfduel.label(self_duel_test)} decides the self-duels itself; it needs distinct_arms=true",
    )
    check_number(escape_rate, "self_duel.escape_rate")
    # a setting that cannot take effect is refused, not run as the run without it under the same name
    _check(
        escape_rate == 1.0 or self_duel_test == "escape" or own,
        "self_duel.escape_rate",
        f"it is the escape test's rate; with self_duel.test {self_duel_test} it would change nothing",
    )
    _check(
        self_duel_width is None or self_duel_test in ("deep_diag", "deep_full") or own,
        "self_duel.width",
        f"it is the deep test's width; with self_duel.test {self_duel_test} it would change nothing",
    )
    _check(
        refit_iterations == 8 or refit_theta,
        "refit_iterations",
        "they are the theta refit's Newton iterations; with refit_theta false they would change nothing",
    )
    _check(
        not given_epsilon or variance_aware,
        "epsilon",
        "it bounds zeta of the variance weights; with variance_aware false (zeta = 1) it would change nothing",
    )
    if self_duel_width is not None:
        check_number(self_duel_width, "self_duel.width")
    _check(second_arm in ("rule", "deep"), "self_duel.second_arm", f"{second_arm!r} is not one of ['rule', 'deep']")
    _check(
        second_arm == "rule" or self_duel_test in ("deep_diag", "deep_full"),
        "self_duel.second_arm",
        "deep takes the deep test's Gram; it needs self_duel.test deep_diag or deep_full",
    )
    # saved with the values in force, also where they came from a default
    groups = dict(  # saved as mappings
        network=network.saved(),
        self_duel=replace(self_duel, test=self_duel_test).saved(),
        sampler=SamplerOptions.of(args["sampler"], "sampler").saved(),
        compute=ComputeOptions.of(args["compute"], "compute").saved(),
    )
    return {**args, **dict(epsilon=epsilon, beta=beta), **groups}
