"""Which operation of the update breaks a CUDA graph's capture, for one seed and for two.

    python scripts/gpu_capture_probe.py          # on the GPU torch sees; one line per operation

With one seed in a process the graphed update failed to capture on an H200 (torch 2.11,
cudaErrorStreamCaptureInvalidated reported in the theta refit, the operation at fault unknown), so
``history_pass: auto`` runs one seed un-graphed (``nvldb_pl.neural.GRAPHED_MIN_SEEDS``). This captures
each operation of the update on its own, as the graphed pass does (a warm-up on a side stream, then
the capture and a replay), at S = 1 and S = 2, and prints which capture fails: the one to replace
before one seed can run graphed. Part of ``scripts/device_checks.sh``.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from nvldb_pl import graphs, objective, seedwise  # noqa: E402
from nvldb_pl.devices import check_accelerator  # noqa: E402


def captures(fn) -> str:
    """'ok' if fn() captures into a CUDA graph and replays (as the graphed pass runs it: a warm-up on a side
    stream, the capture, then a replay), else the error's first line."""
    try:
        steps = graphs.CapturedSteps()
        steps("probe", fn)  # warm-up and capture
        steps("probe", fn)  # replay
        torch.cuda.synchronize()
        return "ok"
    except Exception as err:  # noqa: BLE001 - the probe reports every failure and goes on
        return f"FAILED {type(err).__name__}: {str(err).splitlines()[0][:140]}"


def operations(S: int, d: int = 5, t: int = 300) -> dict:
    """The update's operations that differ between one seed and several (seedwise's batch-of-two
    paths, the factorizations, the fused Adam step), and the whole theta refit."""
    dev, f64 = "cuda", torch.float64
    g = torch.Generator(device=dev).manual_seed(0)
    W, x = torch.randn(S, 32, d, device=dev, generator=g), torch.randn(S, d, 2 * t, device=dev, generator=g)
    dphi = torch.randn(S, t, d, dtype=f64, device=dev, generator=g)
    theta = torch.randn(S, d, dtype=f64, device=dev, generator=g)
    w, o = torch.rand(S, t, dtype=f64, device=dev, generator=g), (torch.rand(S, t, device=dev, generator=g) < 0.5).double()
    H = 2 * torch.eye(d, dtype=f64, device=dev).repeat(S, 1, 1)
    L = torch.linalg.cholesky(H)
    p = torch.nn.Parameter(torch.randn(S, 32, d, device=dev, generator=g))
    adam = torch.optim.Adam([p], lr=1e-3, fused=True, capturable=True)

    def adam_step():
        p.grad = torch.ones_like(p)
        adam.step()

    return {
        "seedwise.bmm (float32)": lambda: seedwise.bmm(W, x),
        "seedwise.matvec (float64)": lambda: seedwise.matvec(dphi, theta),
        "seedwise.einsum st,std->sd": lambda: seedwise.einsum("st,std->sd", w, dphi),
        "seedwise.einsum st,std,ste->sde": lambda: seedwise.einsum("st,std,ste->sde", w, dphi, dphi),
        "seedwise.cholesky_ex": lambda: seedwise.cholesky_ex(H),
        "seedwise.solve_triangular": lambda: seedwise.solve_triangular(L, theta.unsqueeze(-1), upper=False),
        "objective.refit_theta (whole)": lambda: objective.refit_theta("logistic", theta, dphi, o, w, 0 * theta, 1.0),
        "fused capturable Adam step": adam_step,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.parse_args()
    try:
        check_accelerator("gpu", field="device")
    except ValueError as err:
        p.error(str(err))
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    for S in (1, 2):
        for name, fn in operations(S).items():
            print(f"S={S} {name:34s} {captures(fn)}")


if __name__ == "__main__":
    main()
