"""Where a float32 GPU run leaves the CPU run (issue: V differs 2-3% after 25 rounds on an H100),
and how far S=4 seeds in one GPU run are from four S=1 runs.

    python lab/diagnostics/gpu_drift.py                 # CPU against GPU
    python lab/diagnostics/gpu_drift.py --other cpu     # CPU against CPU: every difference must be 0
    python lab/diagnostics/gpu_drift.py --blas cublaslt  # the GPU runs' products through cuBLASLt

Runs the same config on both devices with parts of the update switched off, and prints per
variant whether the arm pairs agree and the largest relative difference of V, theta and the
first hidden layer. If V agrees without Adam steps and drifts with them, the drift is Adam
turning last-bit gradient differences into full steps (Adam's step does not shrink with the
gradient), not a wrong GPU kernel.
"""

import argparse

import torch

from nvldb_pl.machinery.devices import BLAS_LIBRARIES, check_accelerator, use_blas_library
from nvldb_pl.machinery.history import resolve_history_pass
from nvldb_pl.loop.run import run_experiment, stop_at_ctrl_c_in_one_line

DATA = {"task": "cos", "rounds": 25, "num_seeds": 3, "seed": 2}
VARIANTS = {  # the chunked pass on both devices unless named (auto would pick graphed on CUDA only)
    "full update": {"grad_steps": 5},
    "no Adam steps (refit + V only)": {"grad_steps": 0},
    "Adam, no theta refit": {"grad_steps": 5, "refit_theta": False},
    "one Adam step a round": {"grad_steps": 1},
    "graphed pass (GPU graph, CPU eager)": {"grad_steps": 5, "compute": {"history_pass": "graphed"}},
}


def passes(mode: str, device: str) -> str:
    """The history pass ``mode`` resolves to on ``device`` (not read from a learner after its run: Lightning's
    teardown moves it back to the CPU, where its own ``compute.history_pass`` reads ``chunked``)."""
    return resolve_history_pass(mode, torch.device("cuda" if device == "gpu" else "cpu"), None)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--other", default="gpu", choices=["cpu", "gpu"])
    p.add_argument(
        "--blas",
        default="default",
        choices=BLAS_LIBRARIES,
        help="torch's CUDA BLAS library for the GPU runs (torch.backends.cuda.preferred_blas_library)",
    )
    a = p.parse_args()
    try:
        check_accelerator(a.other, field="--other", allowed=("cpu", "gpu"))
        use_blas_library(a.blas, a.other)
    except ValueError as err:  # a GPU asked for where torch sees none: one line, not a traceback
        p.error(str(err))
    if a.blas != "default":
        print(f"GPU runs through {a.blas}")
    print(f"{'variant':34s} {'pairs equal':>11s} {'V rel':>10s} {'theta rel':>10s} {'W1 rel':>10s}")
    for name, extra in VARIANTS.items():
        model = {"network": {"width": 16}, "compute": {"history_pass": "chunked"}, **extra}
        _, m_cpu = run_experiment(DATA, model, accelerator="cpu")
        _, m_oth = run_experiment(DATA, model, accelerator=a.other)
        same = torch.equal(m_cpu.history(), m_oth.history().cpu())
        print(
            f"{name:34s} {str(same):>11s} {rel(m_oth.V, m_cpu.V):10.2e} {rel(m_oth.net.theta, m_cpu.net.theta):10.2e} "
            f"{rel(m_oth.net.weights[0], m_cpu.net.weights[0]):10.2e}"
        )
    seeds_together_and_alone(a.other)


def seeds_together_and_alone(device: str) -> None:
    """S=4 in one run against four S=1 runs on ``device``: bit for bit on a CPU (tests/loop/test_loop.py);
    on a GPU a kernel may pick another algorithm for another batch size: how far apart they end."""
    print(f"\nS=4 against four S=1 runs on {device} ({DATA['rounds']} rounds; 0 = bit for bit)")
    print(f"{'pass':17s} {'pairs equal':>11s} {'V rel':>10s} {'theta rel':>10s} {'regret rel':>10s}")
    for walk in ("chunked", "auto"):  # auto: graphed on a GPU
        model = {"network": {"width": 16}, "grad_steps": 5, "compute": {"history_pass": walk}}
        s4, m4 = run_experiment({**DATA, "num_seeds": 4}, model, accelerator=device)
        same, v, th, reg = True, 0.0, 0.0, 0.0
        for i in range(4):
            s1, m1 = run_experiment({**DATA, "num_seeds": 1, "first_seed_id": i}, model, accelerator=device)
            same &= torch.equal(m4.history()[i].cpu(), m1.history()[0].cpu())
            v, th = max(v, rel(m4.V[i], m1.V[0])), max(th, rel(m4.net.theta[i], m1.net.theta[0]))
            a, b = s4["seeds"][i]["cum_avg_regret"], s1["seeds"][0]["cum_avg_regret"]
            reg = max(reg, abs(a - b) / max(abs(b), 1e-30))
        print(f"{passes(walk, device):17s} {str(same):>11s} {v:10.2e} {th:10.2e} {reg:10.2e}")


if __name__ == "__main__":
    stop_at_ctrl_c_in_one_line(main, "gpu_drift.py")
