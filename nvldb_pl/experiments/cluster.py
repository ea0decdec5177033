"""The grid on a Ray cluster (``nvldb-reproduce --ray ADDRESS``): each (task, method) of the grid is one Ray task,
:func:`nvldb_pl.experiments.grid.run_grid` on its cell in a worker with the CPUs (and GPUs) it asks for and as many
torch threads. The runs land in the one ``--out`` layout (a folder every worker reads and writes: this machine's
disk, or a file system the nodes share), so the report, a rerun and ``--cell`` read them alike, and each seed's
result is the one-process grid's. A worker that dies is retried by Ray (:data:`RETRIES`), its run going on from its
last save; Ctrl-C or SIGTERM cancels what has not finished and says what did. Needs the ``ray`` extra."""

from __future__ import annotations

import itertools
import signal
import socket
import time
from typing import Callable, Optional

EXTRA = "pip install 'nvldb_pl[ray]'"
RETRIES = 3  # a worker that dies (killed, out of memory, its node lost): its run is started again this often
CONNECT_S = 10  # how long a cluster's address has to answer
STOP_WAIT_S = 30  # after Ctrl-C: how long a cancelled run has to save its round before it is killed


class GridStopped(Exception):
    """The grid stopped by Ctrl-C or SIGTERM: ``finished`` the runs done [(task, method)], ``left`` the others."""

    def __init__(self, signum: int, finished: list, left: list):
        super().__init__(signum)
        self.signum, self.finished, self.left = signum, finished, left


def add_ray_arguments(parser, each: str) -> None:
    """``--ray ADDRESS``, ``--ray-cpus N``, ``--ray-gpus G`` on a script's ``parser``; ``each``: what one Ray task
    runs, for the help (``(task, method)``)."""
    parser.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help=f"each {each} a Ray task on a cluster: auto (the one `ray start --head` started here), HOST:PORT or "
        "ray://HOST:PORT, or local (one started for this command); the ray extra",
    )
    parser.add_argument("--ray-cpus", type=int, default=1, metavar="N", help="CPUs (and torch threads) a run asks for")
    parser.add_argument(
        "--ray-gpus",
        type=float,
        default=None,
        metavar="G",
        help="GPUs a run asks for (default 1 with --accelerator gpu, else 0)",
    )


def gpus_asked(args) -> float:
    """``--ray-gpus``, or its default: 1 with ``--accelerator gpu``, else 0."""
    return args.ray_gpus if args.ray_gpus is not None else (1 if args.accelerator == "gpu" else 0)


def ray_module():
    """``ray``, or a ValueError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise ValueError(f"--ray: Ray is not installed; {EXTRA} installs it") from None
    return ray


def connect(address: str):
    """Join the cluster at ``address`` (``auto``: the one started here by ``ray start --head``; ``ray://host:port``
    or ``host:port``), or start one for this process (``local``); joined once a process (a second call finds it
    joined). Returns the ``ray`` module."""
    ray = ray_module()
    if ray.is_initialized():
        return ray
    if address not in ("auto", "local"):  # Ray retries an address where nothing answers for minutes: asked first
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=CONNECT_S).close()
        except (OSError, ValueError) as err:
            raise ValueError(
                f"--ray {address}: no Ray cluster answers there ({err}); give auto, local, HOST:PORT or "
                f"ray://HOST:PORT of a running cluster (`ray start --head` starts one)"
            ) from None
    try:
        ray.init(
            address=address,  # "local": a new cluster, never one already running here
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
    method) a Ray task (:func:`run_on_ray`); the same run dirs as run_grid returns."""
    names = list(itertools.product(grid["tasks"], grid["methods"]))
    done: dict = {}

    def finished(name, result):
        got, lines = result
        for line in lines:
            log(line)
        done.update(got)

    jobs = [(name, (grid, place, len(names), int(cpus))) for place, name in enumerate(names)]
    run_on_ray(address, _cell, jobs, cpus, gpus, finished, log)
    return done


def run_on_ray(
    address: str,
    fn: Callable,
    jobs: list[tuple],
    cpus: int,
    gpus: float,
    finished: Callable,
    log: Callable[[str], None] = print,
) -> None:
    """``fn(*args)`` for each ``(name, args)`` of ``jobs``, a Ray task of ``cpus`` CPUs and ``gpus`` GPUs each on the
    cluster at ``address`` (:func:`connect`); ``finished(name, result)`` in this process as each ends, in the order
    they end. A job's ValueError stops the rest and is raised naming the job (``name``: (task, method) or (task,
    config)); Ctrl-C or SIGTERM raises :class:`GridStopped` once the unfinished jobs were cancelled (each saved at
    its round where it could be within :data:`STOP_WAIT_S`)."""
    for flag, value, least in (("--ray-cpus", cpus, 1), ("--ray-gpus", gpus, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least:
            kind = "an integer >= 1" if flag == "--ray-cpus" else ">= 0"
            raise ValueError(f"{flag}: must be {kind}, got {value!r}")
    ray = connect(address)
    remote = ray.remote(fn).options(num_cpus=cpus, num_gpus=gpus, max_retries=RETRIES, retry_exceptions=False)
    pending: dict = {}
    ended: list = []
    stop: Optional[int] = None
    signals = [signal.SIGINT]

    def on_term(signum, frame):
        signals[0] = signum
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, on_term)
    start = time.perf_counter()
    try:
        pending = {remote.remote(*args): name for name, args in jobs}
        each = f"{cpus} CPU" + ("s" if cpus != 1 else "") + (f", {gpus:g} GPU" if gpus else "")
        log(f"[ray]   {len(jobs)} runs on {address}, {each} each")
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            name = pending.pop(ready[0])
            where = " ".join(str(x) for x in name)
            try:
                result = ray.get(ready[0])
            except ray.exceptions.RayTaskError as err:
                cause = getattr(err, "cause", None)
                if isinstance(cause, (ValueError, FileNotFoundError, FloatingPointError)):
                    raise type(cause)(f"{where}: {cause}") from None
                raise
            except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as err:
                raise ValueError(
                    f"{where}: its worker died {RETRIES + 1} times ({type(err).__name__}); the finished runs are "
                    f"kept, and the same command goes on from its last save"
                ) from None
            finished(name, result)
            ended.append(name)
            log(f"[ray]   {len(ended)} done, {len(pending)} running or waiting, {time.perf_counter() - start:.0f} s")
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
            for ref in pending:  # a job's error stopped the grid: the others too (a stop cancelled them already)
                ray.cancel(ref, force=True)
            ray.shutdown()
    if stop is not None:
        raise GridStopped(stop, ended, [name for name, _ in jobs if name not in ended])
