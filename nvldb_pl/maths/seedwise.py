"""Batched products whose result for one seed does not depend on the other seeds in the batch.

The package stacks S seeds along the first dimension and promises each seed the same result
whatever S is (``tests/loop/test_loop.py``). Two things of the CPU's BLAS (MKL) break that in the
last bit, which Adam and the arm choices then amplify into other pairs (docs/performance.md):

* MKL picks its kernel by the operands' memory alignment, which depends on where a seed sits in
  the batch. Its conditional numerical reproducibility (``MKL_CBWR=AVX2,STRICT``, set here for
  the process unless already set, before the first BLAS call) makes results alignment-independent.
* A batch of one seed is a single product, which MKL splits over threads (and a matrix-vector
  product goes to another routine), where every larger batch gives each seed's product to one
  thread. :func:`bmm` and :func:`einsum` run a one-seed batch as two (the seed repeated, a stride-0
  view: twice the arithmetic, about the same time on two threads). Batches of two or more seeds
  run unchanged.

On CUDA the same holds for the factorizations (:func:`cholesky_ex`, :func:`solve_triangular`):
a batch of one goes to cuSOLVER's and cuBLAS's single-matrix routines, other kernels than the
batched ones every larger batch gets (and the single-matrix Cholesky can break a CUDA graph's
capture); there too a batch of one runs as two.
"""

from __future__ import annotations

import os

import torch

os.environ.setdefault("MKL_CBWR", "AVX2,STRICT")  # read by MKL at its first call, not at import


def _two(x: torch.Tensor) -> torch.Tensor:
    """A one-seed batch x [1, ...] as a batch of two (a view)."""
    return x.expand(2, *x.shape[1:])


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm(a, b)``, [S, n, k] x [S, k, p] -> [S, n, p]; S = 1 runs as a batch of two."""
    if a.shape[0] == 1:
        return torch.bmm(_two(a), _two(b))[:1]
    return torch.bmm(a, b)


def einsum(equation: str, *operands: torch.Tensor) -> torch.Tensor:
    """``torch.einsum`` of operands that all lead with the seed dimension; S = 1 runs as two."""
    if operands[0].shape[0] == 1:
        return torch.einsum(equation, *map(_two, operands))[:1]
    return torch.einsum(equation, *operands)


def matvec(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """a x per seed: a [S, n, k], x [S, k] -> [S, n] (bit for bit what ``einsum("snk,sk->sn")`` gives)."""
    return bmm(a, x.unsqueeze(2)).squeeze(2)


def cholesky_ex(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.cholesky_ex(a)`` per seed, a [S, d, d]; on CUDA S = 1 runs as two."""
    if a.shape[0] == 1 and a.device.type == "cuda":
        chol, info = torch.linalg.cholesky_ex(_two(a))
        return chol[:1], info[:1]
    return torch.linalg.cholesky_ex(a)


def solve_triangular(a: torch.Tensor, b: torch.Tensor, upper: bool) -> torch.Tensor:
    """``torch.linalg.solve_triangular(a, b, upper=upper)`` per seed; on CUDA S = 1 runs as two."""
    if a.shape[0] == 1 and a.device.type == "cuda":
        return torch.linalg.solve_triangular(_two(a), _two(b), upper=upper)[:1]
    return torch.linalg.solve_triangular(a, b, upper=upper)


def reads_without_sync(x) -> bool:
    """True where reading tensor ``x`` on the host costs no device synchronisation (it is in host
    memory). Per-round code may use such a read to skip work, never to change a result."""
    return x.device.type == "cpu"
