"""What the package asks of the machine: files written whole or not at all, a writable run
folder, the memory available (to refuse a run up front rather than fail mid-way), freed memory
kept for reuse (speed), and the software a run's numbers came from."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import subprocess
import tempfile
import zipfile
from contextlib import contextmanager
from typing import Optional

from ..maths.checks import available_memory_bytes, check_memory  # noqa: F401  (their old home)
from ..maths.seedwise import reads_without_sync  # noqa: F401  (its old home)


class CannotWrite(OSError):
    """A run's file could not be written (a full disk, a quota, a read-only file system): ``path``
    and the system's ``reason``; the file it would have replaced is as it was, and no part-written
    temporary file is left."""

    def __init__(self, path: str, err: OSError, message: Optional[str] = None):
        self.path, self.reason = path, err.reason if isinstance(err, CannotWrite) else err.strerror or str(err)
        if err.filename and (err.filename2 or not str(err.filename).startswith(path)):  # another file: whose disk
            self.reason += f": {err.filename}" + (f" -> {err.filename2}" if err.filename2 else "")
        super().__init__(
            message or f"{path}: cannot be written ({self.reason}); the file it would replace is kept as it was"
        )
        self.errno = err.errno


@contextmanager
def open_text(path: str, field: str):
    """A text file a user named, read as UTF-8: a file that is not text is a ValueError naming ``field`` and
    the file (Python's own error names neither)."""
    try:
        with open(path, encoding="utf-8") as fh:
            yield fh
    except UnicodeDecodeError as err:
        raise ValueError(f"{field}: {path} is not a UTF-8 text file ({err.reason} at byte {err.start})") from None


@contextmanager
def atomic_open(path: str, mode: str = "w"):
    """Open ``path`` for writing (``mode`` "w" or "wb") through a temporary file in the same
    folder, renamed over it once complete (and synced): never a half-written file, and an old
    one survives a failure (the temporary file is removed; :class:`CannotWrite`)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        raise CannotWrite(path, err) from err
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_keeping_previous(path: str, write) -> None:
    """``write(tmp)``, then ``tmp`` renamed to ``path``, the file it replaces kept as ``path.prev``. A
    write that fails removes ``tmp`` and raises :class:`CannotWrite`; ``path`` and ``path.prev`` stay."""
    tmp = f"{path}.tmp"
    try:
        write(tmp)
    except BaseException as err:  # (any failure: no part-written file stays)
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(err, OSError):
            raise CannotWrite(path, err) from err
        raise
    replace_keeping_previous(tmp, path)


def replace_keeping_previous(tmp: str, path: str) -> None:
    """Move the finished file ``tmp`` to ``path``, keeping the file it replaces as ``path.prev``."""
    if os.path.exists(path):
        os.replace(path, f"{path}.prev")
    os.replace(tmp, path)


def write_json_atomic(path: str, payload: dict) -> None:
    with atomic_open(path) as fh:
        json.dump(payload, fh, indent=2)


def read_json(path: str):
    """The JSON value of the file ``path``; a damaged or cut-short file raises ValueError naming it, in one line."""
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: damaged, not read (not valid JSON: {err})") from None


def checkpoint_problem(path: str) -> Optional[str]:
    """Why the checkpoint file at ``path`` cannot be read whole (None if it can): torch writes a zip
    archive, so a truncated or corrupted file fails to open or fails a member's CRC check."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (OSError, zipfile.BadZipFile) as err:
        return f"{type(err).__name__}: {err}"
    return None if bad is None else f"member {bad} fails its CRC check"


def claim_new_folder(parent: str, prefix: str = "version_") -> int:
    """The number N of a new ``<parent>/<prefix>N`` (above every N there), created by this process:
    ``os.mkdir`` is atomic, so two runs started at once into the same folder get two folders, where
    choosing N from a listing and creating it later would give both the same one."""
    os.makedirs(parent, exist_ok=True)
    taken = [int(d[len(prefix) :]) for d in os.listdir(parent) if d.startswith(prefix) and d[len(prefix) :].isdigit()]
    n = max(taken, default=-1) + 1
    while True:
        try:
            os.mkdir(os.path.join(parent, f"{prefix}{n}"))
            return n
        except FileExistsError:  # another run took it in the meantime
            n += 1


def hold_folder(folder: str):
    """This process's hold on a run ``folder`` while it runs there, so no other process goes on with the run
    at the same time: :func:`hold_file` of ``<folder>/.lock``."""
    return hold_file(os.path.join(folder, ".lock"))


def hold_file(path: str):
    """An exclusive ``flock`` of ``path`` (made if absent), which the system lets go when the process ends, however
    it ends. The open file to keep (close it to let go; opened for reading and appending, so that a holder may say
    who it is), or None when another process holds it. Where the system has no flock (Windows) nothing is held and
    every call gets a file."""
    fh = open(path, "a+")
    if not _flock(fh):
        fh.close()
        return None
    return fh


def hold_existing(path: str):
    """An exclusive ``flock`` of the existing file ``path``, opened read-only (nothing is written to it): the descriptor
    to keep (``os.close`` it to let go), or None when another process holds it (always one without flock)."""
    fd = os.open(path, os.O_RDONLY)
    if not _flock(fd):
        os.close(fd)
        return None
    return fd


def hold_dir(folder: str):
    """An exclusive ``flock`` of the folder itself (its open descriptor; nothing is made in it), which the system lets
    go when the process ends: the descriptor to keep (``os.close`` it to let go), or None when another process holds
    it. Where the system has no flock (Windows) nothing is held and every call gets one."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    if not _flock(fd):
        os.close(fd)
        return None
    return fd


def _flock(handle) -> bool:
    """An exclusive, non-blocking ``flock`` of an open file or descriptor: False where another process holds it
    (True without flock, as on Windows: nothing is held there)."""
    try:
        import fcntl
    except ImportError:
        return True
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def holders(folder: str) -> list[int]:
    """The other processes of this user that hold ``folder`` open (Linux's /proc; elsewhere none found)."""
    want, found = os.path.realpath(folder), []
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == want for fd in fds):
                found.append(int(pid))
        except OSError:  # another user's, or gone
            continue
    return found


def check_writable(root: str) -> None:
    """Fail before training if the run folder cannot be created or written."""
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as err:
        raise ValueError(f"trainer.default_root_dir: {root} is not a writable folder ({err.strerror})") from None
    check_folder_writable(root, "trainer.default_root_dir", "")


def check_folder_writable(folder: str, field: str, then: str) -> None:
    """A ValueError naming ``field`` where a file cannot be made in ``folder`` (``then``: what to do, after it)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"{field}: {folder} is not a writable folder ({err.strerror}){then}") from None


def folders_to_make(folder: str) -> list[str]:
    """The folders that do not exist yet on the way to ``folder`` (itself included), outermost first."""
    missing, path = [], os.path.abspath(folder)
    while not os.path.exists(path):
        missing.insert(0, path)
        path = os.path.dirname(path)
    return missing


def check_folder_can_be_made(folder: str, field: str) -> None:
    """Fail before training if ``folder`` is not a folder this process can write into, or make there:
    its nearest existing ancestor must be a writable folder. Creates nothing."""
    missing = folders_to_make(folder)
    path = os.path.dirname(missing[0]) if missing else os.path.abspath(folder)
    if not os.path.isdir(path):
        raise ValueError(f"{field}: {folder} cannot be made: {path} is a file, not a folder")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{field}: {folder} is not writable ({path} is not writable by this user)")


# glibc's mallopt parameters (malloc.h) and what keep_freed_memory sets them to
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES = 256 << 20  # a block below this comes from the heap, not from a fresh mmap
TRIM_THRESHOLD_BYTES = 1 << 30  # free memory at the heap's top kept up to this, not given back
_kept: Optional[bool] = None


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep freed memory for the next tensor of the same size (process-wide, once).

    A CPU round frees and allocates the same large temporaries (a history block's activations and
    gradients, about 1.3 MB each at S=20, m=32) thousands of times. glibc by default gives such
    blocks back to the system on free (mmap and heap trimming) and the next allocation faults every page
    in again. With the thresholds above the blocks are reused (the figures: docs/performance.md).
    The cost: the process keeps up to its peak heap, as a caching allocator does. Only speed changes;
    every result is the same to the bit.
    Returns whether the settings are in force (False where the C library is not glibc)."""
    global _kept
    if _kept is None:
        _kept = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                libc = ctypes.CDLL(None)
                _kept = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
                    libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
                )
            except (OSError, AttributeError):
                pass
    return _kept


