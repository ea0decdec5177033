"""A round's n Adam steps and theta refit as one CUDA graph (``--model.compute.history_pass graphed``).

On a GPU the paper's loop is bound by kernel launches, not arithmetic: each Adam step walks the
history with a few dozen small kernels, twenty steps a round. A CUDA graph records those launches
once and replays them as one. What a graph needs, the graphed pass provides: static shapes (the
history padded to the next multiple of ``BUCKET_ROUNDS`` rounds, the unplayed rows weighted 0 by a
mask computed on the device from the ``rounds_done`` buffer), tensors updated in place (history,
parameters, Adam's state, with ``capturable=True`` so its step count lives on the device), and no
host synchronisation (``tests/loop/test_no_sync.py``).

:class:`CapturedSteps` keeps one graph, for the current bucket: at a bucket's first round the steps
run eagerly on a side stream (the warm-up CUDA graphs ask for), then are captured; the bucket's
later rounds replay the capture. Lightning's optimizer hooks and ``trainer.global_step`` see the
captured steps once, not once per replay (the package counts rounds, not steps).
"""

from __future__ import annotations

from typing import Callable, Hashable, Optional

import torch

from ..learners import history


class CaptureFailed(ValueError):
    """The update's CUDA graph could not be captured: the run stops with the setting that avoids it named
    (a ValueError, so the CLI says it in one line); the cause is chained."""


def bucket(t: int, T: int) -> int:
    """:func:`nvldb_pl.learners.history.bucket` (the graphed pass's rows at round t of T)."""
    return history.bucket(t, T)


def available(device: torch.device) -> bool:
    """:func:`nvldb_pl.learners.history.graphs_available`."""
    return history.graphs_available(device)


class CapturedSteps:
    """``fn()`` run through a CUDA graph per ``key``: captured at a key's first call, replayed while
    the key stays. ``fn`` returns a tuple of tensors (or None); what a replay returns is the graph's
    own output tensors, valid until the next call (use them, or clone them, before).

    A replay repeats the captured kernels on the tensors' current values; every Python value ``fn``
    read (a round number, a shape) keeps what it was at the capture. ``tests/machinery/test_long_horizon.py``
    runs a loop whose replays re-run the capture-time ``fn`` on a CPU, which catches such a value."""

    # torch.cuda.graph's capture_error_mode: "global" (torch's default) makes any thread's unsafe CUDA call during
    # the capture invalidate it; lab/diagnostics/gpu_capture_probe.py tries "thread_local" and "relaxed" too
    error_mode = "global"

    def __init__(self):
        self.key: Optional[Hashable] = None
        self.graph = None
        self.out: Optional[tuple] = None
        self.captures = 0

    def __call__(self, key: Hashable, fn: Callable[[], tuple]) -> tuple:
        if key == self.key:
            return self._replay()
        self.graph, self.out = None, None  # the previous bucket's graph and its memory pool go
        out = self._warm_up(fn)  # this round, eagerly
        try:
            self._capture(fn)  # records the launches; runs nothing
        except RuntimeError as err:  # torch's CUDA errors (AcceleratorError among them) are RuntimeErrors
            self.graph, self.out = None, None
            cause = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise CaptureFailed(
                f"model.compute.history_pass: the CUDA graph of the update could not be captured (history of {key} rows: "
                f"{cause}); start the run again with --model.compute.history_pass chunked, the same update without graphs (a "
                f"checkpoint goes on only with the pass it was made with); lab/diagnostics/gpu_capture_probe.py says "
                f"which operation broke the capture"
            ) from err
        self.key = key
        self.captures += 1
        return out

    def _warm_up(self, fn: Callable[[], tuple]) -> tuple:
        """fn() on a side stream, as CUDA graphs ask before a capture (lazy state, library handles)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = fn()
        torch.cuda.current_stream().wait_stream(side)
        return out

    def _capture(self, fn: Callable[[], tuple]) -> None:
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, capture_error_mode=self.error_mode):
            self.out = fn()

    def _replay(self) -> tuple:
        self.graph.replay()
        return self.out
