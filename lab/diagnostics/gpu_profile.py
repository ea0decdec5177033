"""Which kernels one round's update launches, and where its device time goes.

    python lab/diagnostics/gpu_profile.py                     # on the GPU torch sees
    python lab/diagnostics/gpu_profile.py --device cpu        # the same operations counted on a CPU

Builds an NVLDB learner (cos-like: d=5, K=5, S seeds, width m, L=3, n Adam steps, the graphed
pass: the whole history rounded up to 256 rounds, masked) whose history holds t random duels,
runs the update's two parts eagerly under torch.profiler (a CUDA graph replays exactly these
kernels), and prints per part the number of kernels (on a CPU: the aten operations that compute,
not views or allocations; a foreach operation there counts once per tensor), their time, and the kernels that are most numerous and take the most
time. What the graph of ``compute.history_pass=graphed`` costs is about kernels x their time: this says
which to fuse or drop first (lab/results/gpu/README.md). On a GPU it also times the captured round as the
graphed pass replays it (device time: the run is device-bound when a round's host time is below this),
and the weight-gradient product dW = g h^T, the costliest kernel of a step, two other ways.
"""

import argparse
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from nvldb_pl.machinery import graphs
from nvldb_pl.machinery.devices import check_accelerator
from nvldb_pl.experiments.arguments import check_positive
from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.loop.run import stop_at_ctrl_c_in_one_line

# aten operations that launch no kernel of their own (views, metadata, allocation, dispatch wrappers)
NOT_COMPUTE = {
    "aten::empty",
    "aten::empty_strided",
    "aten::empty_like",
    "aten::as_strided",
    "aten::view",
    "aten::_unsafe_view",
    "aten::reshape",
    "aten::detach",
    "aten::alias",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::to",
    "aten::_to_copy",
    "aten::t",
    "aten::transpose",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::expand",
    "aten::select",
    "aten::slice",
    "aten::result_type",
    "aten::permute",
    "aten::lift_fresh",
    "aten::is_nonzero",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::zeros_like",
    "aten::ones_like",
    "aten::full_like",
    "aten::unbind",
    "aten::split",
    "aten::chunk",
    "aten::narrow",
    "aten::contiguous",
    "aten::clone",
    "aten::stack",
    "aten::cat",
}


def kernels(prof, device: str) -> list[tuple[str, float]]:
    """(name, microseconds) of every kernel (CUDA) or computing aten leaf operation (CPU) recorded."""
    out = []
    for e in prof.events():
        if device == "cuda":
            # not record_function's spans on the GPU's timeline ("Optimizer.step#Adam.step"); kernels' own
            # names may hold '#' (C++ lambdas: "{lambda(float, float)#1}")
            if e.device_type == torch.autograd.DeviceType.CUDA and not (
                getattr(e, "is_user_annotation", False) or e.name.startswith("Optimizer.")
            ):
                out.append((e.name, e.time_range.end - e.time_range.start))
        elif (
            e.name.startswith("aten::")
            and e.name not in NOT_COMPUTE
            and not any(c.name.startswith("aten::") and c.name not in NOT_COMPUTE for c in e.cpu_children)
        ):
            out.append((e.name, e.time_range.end - e.time_range.start))
    return out


def profiled(fn, device: str) -> list[tuple[str, float]]:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    fn()  # warm-up: lazy state, library handles, the allocator
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
    return kernels(prof, device)


def report(name: str, ks: list[tuple[str, float]], per: int, top: int) -> None:
    total = sum(us for _, us in ks)
    print(f"{name}: {len(ks)} kernels ({len(ks) / per:.1f} per step), {total / 1000:.2f} ms")
    count, time = Counter(), Counter()
    for k, us in ks:
        count[k[:70]] += 1
        time[k[:70]] += us
    print("  most numerous: " + "; ".join(f"{k} x{n}" for k, n in count.most_common(top)))
    print("  most time:     " + "; ".join(f"{k} {us / 1000:.2f} ms" for k, us in time.most_common(top)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="gpu", choices=["cpu", "gpu"])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--at", type=int, default=1000, help="t: the duels already in the history")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--grad-steps", type=int, default=20)
    p.add_argument("--top", type=int, default=8)
    a = p.parse_args()
    try:
        check_accelerator(a.device, field="--device", allowed=("cpu", "gpu"))
        for flag, value in (("--seeds", a.seeds), ("--at", a.at), ("--width", a.width), ("--grad-steps", a.grad_steps)):
            check_positive(flag, value)
    except ValueError as err:
        p.error(str(err))
    device = "cuda" if a.device == "gpu" else "cpu"
    t, S = a.at, a.seeds
    m = NVLDB(
        dim=5,
        arms=5,
        rounds=t + 1,
        num_seeds=S,
        network={"width": a.width},
        grad_steps=a.grad_steps,
        compute={"history_pass": "graphed"},
    )
    m.init_parameters(0, list(range(S)))
    g = torch.Generator().manual_seed(0)
    m.hist_xt.copy_(torch.randn(S, 5, 2 * (t + 1), generator=g))
    m.hist_o.copy_((torch.rand(S, t + 1, generator=g) < 0.5).float())
    m._t = t
    m.rounds_done.fill_(t)
    m = m.to(device)
    m.attach_optimizer()  # Adam as a run makes it: capturable on CUDA (graphed)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    print(
        f"torch {torch.__version__} on {name}; S={S} t={t} m={a.width} L=3 n={a.grad_steps}, graphed pass walked eagerly"
    )
    report("Adam steps", profiled(lambda: m._adam_steps(t), device), a.grad_steps, a.top)
    with torch.no_grad():
        report("theta refit", profiled(lambda: m._refit_theta(t), device), 1, a.top)
    if device == "cuda":
        replay_times(m, t)
        weight_gradient_products(S, a.width, 2 * graphs.bucket(t, t + 1))


