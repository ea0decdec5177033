"""Which operation of the update breaks a CUDA graph's capture with one seed, and what mends it.

    python lab/diagnostics/gpu_capture_probe.py          # on the GPU torch sees; one line per capture tried

With one seed in a process the graphed update failed to capture on an H200 in two calls (torch 2.11,
cudaErrorStreamCaptureInvalidated reported at the theta refit's Hessian einsum, the operation at fault
unknown); in call 5 (lab/results/gpu/README.md) it captured as it is and under every mend below, and one seed
runs graphed like several. The probe stays for the next time a capture fails. "Invalidated" means an earlier call of the capture (or of another thread, in torch's default "global"
mode) broke it without raising. This probe, as the graphed pass captures (a warm-up on a side stream,
then the capture and a replay):

1. captures each operation of the update that differs between one seed and several (seedwise's
   batch-of-two paths, the factorizations, the fused Adam step, the whole theta refit) alone, at
   S = 1 and S = 2, at a small shape and at cos.yaml's (d = 32 features, 256 history rows);
2. runs a one-seed graphed fit as it is and under each
   candidate mend: seedwise's batch of two as a copy instead of a stride-0 view, plain torch at S = 1
   (no batch of two), and the capture modes "thread_local" (another thread's call at fault) and
   "relaxed" (an allowed-if-relaxed call, such as an allocation, of this thread at fault).

A failure names the last frame of this package in its traceback. Part of ``lab/diagnostics/device_checks.sh``.
"""

import argparse
import contextlib
import os
import subprocess
import sys
import traceback

import torch

import nvldb_pl
from nvldb_pl.machinery import graphs
from nvldb_pl.maths import objective, seedwise
from nvldb_pl.machinery.devices import check_accelerator
from nvldb_pl.loop.run import stop_at_ctrl_c_in_one_line

PACKAGE = os.path.dirname(os.path.abspath(nvldb_pl.__file__))


def failure(err: BaseException) -> str:
    """'FAILED <type>: <first line> at <file:line of the package's last frame>' (of torch's own error, where the
    package's CaptureFailed wraps it)."""
    while isinstance(err, graphs.CaptureFailed) and err.__cause__ is not None:
        err = err.__cause__
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith(PACKAGE)]
    at = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return f"FAILED {type(err).__name__}: {str(err).splitlines()[0][:120]}{at}"


def captures(fn) -> str:
    """'ok' if fn() captures into a CUDA graph and replays, else :func:`failure`."""
    try:
        steps = graphs.CapturedSteps()
        steps("probe", fn)  # warm-up and capture
        steps("probe", fn)  # replay
        torch.cuda.synchronize()
        return "ok"
    except Exception as err:  # noqa: BLE001 - the probe reports every failure and goes on
        return failure(err)


def operations(S: int, d: int, t: int) -> dict:
    """The update's operations that differ between one seed and several, and the whole theta refit."""
    dev, f64 = "cuda", torch.float64
    g = torch.Generator(device=dev).manual_seed(0)
    W, x = torch.randn(S, 32, d, device=dev, generator=g), torch.randn(S, d, 2 * t, device=dev, generator=g)
    dphi = torch.randn(S, t, d, dtype=f64, device=dev, generator=g)
    theta = torch.randn(S, d, dtype=f64, device=dev, generator=g)
    w, o = (
        torch.rand(S, t, dtype=f64, device=dev, generator=g),
        (torch.rand(S, t, device=dev, generator=g) < 0.5).double(),
    )
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


@contextlib.contextmanager
def mend(name: str):
    """A candidate mend in force: 'as is', 'two as copies', 'plain torch at S=1', 'thread_local', 'relaxed'."""
    saved = (
        seedwise._two,
        seedwise.bmm,
        seedwise.einsum,
        seedwise.cholesky_ex,
        seedwise.solve_triangular,
        graphs.CapturedSteps.error_mode,
    )
    if name == "two as copies":
        seedwise._two = lambda x: x.expand(2, *x.shape[1:]).contiguous()
    elif name == "plain torch at S=1":
        seedwise.bmm, seedwise.einsum = torch.bmm, torch.einsum
        seedwise.cholesky_ex, seedwise.solve_triangular = (
            torch.linalg.cholesky_ex,
            (lambda a, b, upper: torch.linalg.solve_triangular(a, b, upper=upper)),
        )
    elif name in ("thread_local", "relaxed"):
        graphs.CapturedSteps.error_mode = name
    try:
        yield
    finally:
        (
            seedwise._two,
            seedwise.bmm,
            seedwise.einsum,
            seedwise.cholesky_ex,
            seedwise.solve_triangular,
            graphs.CapturedSteps.error_mode,
        ) = saved


MENDS = ("as is", "two as copies", "plain torch at S=1", "thread_local", "relaxed")


def one_seed_fit(rounds: int = 20, width: int = 32) -> str:
    """A one-seed graphed fit (cos, as cos.yaml's network): 'ok (captures N)' or :func:`failure`."""
    from nvldb_pl.loop.run import run_experiment

    try:
        data = {"task": "cos", "dim": 5, "arms": 5, "rounds": rounds, "num_seeds": 1, "seed": 0}
        _, m = run_experiment(
            data, {"network": {"width": width}, "compute": {"history_pass": "graphed"}}, accelerator="gpu"
        )
        torch.cuda.synchronize()
        return f"ok (captures {m.execution.steps.captures})"
    except Exception as err:  # noqa: BLE001
        return failure(err)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fit", choices=MENDS, help="only the one-seed graphed fit under this mend (one line)")
    args = p.parse_args()
    try:
        check_accelerator("gpu", field="device")
    except ValueError as err:
        p.error(str(err))
    if args.fit:
        with mend(args.fit):
            print(one_seed_fit())
        return
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    failed_alone = []
    for d, t in ((5, 300), (32, 256)):
        for S in (1, 2):
            for name, fn in operations(S, d, t).items():
                result = captures(fn)
                print(f"alone d={d:2d} t={t} S={S} {name:34s} {result}")
                if S == 1 and result != "ok":
                    failed_alone.append((d, t, name))
    for d, t, name in failed_alone:  # what mends an operation that fails alone
        for how in MENDS[1:]:
            with mend(how):
                print(f"alone d={d:2d} t={t} S=1 {name:34s} [{how}] {captures(operations(1, d, t)[name])}")
    mended = []
    for how in MENDS:  # each fit in a process of its own: a failed capture leaves nothing behind for the next
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--fit", how], capture_output=True, text=True)
        lines = (run.stdout.strip() or run.stderr.strip() or f"exit {run.returncode}").splitlines()
        result = lines[-1][:200]
        print(f"one-seed graphed fit [{how}] {result}")
        if how != "as is" and result.startswith("ok"):
            mended.append(how)
    print(f"mends that let one seed capture: {', '.join(mended) or 'none'}")


if __name__ == "__main__":
    stop_at_ctrl_c_in_one_line(main, "gpu_capture_probe.py")
