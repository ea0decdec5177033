"""The network learner's settings, checked and typed: :class:`NetworkOptions` (``model.network``: the MLP's shape
or a module of one's own; a bad width, depth, parametrization, init or activation refused naming the field, the
defaults derived from them filled in), :class:`SamplerOptions`, :class:`ComputeOptions`, and :class:`NetworkSettings`,
the frozen view of a network learner's arguments that NVLDB and NDB read (NVLDB extends it:
:mod:`nvldb_pl.learners.nvldb_settings`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Union

from ..maths.checks import check as _check
from ..maths.checks import check_integer
from ..maths.network import ACTIVATIONS, INITS_OF, PARAMETRIZATIONS
from .history import HISTORY_PASSES
from .settings import LinkedSettings, Options, check_fields

BACKWARDS = ("manual", "autograd")
SAMPLE_WEIGHTINGS = ("uniform", "recency")


@dataclass(frozen=True)
class NetworkOptions(Options):
    """``model.network``: phi(x; W) of eq. (nn), the built-in MLP's shape (in YAML ``network: {width: 64}``, on the
    command line ``--model.network.width 64``), or a network of one's own (``network: {module: my_net.Net}``).

    Args:
        width, depth: m and L of eq. (nn).
        parametrization: ``ntk`` (eq. nn literally: sqrt(m) output factor, no biases) or ``standard``
            (``nn.Linear`` layers: no sqrt(m), optional biases); see :mod:`nvldb_pl.maths.network`.
        activation: every layer's nonlinearity, ``relu`` (eq. nn), ``gelu`` or ``silu`` (smooth: no unit of phi
            dies).
        bias: biases in every layer (``standard`` only); ``None`` = true for ``standard``, false for ``ntk``.
        init: ``kaiming`` or ``paper`` (eq. init) for ``ntk``; ``kaiming``, ``torch`` or ``normal`` for
            ``standard``; ``None`` = kaiming.
        module: phi of one's own: the import path of a one-seed ``torch.nn.Module`` mapping [N, d] to [N, p] (or
            ``{class_path, init_args}``), stacked over seeds by :mod:`nvldb_pl.maths.user_network`; then the fields
            above are not used, and it trains by autograd. ``None``: the built-in MLP.
    """

    width: int = 32
    depth: int = 3
    parametrization: str = "standard"
    activation: str = "relu"
    bias: Optional[bool] = None
    init: Optional[str] = None
    module: Optional[Union[str, dict]] = None

    def resolved(self, feature_dim: Optional[int] = None) -> "NetworkOptions":
        """Checked, naming the field (``network.width``); with the defaults derived from the parametrization (bias,
        init) filled in."""
        _check(
            self.activation in ACTIVATIONS,
            "network.activation",
            f"{self.activation!r} is not one of {list(ACTIVATIONS)}",
        )
        par = self.parametrization
        _check(par in PARAMETRIZATIONS, "network.parametrization", f"{par!r} is not one of {list(PARAMETRIZATIONS)}")
        init = INITS_OF[par][0] if self.init is None else self.init
        _check(
            init in INITS_OF[par],
            "network.init",
            f"{init!r} does not go with network.parametrization={par!r}; choose one of {list(INITS_OF[par])}",
        )
        bias = par == "standard" if self.bias is None else self.bias
        _check(not bias or par == "standard", "network.bias", "eq. (nn) (parametrization=ntk) has no biases")
        check_integer(self.width, "network.width", 1)
        check_integer(1 if feature_dim is None else feature_dim, "feature_dim", 1)
        check_integer(self.depth, "network.depth", 2)  # eq. (nn) needs at least W^1 and W^L
        _check(
            init != "paper" or self.width % 2 == 0,
            "network.width",
            f"init='paper' needs an even width, got {self.width}",
        )
        return replace(self, bias=bias, init=init)


@dataclass(frozen=True)
class SamplerOptions(Options):
    """``model.sampler``: the rows each Adam step trains on.

    Args:
        size: B; ``None`` (the paper): every Adam step and the theta refit use the whole history. An integer: once
            t > B, each Adam step uses B history rows drawn afresh (with replacement), the theta refit the rows of
            the first step's draw, the loss scaled by t / B (an unbiased estimate of eq. total_loss), so a round's
            training cost stops growing with t.
        weighting: ``uniform`` over rows 1..t, or ``recency``: row i with probability proportional to i (the newest
            row t times as likely as the oldest).
    """

    size: Optional[int] = None
    weighting: str = "uniform"


@dataclass(frozen=True)
class ComputeOptions(Options):
    """``model.compute``: how the Adam steps are computed, not what (the same gradient up to float rounding).

    Args:
        backward: ``manual`` (the hand-written gradient of :mod:`nvldb_pl.maths.backward`, faster) or ``autograd``;
            under ``16-mixed`` (a GradScaler), or with ``model.network.module``, autograd whatever this says.
        history_pass: how each Adam step walks the whole history: ``auto`` (``graphed`` on a CUDA device unless
            sampler.size is set, else ``chunked``), ``chunked`` (blocks of 256 rounds, fastest on CPU), ``full``
            (one block of the played rounds: fewer kernel launches), ``masked`` (all T preallocated rounds, unplayed
            ones weighted 0: static shapes) or ``graphed`` (masked over t rounded up to 256 rounds; on CUDA the n
            steps and the theta refit are one CUDA graph per 256 rounds, :mod:`nvldb_pl.machinery.graphs`).
    """

    backward: str = "manual"
    history_pass: str = "auto"


@dataclass(frozen=True)
class NetworkSettings(LinkedSettings):
    """The network learner's settings, typed: the subclass's arguments with their values in force (its saved hparams
    keep them as given). A learner without one of the optional ones (NDB: no epsilon, sampler, compute, ...) has its
    default here."""

    feature_dim: Optional[int]
    lr: float
    lam: float
    grad_steps: int
    epsilon: float = 1.0
    sampler: SamplerOptions = SamplerOptions()
    compute: ComputeOptions = ComputeOptions()
    network: NetworkOptions = NetworkOptions()

    def checked(self):
        """The network learner's constraints (:func:`~nvldb_pl.learners.settings.check_fields`), then self."""
        super().checked()
        walk, size, weighting = self.compute.history_pass, self.sampler.size, self.sampler.weighting
        check_fields(
            self,
            integers={"grad_steps": 0, "sampler.size": 1},
            numbers={"lr": True, "lam": True},
            choices={
                "compute.backward": BACKWARDS,
                "compute.history_pass": HISTORY_PASSES,
                "sampler.weighting": SAMPLE_WEIGHTINGS,
            },
            rules=lambda: (
                (
                    walk != "graphed" or size is None,
                    "compute.history_pass",
                    "graphed walks the whole history (a graph's shapes are fixed); with model.sampler.size use chunked",
                ),
                (
                    weighting == "uniform" or size is not None,
                    "sampler.weighting",
                    f"{weighting} weights the rows of a bounded training set; without model.sampler.size "
                    f"every Adam step uses the whole history and it would change nothing",
                ),
                (
                    self.network.module is None or walk in ("auto", "chunked", "full", "masked"),
                    "compute.history_pass",
                    f"{walk} captures the built-in MLP's update; with model.network.module use auto or chunked",
                ),
            ),
        )
        return self