def software() -> dict:
    """The software a run's numbers came from (summary.json's ``software``, a checkpoint's): this
    package, its git commit where it runs from a checkout (``+modified`` where ``nvldb_pl/`` has
    uncommitted changes), torch, lightning, numpy and Python; read once a process (its code is what
    it imported, whatever is edited after). A seed's trajectory is exact only for the same software:
    a change in the last bit of one product sends it down another one of the same distribution
    (README, commit be004a1), so results are compared with those of the same versions."""
    return dict(_read_software())


@functools.lru_cache(maxsize=None)
def _read_software() -> dict:
    import lightning
    import numpy
    import torch

    from nvldb_pl import __version__

    commit = git_commit(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # nvldb_pl/, above machinery/
    return {
        "nvldb_pl": __version__,
        **({"commit": commit} if commit else {}),
        "torch": str(torch.__version__),
        "lightning": str(lightning.__version__),
        "numpy": str(numpy.__version__),  # plain str: loads weights_only
        "python": platform.python_version(),
    }


def software_change(saved: Optional[dict]) -> Optional[str]:
    """What to say where a checkpoint's rounds were made with other software than this process runs
    (Python's own version aside), as for another device; None where the same (or not recorded)."""
    now = software()
    if not saved or all(saved.get(k) == now.get(k) for k in ("nvldb_pl", "commit", "torch", "lightning", "numpy")):
        return None
    return (
        f"ckpt_path: the checkpoint's rounds were made with {software_text(saved)}, and this run goes on with "
        f"{software_text(now)}: where the change reaches the arithmetic, each seed's rounds from here are not "
        f"those of a run made in one go with either (summary.json records the software of each part)"
    )


def run_parts(checkpoint: dict) -> list[dict]:
    """The parts a checkpoint's rounds were made in, first to last, each ``{"rounds": [first, last],
    "accelerator": ..., "software": ...}``: a run that went on with other software or on another device
    keeps what made each part (a checkpoint saved before parts were kept: its rounds as one part,
    with the device and software its last part recorded)."""
    if checkpoint.get("parts") is not None:
        return [dict(part) for part in checkpoint["parts"]]
    done = int(checkpoint["state_dict"]["rounds_done"])
    return (
        [{"rounds": [1, done], "accelerator": checkpoint.get("accelerator"), "software": checkpoint.get("software")}]
        if done
        else []
    )


def software_text(soft: dict) -> str:
    """One run's software (summary.json's ``software``) as a report or ``--version`` writes it."""
    sha, plus, mark = (soft.get("commit") or "").partition("+")  # the hash, and "+modified" where it was
    return (
        f"nvldb_pl {soft.get('nvldb_pl')}"
        + (f" at commit {sha[:12]}{plus}{mark}" if sha else "")
        + "".join(f", {k} {soft[k]}" for k in ("torch", "lightning", "numpy") if k in soft)
        + (f", Python {soft['python']}" if "python" in soft else "")
    )


def git_commit(package: str) -> Optional[str]:
    """HEAD of the git checkout whose top folder holds ``package``, with ``+modified`` where the
    package's files differ from it (a file not yet committed counts; one git ignores does not); None
    where it is not run from a checkout (installed into site-packages, even one inside another
    repository), or git is missing or fails."""
    top = os.path.dirname(package)

    def git(*args: str) -> str:
        # GIT_OPTIONAL_LOCKS=0: status leaves the index alone (no lock a user's own git command could meet)
        return subprocess.run(
            ["git", "-C", top, *args],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        ).stdout.strip()

    try:
        if os.path.realpath(git("rev-parse", "--show-toplevel")) != os.path.realpath(top):
            return None  # a folder inside some other repository: its commit is not this code's
        modified = git("status", "--porcelain", "--", os.path.basename(package))  # untracked modules too
        return git("rev-parse", "HEAD") + ("+modified" if modified else "")
    except (OSError, subprocess.SubprocessError):
        return None
