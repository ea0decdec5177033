"""Where a round makes the host wait for the GPU, found by stalling the device.

    python lab/diagnostics/gpu_wait_finder.py                  # the cos run's loop on the GPU torch sees
    python lab/diagnostics/gpu_wait_finder.py --device cpu     # the same table on a CPU (the stall a host sleep)

A round should only queue work on the GPU, so the host runs ahead of the device and a run takes
about max(host, device) time. On an H200 (lab/results/gpu/README.md) the cos run took about the sum,
as if something waited for the device every round, though torch's sync debug mode finds no wait
(tests/machinery/test_cuda.py): a copy from pageable memory, or a library's own synchronisation, are not
flagged there. This runs the loop twice with Lightning's SimpleProfiler, the second time with
``--stall-ms`` of GPU work queued at the start of every round (a chain of large matmuls, calibrated
on the device), and prints each profiled action's host time per round in both runs: the action
whose time grows by about the stall is where the host waits. On a CPU the stall is a host sleep
in the stalling callback itself (its own row grows): the table, not a finding.
"""

import argparse
import logging
import tempfile
import time
import warnings
from collections import defaultdict

import lightning.pytorch as pl
import torch
from lightning.pytorch.profilers import SimpleProfiler

from nvldb_pl.loop.callbacks import DuelingLoop
from nvldb_pl.loop.summary import RunSummary
from nvldb_pl.machinery.devices import check_accelerator
from nvldb_pl.experiments.arguments import check_positive
from nvldb_pl.loop.run import build, stop_at_ctrl_c_in_one_line
from nvldb_pl.loop.module import LearnerModule


class Stall(pl.Callback):
    """Queue about ``ms`` of device work at the start of every round after ``from_round``."""

    def __init__(self, ms: float, from_round: int):
        self.ms, self.from_round, self.reps, self.a = ms, from_round, 0, None

    def on_train_start(self, trainer, module):
        if self.ms <= 0 or module.device.type != "cuda":
            return
        self.a = torch.randn(4096, 4096, device=module.device)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            self.a @ self.a
        torch.cuda.synchronize()
        per = (time.perf_counter() - start) / 10 * 1000  # ms of one matmul
        self.reps = max(1, round(self.ms / per))

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self.ms <= 0 or module.t + 1 < self.from_round:
            return
        if self.a is None:  # CPU: the host itself stalls
            time.sleep(self.ms / 1000)
            return
        for _ in range(self.reps):
            self.a @ self.a


def host_times(args, stall_ms: float) -> dict:
    """Mean host seconds per round of every action SimpleProfiler recorded once a round or more."""
    dm, module = build(
        {"task": args.task, "rounds": args.rounds, "num_seeds": args.seeds, "seed": 0},
        {"network": {"width": args.width}, "compute": {"history_pass": "auto"}},
    )
    profiler = SimpleProfiler(dirpath=tempfile.mkdtemp(), filename="profile")  # its report to a file, not here
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator=args.device,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        profiler=profiler,
        callbacks=[Stall(stall_ms, args.from_round), DuelingLoop(50, save_curves=False), RunSummary(write=False)],
    )
    trainer.fit(LearnerModule(module), datamodule=dm)
    skip = args.from_round  # the rounds before the stall (and the graph's capture) are left out
    out = defaultdict(float)
    for action, durations in profiler.recorded_durations.items():
        if len(durations) >= args.rounds - 1:
            tail = durations[skip:]
            out[action] = sum(tail) / max(len(tail), 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="gpu", choices=["cpu", "gpu"])
    p.add_argument("--task", default="cos")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--rounds", type=int, default=80)
    p.add_argument("--from-round", type=int, default=20, help="the first round stalled (and timed)")
    p.add_argument("--stall-ms", type=float, default=20.0)
    a = p.parse_args()
    try:
        check_accelerator(a.device, field="--device", allowed=("cpu", "gpu"))
        for flag, value in (
            ("--seeds", a.seeds),
            ("--width", a.width),
            ("--rounds", a.rounds),
            ("--from-round", a.from_round),
            ("--stall-ms", a.stall_ms),
        ):
            check_positive(flag, value)
        if a.from_round >= a.rounds:
            raise ValueError(f"--from-round: must be below --rounds ({a.rounds}), got {a.from_round}")
    except ValueError as err:
        p.error(str(err))
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    name = torch.cuda.get_device_name(0) if a.device == "gpu" else "cpu"
    print(
        f"torch {torch.__version__} on {name}; task={a.task} S={a.seeds} m={a.width}, rounds {a.from_round}-{a.rounds} "
        f"timed, stall {a.stall_ms:g} ms of device work a round"
    )
    plain, stalled = host_times(a, 0.0), host_times(a, a.stall_ms)
    print(f"{'action (host ms a round)':72s} {'plain':>8s} {'stalled':>8s} {'grew':>8s}")
    for action in sorted(plain, key=lambda k: stalled.get(k, 0) - plain[k], reverse=True):
        s = stalled.get(action, float("nan"))
        print(f"{action[:72]:72s} {1000 * plain[action]:8.2f} {1000 * s:8.2f} {1000 * (s - plain[action]):8.2f}")


if __name__ == "__main__":
    stop_at_ctrl_c_in_one_line(main, "gpu_wait_finder.py")
