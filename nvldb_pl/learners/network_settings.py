"""The network's settings, checked and typed: :func:`resolve_network` refuses a bad width, depth,
parametrization, init or activation (naming the field) and fills in the defaults derived from them;
:class:`NetworkSettings` is the frozen view of a network learner's arguments that NVLDB and NDB read
(NVLDB extends it: :mod:`nvldb_pl.learners.nvldb_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from ..maths.checks import check as _check
from ..maths.checks import check_integer
from ..maths.network import ACTIVATIONS, INITS_OF, PARAMETRIZATIONS
from .settings import LinkedSettings, Options

BACKWARDS = ("manual", "autograd")
SAMPLE_WEIGHTINGS = ("uniform", "recency")


def resolve_network(
    dim: int,
    width: int,
    depth: int,
    parametrization: str,
    bias: Optional[bool],
    init: Optional[str],
    feature_dim: Optional[int],
    activation: str = "relu",
) -> tuple[Optional[bool], str]:
    """Check the network's settings, naming the field; returns (bias, init) with their defaults filled in."""
    _check(
        activation in ACTIVATIONS,
        "activation",
        f"{activation!r} is not one of {list(ACTIVATIONS)}",
    )
    _check(
        parametrization in PARAMETRIZATIONS,
        "parametrization",
        f"{parametrization!r} is not one of {list(PARAMETRIZATIONS)}",
    )
    if init is None:
        init = INITS_OF[parametrization][0]
    _check(
        init in INITS_OF[parametrization],
        "init",
        f"{init!r} does not go with parametrization={parametrization!r}; choose one of "
        f"{list(INITS_OF[parametrization])}",
    )
    if bias is None:
        bias = parametrization == "standard"
    _check(not bias or parametrization == "standard", "bias", "eq. (nn) (parametrization=ntk) has no biases")
    for name, value in (("width", width), ("feature_dim", 1 if feature_dim is None else feature_dim)):
        check_integer(value, name, 1)
    check_integer(depth, "depth", 2)  # eq. (nn) needs at least W^1 and W^L
    _check(init != "paper" or width % 2 == 0, "width", f"init='paper' needs an even width, got {width}")
    return bias, init


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
            under ``16-mixed`` (a GradScaler), or with ``model.network``, autograd whatever this says.
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

    width: int
    depth: int
    parametrization: str
    bias: Optional[bool]
    feature_dim: Optional[int]
    init: str
    lr: float
    lam: float
    grad_steps: int
    epsilon: float = 1.0
    sampler: SamplerOptions = SamplerOptions()
    compute: ComputeOptions = ComputeOptions()
    network: Optional[Union[str, dict]] = None
    activation: str = "relu"
