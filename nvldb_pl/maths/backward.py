"""Hand-written gradient of the history term of eq. (total_loss), for all S seeds at once.

The network of eq. (nn) is ReLU everywhere, so its backward pass is three matmuls and one ReLU
mask per layer (plus a column sum per layer for the standard parametrization's biases); with a smooth
activation (GELU, SiLU) the mask is the activation's derivative at the saved pre-activation. Written out, it skips
what autograd spends on these skinny layers (graph bookkeeping, saved-tensor copies, a separate mask per ReLU): about
1.5-2x faster per Adam step on 2 CPU cores (docs/performance.md). ``tests/maths/test_math.py`` and
``tests/maths/test_backward.py`` check it against autograd on the same loss.

Shapes, feature-major as in :class:`nvldb_pl.maths.network.StackedMLP`: x_t [S, d, 2n] holds the n
duels of a block as columns (2i, 2i+1); o [S, n]. Every product is batched over seeds and
nothing is reduced across them, so each seed gets its own gradient.

The weights 1/zeta_i^2 enter as constants (eq. wi: zeta is evaluated at the current parameters
and not differentiated), exactly as the autograd path treats them.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Optional, Sequence

import torch

from . import links
from . import seedwise
from .network import activate


def _relu_backward(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """grad * 1[out > 0], one pass (the ReLU's output decides, as autograd does)."""
    return torch.ops.aten.threshold_backward(grad, out, 0)


def _act_backward(grad: torch.Tensor, out: torch.Tensor, pre: Optional[torch.Tensor], activation: str) -> torch.Tensor:
    """grad * act'(pre): ReLU from its output (``pre`` is not kept), GELU and SiLU from the pre-activation, by the
    kernels autograd runs for them (the same values as autograd's backward), written over ``pre`` where nothing
    records it for autograd (read by no one after: a large new tensor costs a CPU its page faults)."""
    if activation == "relu":
        return _relu_backward(grad, out)
    op = torch.ops.aten.gelu_backward if activation == "gelu" else torch.ops.aten.silu_backward
    if pre.requires_grad:
        return op(grad, pre)
    return op.grad_input(grad, pre, grad_input=pre)


def accumulate_nll_grad(
    weights: list[torch.Tensor],
    theta: torch.Tensor,
    x_t: torch.Tensor,
    o: torch.Tensor,
    link: str,
    weight_of: Callable[[torch.Tensor], torch.Tensor],
    grads: list[torch.Tensor],
    compute_dtype: Optional[torch.dtype] = None,
    biases: Sequence[torch.Tensor] = (),
    scale: Optional[float] = None,
    with_loss: bool = True,
    activation: str = "relu",
) -> Optional[torch.Tensor]:
    """Add d/d(W^1..W^L, theta, b^1..b^L) of sum_i -log g(s_i Delta f_i) / zeta_i^2 to ``grads``.

    Args:
        weights: W^1..W^L, each [S, out, in] (detached values are read, never modified).
        theta: [S, d].
        x_t: [S, d, 2n] duel columns; o: [S, n] outcomes in {0, 1}.
        weight_of: Delta f [S, n] (float32) -> 1 / zeta^2 [S, n] (eq. wi).
        grads: float32 accumulators shaped like ``weights + [theta] + biases``, updated in place.
        compute_dtype: dtype of the matmuls (``None``: the weights' own, e.g. bfloat16 under
            mixed precision); gradients are accumulated in the accumulators' dtype.
        biases: b^1..b^L, each [S, out] (standard parametrization), or none.
        scale: the output factor of phi; ``None`` = sqrt(m) of eq. (nn).
        with_loss: also evaluate the loss (not needed for the gradient; a CUDA graph's kernels saved).
        activation: every layer's nonlinearity (:data:`nvldb_pl.maths.network.ACTIVATIONS`).
    Returns:
        The block's loss per seed, [S], detached (``None`` without ``with_loss``).
    """
    S, _, N = x_t.shape
    dtype = compute_dtype or weights[0].dtype
    scale = math.sqrt(weights[0].shape[1]) if scale is None else scale
    Ws = [w.detach().to(dtype) for w in weights]
    th = theta.detach().to(dtype)
    hs, pres = _forward(Ws, [b.detach().to(dtype) for b in biases], x_t.to(dtype), activation)
    f = seedwise.bmm(th.unsqueeze(1), hs[-1]).squeeze(1).float()  # f = theta^T phi, [S, 2n]
    if scale != 1.0:  # the standard parametrization's 1: no kernel for an exact no-op
        f = scale * f
    pair = f.view(S, N // 2, 2)
    delta_f = pair[..., 0] - pair[..., 1]
    w = weight_of(delta_f).to(delta_f.dtype)
    o = o.to(delta_f.dtype)
    loss = -(w * links.log_prob(link, (2.0 * o - 1.0) * delta_f)).sum(dim=1) if with_loss else None
    d1 = links.nll_first_derivative(link, delta_f, o)  # d/dDelta f of -log g(s Delta f)
    g_df = w * d1
    g_f = (
        (g_df.unsqueeze(-1) * _plus_minus(scale, g_df.dtype, g_df.device)).view(S, 1, N).to(dtype)
    )  # dL/d(theta^T h^L)
    L = len(Ws)
    grads[L].add_(seedwise.bmm(hs[-1], g_f.transpose(1, 2)).squeeze(2).to(grads[L].dtype))  # d/dtheta
    g = _act_backward(th.unsqueeze(2) * g_f, hs[-1], pres[-1], activation)  # dL/d(W^L h^{L-1} + b^L)
    for layer in range(L - 1, -1, -1):
        grads[layer].add_(
            _weight_grad(g, hs[layer], transposed=layer == 0 and g.device.type == "cuda").to(grads[layer].dtype)
        )
        if biases:  # each duel's two columns summed first: terms that cancel exactly give exactly 0
            grads[L + 1 + layer].add_(_duel_sums(g).sum(dim=2).to(grads[L + 1 + layer].dtype))
        if layer > 0:
            g = _act_backward(seedwise.bmm(Ws[layer].transpose(1, 2), g), hs[layer], pres[layer], activation)
    return loss.detach() if with_loss else None


def _duel_sums(g: torch.Tensor) -> torch.Tensor:
    """[S, k, 2n] -> [S, k, n]: each duel's two columns (2i, 2i+1) added. The values of ``.sum()`` over a last
    dimension of 2 (two -0.0 give -0.0 here, +0.0 there; summed over the duels after, the same to the bit),
    faster on a CPU, where a reduction over 2 elements is slow (docs/performance.md)."""
    return g[..., 0::2] + g[..., 1::2]


@functools.lru_cache(maxsize=16)
def _plus_minus(scale: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[scale, -scale]: a duel's two columns get +scale and -scale times dL/dDelta f in one product (bit for
    bit scale * stack([g, -g])). Made once per (scale, dtype, device), outside any CUDA graph's capture
    (the graphed pass runs eagerly first), and never written to."""
    return torch.tensor([scale, -scale], dtype=dtype).to(device)


def _weight_grad(g: torch.Tensor, h: torch.Tensor, transposed: bool = False) -> torch.Tensor:
    """dW = g h^T per seed: g [S, out, N], h [S, in, N] -> [S, out, in], summed over the N history columns.
    ``transposed``: computed as (h g^T)^T, the same sum in another order; on CUDA for the first layer (in = d,
    a few columns) cuBLAS runs it faster (docs/performance.md)."""
    if transposed:
        return seedwise.bmm(h, g.transpose(1, 2)).transpose(1, 2)
    return seedwise.bmm(g, h.transpose(1, 2))


def _forward(
    Ws: list[torch.Tensor], bs: list[torch.Tensor], x_t: torch.Tensor, activation: str = "relu"
) -> tuple[list[torch.Tensor], list[Optional[torch.Tensor]]]:
    """[h^0 = x, h^1, ..., h^L] with h^l = act(W^l h^{l-1} (+ b^l)), feature-major, and the pre-activations
    [None, W^1 h^0 (+ b^1), ...] that a smooth activation's backward reads (ReLU's: all None, its output decides)."""
    hs, pres = [x_t], [None]
    for layer, W in enumerate(Ws):
        pre = seedwise.bmm(W, hs[-1])
        if bs:  # not baddbmm: its rounding depends on the batch size (the number of seeds)
            pre.add_(bs[layer].unsqueeze(2))  # in place: the same sum, no new tensor
        if activation == "relu":
            hs.append(pre.relu_())
            pres.append(None)
        else:
            hs.append(activate(pre, activation))
            pres.append(pre)
    return hs, pres


def per_point_gradients(
    weights: list[torch.Tensor],
    theta: torch.Tensor,
    x_t: torch.Tensor,
    biases: Sequence[torch.Tensor] = (),
    scale: Optional[float] = None,
    activation: str = "relu",
) -> torch.Tensor:
    """g(x) = d f(x) / d(W^1..W^L, theta, b^1..b^L) for every point, flattened in ``parameters()`` order.

    Args:
        weights: W^1..W^L, each [S, out, in]; theta: [S, d]; x_t: [S, d, N] points as columns;
        biases: b^1..b^L, each [S, out], or none; scale: phi's output factor (``None``: sqrt(m));
        activation: every layer's nonlinearity.
    Returns:
        [S, N, p] in the weights' dtype, p = every parameter's size summed (NDB's gradient features).
    """
    S, _, N = x_t.shape
    scale = math.sqrt(weights[0].shape[1]) if scale is None else scale
    L = len(weights)
    hs, pres = _forward(list(weights), list(biases), x_t, activation)
    parts = [None] * (L + 1 + len(biases))
    parts[L] = (scale * hs[-1]).transpose(1, 2)  # df/dtheta = scale * phi
    g = _act_backward(
        (scale * theta).unsqueeze(2).expand(-1, -1, N), hs[-1], pres[-1], activation
    )  # df/d(W^L h^{L-1} + b^L) [S, d, N]
    for layer in range(L - 1, -1, -1):
        parts[layer] = torch.einsum("son,sin->snoi", g, hs[layer]).reshape(S, N, -1)  # per-point outer product
        if biases:
            parts[L + 1 + layer] = g.transpose(1, 2)
        if layer > 0:
            g = _act_backward(seedwise.bmm(weights[layer].transpose(1, 2), g), hs[layer], pres[layer], activation)
    return torch.cat(parts, dim=2)
