"""The live API's contexts: checked (:func:`as_contexts`), and on one scale, each feature standardized by a map
fitted once and then frozen (:class:`InputMap`).

A network learner's ReLU units die where every context sits on one side of them: features in [0, 1] (all positive)
or [0, 100] (a wide scale) killed every unit of phi for some persons within a few answers, and the learner then
asked one pair over and over (lab/screens/taste_screen.py). The map x -> (x - mean) / scale, per feature, makes the
features' units and offset irrelevant to the learner. It is fitted on the catalog where one is given, else on the
first call's contexts (two at least), and never changes afterwards: the learner's history and its new contexts are
always read by the same map, and a save keeps it.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch


def as_contexts(contexts, dim: int, min_items: int = 2) -> torch.Tensor:
    """contexts as a float32 [K, d] tensor, checked: K >= min_items (2 for a duel), d = the
    learner's dim, all finite."""
    x = contexts
    if not torch.is_tensor(x):
        try:
            x = np.asarray(x)
            if np.iscomplexobj(x):
                raise ValueError("contexts: complex numbers; the features are real")
            x = x.astype(np.float64)
        except (ValueError, TypeError) as err:  # ragged rows, text
            msg = str(err) if str(err).startswith("contexts:") else f"contexts: not a [K, d] array of numbers ({err})"
            raise ValueError(msg) from None
        x = torch.as_tensor(x)
    elif x.is_complex():
        raise ValueError("contexts: complex numbers; the features are real")
    if x.dim() != 2 or x.shape[0] < min_items or x.shape[1] != dim:
        raise ValueError(
            f"contexts: expected a [K, d] array with K >= {min_items} item{'s' * (min_items > 1)} "
            f"and d = {dim} features, got shape {list(x.shape)}"
        )
    if not bool(torch.isfinite(x).all()):
        bad = sorted({int(r) for r in torch.nonzero(~torch.isfinite(x))[:, 0]})
        raise ValueError(f"contexts: non-finite (NaN or inf) features in item(s) {bad}")
    x32 = x.to(torch.float32)
    if not bool(torch.isfinite(x32).all()):  # finite in float64, beyond float32's range (the learner's)
        bad = sorted({int(r) for r in torch.nonzero(~torch.isfinite(x32))[:, 0]})
        raise ValueError(
            f"contexts: features in item(s) {bad} are beyond float32's range (|x| > 3.4e38), in which the learner "
            f"computes; rescale them (nothing changed)"
        )
    return x32


class InputMap:
    """x [K, d] -> (x - mean) / scale, with ``mean`` [d] and ``scale`` [d] (float64) of the contexts it was fitted on:
    a feature's standard deviation over them, or, for a feature alike on all of them, its absolute mean (1 where
    that is 0), so that its values keep their sign and size."""

    def __init__(self, mean: torch.Tensor, scale: torch.Tensor):
        self.mean = torch.as_tensor(mean, dtype=torch.float64).clone()
        self.scale = torch.as_tensor(scale, dtype=torch.float64).clone()
        if self.mean.dim() != 1 or self.scale.shape != self.mean.shape:
            raise ValueError(
                f"input_map: mean [d] and scale [d], got {list(self.mean.shape)} and {list(self.scale.shape)}"
            )
        if not (
            bool(torch.isfinite(self.mean).all())
            and bool((self.scale > 0).all())
            and bool(torch.isfinite(self.scale).all())
        ):
            raise ValueError("input_map: a finite mean and a positive, finite scale for every feature")

    @classmethod
    def fitted(cls, x: torch.Tensor) -> "InputMap":
        """The map of contexts x [K, d] (K >= 2)."""
        x = torch.as_tensor(x, dtype=torch.float64)
        if x.dim() != 2 or x.shape[0] < 2:
            raise ValueError(f"input_map: fitted on two contexts at least, [K, d]; got shape {list(x.shape)}")
        mean, sd = x.mean(0), x.std(0, unbiased=False)
        alike = sd <= 1e-12 * x.abs().amax(0).clamp(min=1.0)
        fallback = torch.where(mean.abs() > 0, mean.abs(), torch.ones_like(mean))
        return cls(mean, torch.where(alike, fallback, sd))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., d] mapped, in x's dtype."""
        return ((x.to(torch.float64) - self.mean) / self.scale).to(x.dtype)

    def state(self) -> dict:
        return {"mean": self.mean.clone(), "scale": self.scale.clone()}

    @classmethod
    def from_state(cls, state: Optional[dict]) -> Optional["InputMap"]:
        return None if state is None else cls(state["mean"], state["scale"])
