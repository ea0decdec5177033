"""How a learner's Adam steps walk its history of duels: the pass (``model.compute.history_pass``), its blocks of rows, a
bounded sample of rows, the graphed pass's buckets, and Adam's state as a captured step needs it. What the steps
compute is the learner's (:meth:`nvldb_pl.learners.neural.NeuralLearner._adam_steps`), the same under every pass; the
CUDA graph that replays them is the machinery's (:mod:`nvldb_pl.machinery.graphs`), handed to the learner with its
:class:`nvldb_pl.learners.base.Execution` (``steps``; outside the loop the steps run as they are, :class:`EagerSteps`)."""

from __future__ import annotations

from typing import Callable, Iterator, Optional

import numpy as np
import torch

from ..environments.seeding import TAG_SAMPLE, rng_for

TRAIN_CHUNK_ROUNDS = 256  # history rows per gradient-accumulation block (speed; see NeuralLearner._adam_steps)
HISTORY_PASSES = ("auto", "chunked", "full", "masked", "graphed")
BUCKET_ROUNDS = 256  # the graphed pass: the history rows a graph covers grow in steps of this many rounds


def bucket(t: int, T: int) -> int:
    """The rows the graphed pass walks at round t of T: t rounded up to a multiple of BUCKET_ROUNDS."""
    return min(T, -(-t // BUCKET_ROUNDS) * BUCKET_ROUNDS)


def graphs_available(device: torch.device) -> bool:
    """Whether ``device`` can capture CUDA graphs (a CUDA device)."""
    return device.type == "cuda"


class EagerSteps:
    """The update's steps run as they are, every round (no CUDA graph): an execution's ``steps`` unless the loop
    hands in the machinery's :class:`nvldb_pl.machinery.graphs.CapturedSteps`; the same calls and results."""

    captures = 0

    def __call__(self, key, fn: Callable[[], tuple]) -> tuple:
        return fn()


def resolve_history_pass(mode: str, device: torch.device, sample_size: Optional[int], scaled: bool = False) -> str:
    """``auto``: ``graphed`` on a CUDA device where the whole history is walked and no GradScaler
    (16-mixed) reads its inf checks on the host (the faster pass there: docs/performance.md), else ``chunked``
    (fastest on a CPU); any other value as given."""
    if mode != "auto":
        return mode
    graphed = graphs_available(device) and sample_size is None and not scaled
    return "graphed" if graphed else "chunked"


def settle_adam(opt: torch.optim.Optimizer, capturable: bool) -> None:
    """After a checkpoint's optimizer state was restored: Adam's ``capturable`` (and where its step counts live)
    as this run needs them, whatever the checkpoint's run used (graphed on CUDA or not)."""
    for group in opt.param_groups:  # as NeuralLearner.configure_optimizers makes them
        group.update(capturable=capturable, fused=capturable, foreach=not capturable)
    for p, state in opt.state.items():
        if "step" in state:  # capturable: on the parameter's device (as torch keeps it); else on the host
            step = torch.as_tensor(state["step"], dtype=torch.float32)
            state["step"] = step.to(p.device) if capturable else step.cpu()


def block_bytes(depth: int, seeds: int, width: int, rows: int) -> int:
    """About the activations of one Adam step over a block of ``rows`` history rounds: four [S, m, 2n] float32
    tensors a hidden layer (an estimate: docs/performance.md gives the measured peak)."""
    return 4 * (depth - 1) * seeds * width * 2 * rows * 4


def sample_rows(
    seed_ids: list[int],
    base_seed: int,
    t: int,
    draws: int,
    size: Optional[int],
    weighting: str,
    device: torch.device,
) -> Optional[torch.Tensor]:
    """``draws`` samples of B = ``size`` history rows per seed, [S, draws, B] (None: use the whole history, also
    while t <= B). Drawn from the stream (base seed, seed id, TAG_SAMPLE, t): S-independent. ``weighting``:
    ``uniform``, or ``recency`` (density proportional to the row's position)."""
    if size is None or t <= size:
        return None
    out = []
    for i in seed_ids:  # host mirrors of the seed_id and base_seed buffers: no device sync
        rng = rng_for(base_seed, i, TAG_SAMPLE, t)
        if weighting == "uniform":
            out.append(rng.integers(0, t, size=(draws, size)))
        else:  # inverse CDF of a linear ramp
            out.append(np.minimum((t * np.sqrt(rng.random((draws, size)))).astype(np.int64), t - 1))
    # asynchronous host-to-device copy (numpy's pageable memory is staged at once): no sync
    return torch.from_numpy(np.stack(out)).to(device, non_blocking=True)


def history_blocks(
    mode: str,
    xt: torch.Tensor,
    o: torch.Tensor,
    t: int,
    rows: Optional[torch.Tensor],
    weights: Callable,
    played: Callable[[int], torch.Tensor],
) -> Iterator[tuple[torch.Tensor, torch.Tensor, Callable]]:
    """(contexts [S, d, 2n], outcomes [S, n], weight function of Delta f) per block of the loss at round t, from the
    history xt [S, d, 2T] (both items of each duel, feature-major) and o [S, T].

    The whole history (``mode``: ``chunked`` in blocks of TRAIN_CHUNK_ROUNDS, ``full`` in one block of the t played
    rows, ``masked`` in one block of all T preallocated rows with the unplayed ones weighted 0: static shapes;
    ``graphed`` likewise over t rounded up to a multiple of :data:`BUCKET_ROUNDS`), or
    the sampled rows ``rows`` [S, B] in one block scaled t/B. The whole-history passes give the same loss and
    gradient up to float rounding. ``weights(delta_f, hi, lo=0, rows=None)``: 1 / zeta_i^2 (eq. wi) of rows
    lo..hi-1 or of ``rows``; ``played(n)``: [n] bool, row i < n holds a played round."""
    if rows is None:
        if mode == "full":
            yield xt[:, :, : 2 * t], o[:, :t], lambda df: weights(df, t, 0)
            return
        if mode in ("masked", "graphed"):
            n = o.shape[1] if mode == "masked" else bucket(t, o.shape[1])
            mask = played(n)
            yield xt[:, :, : 2 * n], o[:, :n], lambda df: torch.where(mask, weights(df, n, 0), 0.0)
            return
        for lo in range(0, t, TRAIN_CHUNK_ROUNDS):
            hi = min(t, lo + TRAIN_CHUNK_ROUNDS)
            yield xt[:, :, 2 * lo : 2 * hi], o[:, lo:hi], lambda df, lo=lo, hi=hi: weights(df, hi, lo)
        return
    scale = t / rows.shape[1]
    cols = torch.stack([2 * rows, 2 * rows + 1], dim=2).flatten(1)  # [S, 2B]: (a1, a2) columns of each row
    x = xt.gather(2, cols.unsqueeze(1).expand(-1, xt.shape[1], -1))
    yield x, o.gather(1, rows), lambda df: scale * weights(df, t, rows=rows)
