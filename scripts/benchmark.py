"""Throughput of the vectorized loop against the straightforward per-seed loop (nvldb_pl/reference.py).

    python scripts/benchmark.py --task cos --seeds 20 --rounds 1000 --naive-seeds 2
    python scripts/benchmark.py --accelerator gpu --precision 32-true bf16-mixed --naive-seeds 0

Prints seed-rounds/s of both (measured in the same process, one after the other), their ratio,
and the vectorized loop's time split: training (Adam steps), refit (theta Newton solve incl. the
history forward pass), Gram upkeep, arm selection, and the rest (stream, Lightning, logging).
The naive loop's cost per seed-round does not depend on how many seeds it runs (one at a time),
so ``--naive-seeds`` only trades benchmark time against noise.
"""

import argparse
import time

import lightning.pytorch as pl
import torch

from nvldb_pl.learners.settings import merged
from nvldb_pl.environments.stream import StreamSpec
from nvldb_pl.reference import run_seed
from nvldb_pl.machinery.devices import BLAS_LIBRARIES, check_precision, use_blas_library
from nvldb_pl.experiments.arguments import check_positive
from nvldb_pl.machinery.history import resolve_history_pass
from nvldb_pl.maths.network import ACTIVATIONS
from nvldb_pl.loop.run import check_placement, run_experiment, stop_at_ctrl_c_in_one_line


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="cos")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--grad-steps", type=int, default=20)
    p.add_argument("--strategy", default="ucb_asym")
    p.add_argument(
        "--activation",
        nargs="+",
        default=[None],
        choices=list(ACTIVATIONS),
        help="model.network.activation, one run each (default: the learner's default)",
    )
    p.add_argument("--w-reg", type=float, default=None, help="model.w_reg (default: the learner's default)")
    p.add_argument("--naive-seeds", type=int, default=2, help="seeds for the naive loop (0: skip it)")
    p.add_argument("--precision", nargs="+", default=["32-true"], help="e.g. 32-true bf16-mixed")
    p.add_argument("--accelerator", default="cpu", choices=["cpu", "gpu"], help="device of the vectorized loop")
    p.add_argument(
        "--backward",
        nargs="+",
        default=["manual"],
        choices=["manual", "autograd"],
        help="model.compute.backward: manual and/or autograd",
    )
    p.add_argument(
        "--history-pass",
        nargs="+",
        default=["auto"],
        choices=["auto", "chunked", "full", "masked", "graphed"],
        help="model.compute.history_pass: how each Adam step walks the history",
    )
    p.add_argument(
        "--matmul-precision",
        default="highest",
        choices=["highest", "high", "medium"],
        help="torch.set_float32_matmul_precision for the float32 runs (high: TF32 on a GPU that has it)",
    )
    p.add_argument(
        "--blas",
        default="default",
        choices=BLAS_LIBRARIES,
        help="on a GPU, torch's BLAS library (torch.backends.cuda.preferred_blas_library)",
    )
    p.add_argument(
        "--progress-value",
        default="host",
        choices=["host", "device"],
        help="where the progress bar's R/t lives: host (the package's way) or device (a float given to "
        "self.log: Lightning reads it on the host after every batch, on a GPU a wait a round; for a "
        "paired measurement of that wait)",
    )
    p.add_argument(
        "--unsynced",
        action="store_true",
        help="on a GPU, time the run as the CLI runs it: no waits for the device around the timed "
        "sections (the split then counts kernel launches only)",
    )
    a = p.parse_args()
    try:  # every setting checked before the first timed run; a config error ends in one line, not a traceback
        check_placement(a.accelerator)
        for precision in a.precision:
            check_precision(precision, field="--precision")
        for flag, value in (("--seeds", a.seeds), ("--rounds", a.rounds)):
            check_positive(flag, value)
        use_blas_library(a.blas, a.accelerator)
        if a.naive_seeds < 0:
            raise ValueError(f"--naive-seeds: must be >= 0, got {a.naive_seeds}")
        # a Ctrl-C: one line and exit 130; the figures above are those of the runs that finished
        stop_at_ctrl_c_in_one_line(lambda: benchmark(a), "benchmark.py")
    except (ValueError, FileNotFoundError, FloatingPointError) as err:
        p.error(str(err))


def benchmark(a) -> None:
    """Time each precision x backward x history pass, then the naive loop; print rates and splits."""
    model = {"network": {"width": a.width, "depth": a.depth}, "grad_steps": a.grad_steps, "strategy": a.strategy}
    if a.w_reg is not None:
        model["w_reg"] = a.w_reg
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; task={a.task} S={a.seeds} T={a.rounds} "
        f"m={a.width} L={a.depth} n={a.grad_steps} {a.strategy}"
    )
    torch.set_float32_matmul_precision(a.matmul_precision)
    if a.progress_value == "device":  # R/t given to self.log as a float, which Lightning puts on the module's device
        log = pl.LightningModule.log
        pl.LightningModule.log = lambda self, name, value, *args, **kwargs: log(
            self, name, float(value) if torch.is_tensor(value) else value, *args, **kwargs
        )
    results = {}
    runs = [(p_, b_, h_, a_) for p_ in a.precision for b_ in a.backward for h_ in a.history_pass for a_ in a.activation]
    for precision, backward, walk, activation in runs:
        summary, module = run_experiment(
            {"task": a.task, "rounds": a.rounds, "num_seeds": a.seeds, "seed": 0},
            merged(
                model,
                {"compute": {"backward": backward, "history_pass": walk}},
                {"network": {"activation": activation}} if activation else {},
            ),
            precision=precision,
            accelerator=a.accelerator,
            sync_timings=not a.unsynced,
        )
        walk = resolve_history_pass(
            walk, torch.device("cuda" if a.accelerator == "gpu" else "cpu"), None
        )  # auto's choice
        precision = (
            f"{precision}, {backward}, {module.hparams.network['activation']}"
            + ("" if walk == "chunked" else f", {walk}")
            + (", unsynced" if a.unsynced else "")
            + ("" if a.matmul_precision == "highest" else f", matmul {a.matmul_precision}")
            + ("" if a.blas == "default" else f", blas {a.blas}")
            + ("" if a.progress_value == "host" else ", R/t on the device")
        )
        wall, tm = summary["wall_seconds"], summary["timings_seconds"]
        rate = a.seeds * a.rounds / wall
        results[precision] = rate
        rest = wall - sum(tm.values())
        print(
            f"vectorized [{precision}] on {summary['device']}: {rate:8.1f} seed-rounds/s  wall {wall:7.1f}s  R(T)/T {summary['R_T_over_T_mean']:.3f}"
        )
        for name, sec in list(tm.items()) + [("other (stream, Lightning, logging)", rest)]:
            print(f"    {name:<36s} {sec:8.2f}s  {100 * sec / wall:5.1f}%")
    if a.naive_seeds:
        spec = StreamSpec(task=a.task, rounds=a.rounds, num_seeds=a.naive_seeds, base_seed=0)
        start = time.perf_counter()
        for s in range(a.naive_seeds):
            run_seed(spec, s, **model)
        wall = time.perf_counter() - start
        naive = a.naive_seeds * a.rounds / wall
        print(f"naive per-seed loop: {naive:8.1f} seed-rounds/s  wall {wall:7.1f}s ({a.naive_seeds} seeds)")
        for precision, rate in results.items():
            print(f"speed-up [{precision}]: {rate / naive:.1f}x")


if __name__ == "__main__":
    main()