def replay_times(m, t: int) -> None:
    """Device time of one round's graph (n Adam steps and the refit) as the graphed pass replays it."""
    with m._untimed():
        run = lambda: m.execution.steps(m._history_rows(t), lambda: m._train_and_refit(t))  # noqa: E731
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        run()  # warm-up and capture
        torch.cuda.synchronize()
        rows = m._history_rows(t)
        estimate = m.training_block_bytes(rows)  # what the refusal of a block that cannot fit counts
        print(
            f"graphed update's peak memory: {(torch.cuda.max_memory_allocated() - base) / 2**20:.0f} MB above the "
            f"learner's own, for {rows} rows (the refusal's estimate: {estimate / 2**20:.0f} MB)"
        )
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(10):
            run()
        end.record()
        torch.cuda.synchronize()
    print(f"graph replay: {start.elapsed_time(end) / 10:.2f} ms a round (device time, t={t})")


def weight_gradient_products(S: int, width: int, N: int, block: int = 512) -> None:
    """Device µs of dW = g h^T ([S, m, N] x [S, i, N] -> [S, m, i]) inside a CUDA graph, as one batched
    matmul over the seeds and as blocks of ``block`` history columns batched with them (the seeds'
    blocks copied to one batch, multiplied, summed): more thread blocks at the cost of two copies; then the
    first two through cuBLASLt (``--blas cublaslt`` of benchmark.py), which may split the inner dimension."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    for i in (5, width):
        g = torch.randn(S, width, N, device="cuda", generator=gen)
        h = torch.randn(S, i, N, device="cuda", generator=gen)
        nb = N // block

        def blocked():
            gb = g[:, :, : nb * block].view(S, width, nb, block).transpose(1, 2).reshape(S * nb, width, block)
            hb = h[:, :, : nb * block].view(S, i, nb, block).transpose(1, 2).reshape(S * nb, i, block)
            return torch.bmm(gb, hb.transpose(1, 2)).view(S, nb, width, i).sum(1)

        line = []
        for name, fn in (
            ("one bmm", lambda: torch.bmm(g, h.transpose(1, 2))),
            ("(h g^T)^T", lambda: torch.bmm(h, g.transpose(1, 2)).transpose(1, 2)),
            (f"blocks of {block}", blocked),
        ):
            line.append(f"{name} {graphed_microseconds(fn):.1f} µs")
        torch.backends.cuda.preferred_blas_library("cublaslt")  # may split the long inner dimension (split-K)
        try:
            for name, fn in (
                ("one bmm", lambda: torch.bmm(g, h.transpose(1, 2))),
                ("(h g^T)^T", lambda: torch.bmm(h, g.transpose(1, 2)).transpose(1, 2)),
            ):
                line.append(f"{name} cuBLASLt {graphed_microseconds(fn):.1f} µs")
        finally:
            torch.backends.cuda.preferred_blas_library("cublas")
        print(f"dW [S={S}, {width} x {i}], {N} columns: " + "; ".join(line))


def graphed_microseconds(fn, reps: int = 20) -> float:
    """Device µs of one fn() call, from a CUDA graph of ``reps`` calls (no launch overhead counted)."""
    steps = graphs.CapturedSteps()
    run = lambda: steps("timed", lambda: [fn() for _ in range(reps)])  # noqa: E731
    run()  # warm-up and capture
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    run()
    start.record()
    for _ in range(5):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / (5 * reps)


if __name__ == "__main__":
    stop_at_ctrl_c_in_one_line(main, "gpu_profile.py")
