"""Shared by the tests of runs that stop and go on (test_resume, test_stops, test_checkpoint_writes): a short cos
run, made in this process or in one of its own, and what it left."""

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
from types import SimpleNamespace

import torch

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MAIN = os.path.join(ROOT, "scripts", "main.py")
T = 300


def fit_args(root_dir, *settings: str, config: str = "cos.yaml") -> list:
    """The argument list of a quiet ``fit`` of ``configs/<config>`` with ``settings`` (``--field=value``) that writes
    under ``root_dir``."""
    config_path = os.path.join(ROOT, "configs", config)
    quiet = ["--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={root_dir}"]
    return ["fit", "--config", config_path, *settings, *quiet]


ARGS = [
    "fit",
    "--config",
    os.path.join(ROOT, "configs", "cos.yaml"),
    f"--data.rounds={T}",
    "--data.num_seeds=3",
    "--model.network.width=8",
    "--model.grad_steps=2",
    "--model.strategy=ts_osym",
    "--checkpoint.every_n_rounds=20",
    "--loop.log_every_n_rounds=5",
    "--trainer.enable_progress_bar=false",
]
SHORT = ["--data.rounds=24", "--checkpoint.every_n_rounds=8"]

# where a run of each layout keeps its checkpoints: (flags, folder under the run root); {root} is the root
LAYOUTS = {
    "tensorboard": ([], os.path.join("lightning_logs", "version_0", "checkpoints")),
    "no logger": (["--trainer.logger=false"], "checkpoints"),
    "checkpoint.dirpath": (["--checkpoint.dirpath={root}/ck"], "ck"),
    "csv logger": (
        ["--trainer.logger=lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir={root}/csv"],
        os.path.join("csv", "lightning_logs", "version_0", "checkpoints"),
    ),
}


def short_args(root, *extra: str) -> list:
    """The argument list of :data:`ARGS`'s run (every 20 rounds saved, logged every 5) writing under ``root``, then
    ``extra`` (a later ``--field=value`` wins)."""
    return [*ARGS, f"--trainer.default_root_dir={root}", *extra]


def _cmd(root, *extra):
    return [sys.executable, MAIN, *short_args(root, *extra)]


@contextlib.contextmanager
def _lightning_lines_dropped():
    """Lightning's logging handlers write to a sink meanwhile: they hold the stream they found at import, which pytest
    may have closed since (a test of this process imported Lightning first)."""
    handlers = [
        h
        for name in list(logging.root.manager.loggerDict)
        if name.split(".")[0] == "lightning"
        for h in logging.getLogger(name).handlers
        if isinstance(h, logging.StreamHandler)
    ]
    streams = [h.stream for h in handlers]
    for h in handlers:  # not setStream, which flushes the old stream (it may be closed)
        h.stream = io.StringIO()
    try:
        yield
    finally:
        for h, stream in zip(handlers, streams):
            h.stream = stream


def _in_process(capsys, root, *extra):
    """A run in this process (no 4 s of imports): its exit status and what it printed on stderr (not Lightning's own
    lines)."""
    from nvldb_pl.cli import run_cli

    capsys.readouterr()
    with _lightning_lines_dropped():
        code = run_cli([*ARGS, f"--trainer.default_root_dir={root}", *extra])
    return SimpleNamespace(returncode=code, stderr=capsys.readouterr().err)


def _made(root, *extra):
    """A run that must succeed and whose output is not read, made in this process (no 4 s of imports)."""
    from nvldb_pl.cli import run_cli

    with _lightning_lines_dropped():
        assert run_cli([*ARGS, f"--trainer.default_root_dir={root}", *extra]) == 0


def _run(root, *extra):
    """A run in a process of its own: its stderr (Lightning's own lines included) is read."""
    out = subprocess.run(_cmd(root, *extra), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _rounds_in(path):
    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["state_dict"]["rounds_done"])
    except Exception:  # noqa: BLE001 (not written yet)
        return -1


def _events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(folder)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _per_seed(root):
    """Per seed (id, R_T, weak R_T) from the newest summary.json under ``root`` (a resumed run that
    logs into a new folder writes its own)."""
    found = [os.path.join(d, "summary.json") for d, _, files in os.walk(root) if "summary.json" in files]
    with open(max(found, key=os.path.getmtime)) as fh:
        return [(x["seed"], x["cum_avg_regret"], x["cum_weak_regret"]) for x in json.load(fh)["seeds"]]


def _curve_rows(root):
    with open(os.path.join(root, "lightning_logs", "version_0", "curves.csv")) as fh:
        return fh.read()


def _files(root):
    """Every file under root, with its bytes. TensorBoard's event files included: Lightning's set-up
    opens one before a checkpoint can be checked, and a refused resume removes it again."""
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
