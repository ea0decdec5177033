"""The grid on a Ray cluster (``nvldb-reproduce --ray ADDRESS``): each (task, method) of the grid is one Ray task,
:func:`nvldb_pl.experiments.grid.run_grid` on its cell in a worker with the CPUs (and GPUs) it asks for and as many
torch threads. The runs land in the one ``--out`` layout (a folder every worker reads and writes: this machine's
disk, or a file system the nodes share), so the report, a rerun and ``--cell`` read them alike, and each seed's
result is the one-process grid's. A worker that dies is retried by Ray (:data:`RETRIES`), its run going on from its
last save; Ctrl-C or SIGTERM cancels what has not finished and says what did. Needs the ``ray`` extra."""

from __future__ import annotations

import itertools
import signal
import time
from typing import Callable, Optional

EXTRA = "pip install 'nvldb_pl[ray]'"
RETRIES = 3  # a worker that dies (killed, out of memory, its node lost): its run is started again this often
STOP_WAIT_S = 30  # after Ctrl-C: how long a cancelled run has to save its round before it is killed


class GridStopped(Exception):
    """The grid stopped by Ctrl-C or SIGTERM: ``finished`` the runs done [(task, method)], ``left`` the others."""

    def __init__(self, signum: int, finished: list, left: list):
        super().__init__(signum)
        self.signum, self.finished, self.left = signum, finished, left


def ray_module():
    """``ray``, or a ValueError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise ValueError(f"--ray: Ray is not installed; {EXTRA} installs it") from None
    return ray


def connect(address: str):
    """Join the cluster at ``address`` (``auto``: the one started here by ``ray start --head``; ``ray://host:port``
    or ``host:port``), or start one for this process (``local``). Returns the ``ray`` module."""
    ray = ray_module()
    try:
        ray.init(
            address=None if address == "local" else address,
            include_dashboard=False if address == "local" else None,
            logging_level="ERROR",
            log_to_driver=False,  # each run's lines come back with its result, in the grid's order of finishing
        )
    except ConnectionError as err:
        raise ValueError(
            f"--ray {address}: no Ray cluster found there ({' '.join(str(err).split())[:200]}); `ray start --head` "
            f"starts one on this machine, --ray local one for this command"
        ) from None
    return ray


def _cell(kwargs: dict, place: int, count: int, threads: int) -> tuple[dict, list[str]]:
    """In a worker: the grid's cell ``place`` of ``count``: its run dirs and the lines it logged."""
    from .grid import run_grid

    lines: list[str] = []
    return run_grid(**kwargs, cell=(place, count), threads=threads, log=lines.append), lines


def run_grid_on_ray(
    address: str, grid: dict, cpus: int = 1, gpus: float = 0, log: Callable[[str], None] = print
) -> dict[tuple[str, str], str]:
    """:func:`~nvldb_pl.experiments.grid.run_grid`'s keyword arguments ``grid`` (without ``cell``), each (task,
    method) a Ray task of ``cpus`` CPUs (its torch threads) and ``gpus`` GPUs on the cluster at ``address``
    (:func:`connect`); the same run dirs as run_grid returns. A run's ValueError stops the grid with it; Ctrl-C or
    SIGTERM raises :class:`GridStopped` once the unfinished runs were cancelled (each saved at its round where it
    could be within :data:`STOP_WAIT_S`)."""
    for name, value in (("--ray-cpus", cpus), ("--ray-gpus", gpus)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < (1 if name == "--ray-cpus" else 0):
            raise ValueError(f"{name}: must be {'an integer >= 1' if name == '--ray-cpus' else '>= 0'}, got {value!r}")
    names = list(itertools.product(grid["tasks"], grid["methods"]))
    ray = connect(address)
    remote = ray.remote(_cell).options(num_cpus=cpus, num_gpus=gpus, max_retries=RETRIES, retry_exceptions=False)
    pending: dict = {}
    done: dict = {}
    stop: Optional[int] = None
    signals = [signal.SIGINT]

    def on_term(signum, frame):
        signals[0] = signum
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, on_term)
    start = time.perf_counter()
    try:
        pending = {remote.remote(grid, place, len(names), int(cpus)): names[place] for place in range(len(names))}
        each = f"{cpus} CPU" + ("s" if cpus != 1 else "") + (f", {gpus:g} GPU" if gpus else "")
        log(f"[ray]   {len(names)} runs on {address}, {each} each")
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            where = pending.pop(ready[0])
            try:
                got, lines = ray.get(ready[0])
            except ray.exceptions.RayTaskError as err:
                cause = getattr(err, "cause", None)
                if isinstance(cause, (ValueError, FileNotFoundError, FloatingPointError)):
                    raise type(cause)(f"{where[0]} {where[1]}: {cause}") from None
                raise
            except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as err:
                raise ValueError(
                    f"{where[0]} {where[1]}: its worker died {RETRIES + 1} times ({type(err).__name__}); the finished "
                    f"runs are kept, and the same command goes on from its last save"
                ) from None
            for line in lines:
                log(line)
            done.update(got)
            log(f"[ray]   {len(done)} done, {len(pending)} running or waiting, {time.perf_counter() - start:.0f} s")
    except KeyboardInterrupt:
        stop = signals[0]
        for ref in pending:  # a cancelled run's KeyboardInterrupt saves its round (run_experiment)
            ray.cancel(ref)
        ray.wait(list(pending), num_returns=len(pending), timeout=STOP_WAIT_S)
        for ref in pending:
            ray.cancel(ref, force=True)
    finally:
        signal.signal(signal.SIGTERM, before)
        if ray.is_initialized():
            for ref in pending if stop is None else []:  # a run's error stopped the grid: the others too
                ray.cancel(ref, force=True)
            ray.shutdown()
    if stop is not None:
        raise GridStopped(stop, list(done), [n for n in names if n not in done])
    return done
