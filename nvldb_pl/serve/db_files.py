"""The files that keep a study's database safe beside SQLite's own: the server's lock file (one server a database,
its holder named), ``<db>.acked`` (the last answer acknowledged, synced, checksummed) and the read-only check of an
existing database before anything is written to it (this server's kind, whole, holding every answer acknowledged).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
import urllib.parse
import zlib

from ..machinery.host import hold_file


def hold(path: str, refusal: str = "") -> object:
    """An exclusive lock on ``path`` (made if absent) for this process's lifetime, recording who holds it; a
    ValueError naming the holder where another process holds it (``refusal``: the message, ``{holder}`` in it;
    default, the server's). Returns the open file (closing it releases)."""
    fh = hold_file(path)
    if fh is None:
        with open(path) as other:
            holder = other.read().strip() or "another process"
        raise ValueError(
            (
                refusal
                or f"--db: {path[: -len('.lock')]} is in use by another server ({{holder}}); two servers on one "
                f"database would each learn half of the answers: stop it, or give another --db"
            ).format(holder=holder)
        ) from None
    fh.seek(0)
    fh.previous = fh.read()  # the last holder's line: put back by a start refused after it (:meth:`Store.abandon`)
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    fh.flush()
    return fh


def read_acked(path: str) -> int:
    """The last answer acknowledged, as ``<db>.acked`` records it (0: none, or a record cut short)."""
    try:
        with open(f"{path}.acked", "rb") as fh:
            seq, crc = fh.read(64).split()[:2]
        return int(seq) if zlib.crc32(seq) == int(crc) else 0
    except (OSError, ValueError):
        return 0


def write_acked(fd: int, seq: int) -> None:
    """Record in ``<db>.acked`` (open as ``fd``), synced, that answer ``seq`` is committed: its number and CRC-32, so
    that a record cut short reads as none (:func:`read_acked`)."""
    number = f"{seq:020d}".encode()
    os.pwrite(fd, number + b" " + f"{zlib.crc32(number):010d}\n".encode(), 0)
    os.fsync(fd)


def check_existing(path: str, acked: int) -> set:
    """A database file that exists: this server's kind, whole (SQLite's integrity check) and holding every answer
    acknowledged, read-only. Returns its tables (none: an empty database, made anew)."""
    probe = sqlite3.connect(f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in probe.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise ValueError(f"--db: {path} is an SQLite file of something else (tables {sorted(tables)})")
        check = probe.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            raise ValueError(
                f"--db: {path} is damaged (SQLite's integrity check: {str(check).splitlines()[0]}); restore it "
                f"from a backup (nothing was changed)"
            )
        held = probe.execute("SELECT MAX(seq) FROM answers").fetchone()[0] if "answers" in tables else None
        if acked > (held or 0):
            raise ValueError(
                f"--db: {path} holds answers up to #{held or 0}, but #{acked} was acknowledged ({path}.acked): the "
                f"database has lost acknowledged answers (damage to its write-ahead log?); restore it from a "
                f"backup (nothing was changed)"
            )
    finally:
        probe.close()
    return tables
