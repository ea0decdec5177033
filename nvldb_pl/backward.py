"""Hand-written gradient of the history term of eq. (total_loss), for all S seeds at once.

The network of eq. (nn) has no biases and ReLU everywhere, so its backward pass is three
matmuls and one ReLU mask per layer. Written out, it skips what autograd spends on these skinny
layers (graph bookkeeping, saved-tensor copies, a separate mask per ReLU): about 1.5-2x faster
per Adam step on 2 CPU cores (see README "Performance"). ``tests/test_math.py`` checks it
against autograd on the same loss.

Shapes, feature-major as in :class:`nvldb_pl.network.StackedMLP`: x_t [S, d, 2n] holds the n
duels of a block as columns (2i, 2i+1); o [S, n]. Every product is batched over seeds and
nothing is reduced across them, so each seed gets its own gradient.

The weights 1/zeta_i^2 enter as constants (eq. wi: zeta is evaluated at the current parameters
and not differentiated), exactly as the autograd path treats them.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from . import links


def _relu_backward(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """grad * 1[out > 0], one pass (the ReLU's output decides, as autograd does)."""
    return torch.ops.aten.threshold_backward(grad, out, 0)


def accumulate_nll_grad(
    weights: list[torch.Tensor],
    theta: torch.Tensor,
    x_t: torch.Tensor,
    o: torch.Tensor,
    link: str,
    weight_of: Callable[[torch.Tensor], torch.Tensor],
    grads: list[torch.Tensor],
    compute_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Add d/d(W^1..W^L, theta) of sum_i -log g(s_i Delta f_i) / zeta_i^2 to ``grads``.

    Args:
        weights: W^1..W^L, each [S, out, in] (detached values are read, never modified).
        theta: [S, d].
        x_t: [S, d, 2n] duel columns; o: [S, n] outcomes in {0, 1}.
        weight_of: Delta f [S, n] (float32) -> 1 / zeta^2 [S, n] (eq. wi).
        grads: float32 accumulators shaped like ``weights + [theta]``, updated in place.
        compute_dtype: dtype of the matmuls (``None``: the weights' own, e.g. bfloat16 under
            mixed precision); gradients are accumulated in the accumulators' dtype.
    Returns:
        The block's loss per seed, [S], detached.
    """
    S, _, N = x_t.shape
    dtype = compute_dtype or weights[0].dtype
    scale = math.sqrt(weights[0].shape[1])  # sqrt(m) of eq. (nn)
    Ws = [w.detach().to(dtype) for w in weights]
    th = theta.detach().to(dtype)
    hs = [x_t.to(dtype)]  # h^0 = x, h^l = ReLU(W^l h^{l-1})
    for W in Ws:
        hs.append(torch.bmm(W, hs[-1]).relu_())
    f = scale * torch.bmm(th.unsqueeze(1), hs[-1]).squeeze(1).float()  # f = theta^T phi, [S, 2n]
    pair = f.view(S, N // 2, 2)
    delta_f = pair[..., 0] - pair[..., 1]
    w = weight_of(delta_f).to(delta_f.dtype)
    o = o.to(delta_f.dtype)
    loss = -(w * links.log_prob(link, (2.0 * o - 1.0) * delta_f)).sum(dim=1)
    d1, _ = links.nll_derivatives(link, delta_f, o)  # d/dDelta f of -log g(s Delta f)
    g_df = w * d1
    g_f = (scale * torch.stack([g_df, -g_df], dim=-1)).view(S, 1, N).to(dtype)  # dL/d(theta^T h^L)
    grads[-1].add_(torch.bmm(hs[-1], g_f.transpose(1, 2)).squeeze(2).to(grads[-1].dtype))
    g = _relu_backward(th.unsqueeze(2) * g_f, hs[-1])  # dL/d(W^L h^{L-1})
    for layer in range(len(Ws) - 1, -1, -1):
        grads[layer].add_(torch.bmm(g, hs[layer].transpose(1, 2)).to(grads[layer].dtype))
        if layer > 0:
            g = _relu_backward(torch.bmm(Ws[layer].transpose(1, 2), g), hs[layer])
    return loss.detach()


def per_point_gradients(weights: list[torch.Tensor], theta: torch.Tensor, x_t: torch.Tensor) -> torch.Tensor:
    """g(x) = d f(x) / d(W^1..W^L, theta) for every point, flattened in ``parameters()`` order.

    Args:
        weights: W^1..W^L, each [S, out, in]; theta: [S, d]; x_t: [S, d, N] points as columns.
    Returns:
        [S, N, p] in the weights' dtype, p = sum of the layer sizes + d (NDB's gradient features).
    """
    S, _, N = x_t.shape
    scale = math.sqrt(weights[0].shape[1])
    hs = [x_t]
    for W in weights:
        hs.append(torch.bmm(W, hs[-1]).relu_())
    parts = [None] * (len(weights) + 1)
    parts[-1] = (scale * hs[-1]).transpose(1, 2)  # df/dtheta = sqrt(m) phi
    g = _relu_backward((scale * theta).unsqueeze(2).expand(-1, -1, N), hs[-1])  # df/d(W^L h^{L-1}) [S, d, N]
    for layer in range(len(weights) - 1, -1, -1):
        parts[layer] = torch.einsum("son,sin->snoi", g, hs[layer]).reshape(S, N, -1)  # per-point outer product
        if layer > 0:
            g = _relu_backward(torch.bmm(weights[layer].transpose(1, 2), g), hs[layer])
    return torch.cat(parts, dim=2)
