"""The CPU cores of one machine, shared by the package's runs on it.

torch takes one thread a core and its OpenMP threads spin while they wait, so two runs that each took every core
stall each other (docs/performance.md, "Threads"). Each CPU run therefore registers in one folder of the machine
(a file a process, locked while it lives: a killed run's file is known as dead and removed): a run whose thread
count was chosen for it ("auto") takes, every few seconds, its share of the cores the others leave,

    threads = max(1, (cores - threads of the fixed runs) // number of auto runs),

and a run given its count (``--threads``, ``OMP_NUM_THREADS``, or one thread for a small problem) keeps it and is
counted as that many cores. A run's per-seed results do not depend on its thread count (``tests/cli/test_names.py``),
so the share changes its speed, never its numbers.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import tempfile
import time
from typing import Optional

AUTO = "auto"


def default_folder() -> str:
    """Where the runs of this user on this machine register: ``$NVLDB_RUNS_DIR``, else a folder of the temp dir."""
    return os.environ.get("NVLDB_RUNS_DIR") or os.path.join(tempfile.gettempdir(), f"nvldb_pl-runs-{os.getuid()}")


def machine_cores() -> int:
    """The cores this process may run on (its affinity: ``taskset`` and cgroup cpusets included)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class SharedCores:
    """One run's registration. ``threads``: ``AUTO`` (take a share) or the fixed count it runs with.

    ``join()`` registers, ``share()`` gives the thread count to run with now (recounted at most every
    ``every_s`` seconds), ``leave()`` removes the registration. A folder that cannot be written makes the run
    keep ``start`` threads (nothing is shared, nothing fails)."""

    def __init__(self, threads, start: int, folder: Optional[str] = None, cores: Optional[int] = None, every_s=2.0):
        if threads != AUTO and not (isinstance(threads, int) and threads >= 1):
            raise ValueError(f"threads: {AUTO!r} or an integer >= 1, got {threads!r}")
        self.threads, self.start = threads, start
        self.folder = folder or default_folder()
        self.cores = cores or machine_cores()
        self.every_s = every_s
        self._fh, self._path, self._last, self._n = None, None, -float("inf"), start

    def join(self) -> None:
        try:
            os.makedirs(self.folder, exist_ok=True)
            # a name of its own (not through tempfile.mkstemp: the checkpoints' writes are checked not to use it)
            new = os.path.join(self.folder, f"{os.getpid()}-{secrets.token_hex(6)}.new")
            fh = os.fdopen(os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "w")
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fh.write(str(self.threads))
            fh.flush()
            path = new[: -len(".new")] + ".run"
            os.rename(new, path)  # seen by the others only once locked and written
        except OSError:
            return
        self._fh, self._path = fh, path

    def leave(self) -> None:
        if self._fh is None:
            return
        try:
            os.remove(self._path)
        except OSError:
            pass
        self._fh.close()
        self._fh = self._path = None

    def others(self) -> list[str]:
        """What the other live runs registered (``AUTO`` or a count); dead runs' files are removed."""
        out = []
        try:
            names = os.listdir(self.folder)
        except OSError:
            return out
        for name in names:
            path = os.path.join(self.folder, name)
            if not name.endswith(".run") or path == self._path:
                continue
            try:
                with open(path) as fh:
                    try:
                        fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    except BlockingIOError:  # held: its run lives
                        out.append(fh.read().strip())
                        continue
                    os.remove(path)  # nobody holds it: its run has ended without leaving
            except OSError:
                continue
        return out

    def share(self) -> int:
        """The threads this run takes now: its fixed count, or its share of the cores."""
        if self.threads != AUTO:
            return self.threads
        if self._fh is None:
            return self.start
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            others = self.others()
            fixed = sum(int(o) for o in others if o.isdigit())
            autos = 1 + sum(o == AUTO for o in others)
            self._n = min(self.start, max(1, (self.cores - fixed) // autos))
        return self._n
