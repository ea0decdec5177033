"""Many people answering the annotation page at once: answers a second, the reply's latency, and how soon every
answer is learned, with the machine named. Bounded in time and count, and on 127.0.0.1 only.

    python scripts/load_serve.py --people 1 5 20 --seconds 20
    python scripts/load_serve.py --people 20 --think 0.8   # people who read each question for 0.8 s
    python scripts/load_serve.py --people 20 --folder /srv/study   # the database on the disk a study would use

The header names the disk's sync time (the median of 20 fsyncs of a small file in the database's folder): every
answer is on disk before its reply, so a disk whose fsync takes 10-20 ms bounds a server that syncs once an answer
to tens of answers a second; answers arriving together share one sync (group commit). For each number of people, a
fresh ``scripts/serve.py`` (its own database in a new temporary folder under ``--folder``, the built-in catalog, the
default objective and config) on a free port of 127.0.0.1; each person is a thread with a connection of their own
that starts a session, then asks for a question and answers it (a simulated taste) as fast as the replies come
(or, with ``--think``, that many seconds after the question came: a person reading it), for ``--seconds`` or until
``--max-answers`` answers in all. A row: people, answers a second, the replies' p50,
p95 and p99 in milliseconds (every question and answer request), answers kept, answers learned when the people
stop, the seconds until the learner holds every answer, and the share of answers the learner took in a batch
(their steps taken after a later answer of the batch: answers that came faster than it learns one by one).
"""

import argparse
import contextlib
import http.client
import json
import os
import platform
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOKEN = "load-test-researcher"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(folder: str, extra: list) -> tuple:
    port = _free_port()
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--db", os.path.join(folder, "load.db")]
    cmd += ["--port", str(port), "--researcher-token", TOKEN, *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    if "serving" not in line:
        proc.kill()
        raise SystemExit(f"error: scripts/serve.py did not start: {line}{proc.communicate()[0]}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # the rest of its output, unread
    return proc, port


def _call(conn, method: str, url: str, body=None, token=None) -> tuple:
    """(status, JSON reply, seconds) of one request on a kept-alive connection."""
    start = time.perf_counter()
    headers = {"Content-Type": "application/json", **({"X-Token": token} if token else {})}
    conn.request(method, url, body=None if body is None else json.dumps(body).encode(), headers=headers)
    reply = conn.getresponse()
    data = json.loads(reply.read() or b"{}")
    return reply.status, data, time.perf_counter() - start


def _person(port, taste, until: float, budget: list, lock, latencies: list, errors: list, think: float) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    _, data, _ = _call(conn, "POST", "/api/session", {})
    sid = data["session"]
    while time.perf_counter() < until:
        with lock:
            if budget[0] <= 0:
                return
            budget[0] -= 1
        status, q, t1 = _call(conn, "GET", f"/api/question?session={sid}")
        if status != 200:
            errors.append(q)
            return
        shown = [np.array(list(q[s]["features"].values()), dtype=float) for s in ("first", "second")]
        f = [x @ taste[: len(x)] for x in shown]  # a taste over however many features the catalog has
        time.sleep(think)
        status, a, t2 = _call(
            conn, "POST", "/api/answer", {"session": sid, "question": q["question"], "choice": 1 + int(f[1] > f[0])}
        )
        if status != 200:
            errors.append(a)
        latencies.extend([t1, t2])


def _status(port: int) -> dict:
    return _call(http.client.HTTPConnection("127.0.0.1", port, timeout=60), "GET", "/api/status", token=TOKEN)[1]


def fsync_ms(folder: str, times: int = 20) -> float:
    """The median time of an fsync of a small file just written in ``folder``, in milliseconds."""
    path = os.path.join(folder, ".load_serve_fsync")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        spent = []
        for k in range(times):
            os.pwrite(fd, f"{k:08d}".encode() * 64, 0)
            start = time.perf_counter()
            os.fsync(fd)
            spent.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.remove(path)
    return 1000 * float(np.median(spent))


def level(people: int, seconds: float, max_answers: int, extra: list, think: float = 0.0, under=None) -> dict:
    with tempfile.TemporaryDirectory(dir=under) as folder:
        proc, port = _start(folder, extra)
        try:
            rng = np.random.default_rng(0)
            taste = rng.standard_normal(64)
            latencies, errors, lock, budget = [], [], threading.Lock(), [max_answers]
            until = time.perf_counter() + seconds
            start = time.perf_counter()
            threads = [
                threading.Thread(target=_person, args=(port, taste, until, budget, lock, latencies, errors, think))
                for _ in range(people)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if not latencies:
                raise SystemExit(f"error: no answer was taken: {errors[:1]}")
            wall = time.perf_counter() - start
            status = _status(port)
            kept, learned_then = status["answers"], sum(status["learned"].values())
            caught = time.perf_counter()
            while sum(_status(port)["learned"].values()) < kept and time.perf_counter() - caught < 120:
                time.sleep(0.05)
            lag = time.perf_counter() - caught
            learned = sum(_status(port)["learned"].values())
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        with contextlib.closing(sqlite3.connect(f"file:{os.path.join(folder, 'load.db')}?mode=ro", uri=True)) as db:
            waited = db.execute("SELECT COUNT(*) FROM answers WHERE learned = 1 AND train = 0").fetchone()[0]
    ms = np.array(latencies) * 1000
    return {
        "people": people,
        "answers_per_s": kept / wall,
        "p50": float(np.percentile(ms, 50)),
        "p95": float(np.percentile(ms, 95)),
        "p99": float(np.percentile(ms, 99)),
        "kept": kept,
        "learned_at_stop": learned_then,
        "learned": learned,
        "catch_up_s": lag,
        "batched": waited / max(learned, 1),
        "errors": len(errors),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--people", type=int, nargs="+", default=[1, 5, 20])
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the people answer at each level")
    ap.add_argument("--max-answers", type=int, default=5000, help="answers at most, at each level")
    ap.add_argument("--think", type=float, default=0.0, help="seconds a person reads a question before answering (0)")
    ap.add_argument("--folder", help="where the databases are made (default: the system's temporary folder)")
    ap.add_argument("serve_args", nargs="*", help="more arguments for scripts/serve.py (after --)")
    a = ap.parse_args(argv)
    if a.folder is not None and not os.path.isdir(a.folder):
        print(f"error: --folder: {a.folder} is not a folder", file=sys.stderr)
        return 2
    if any(n < 1 for n in a.people) or a.seconds <= 0 or a.max_answers < 1:
        print("error: --people, --seconds and --max-answers must be positive", file=sys.stderr)
        return 2
    if not 0 <= a.think <= 60:
        print(f"error: --think: seconds from 0 to 60, got {a.think}", file=sys.stderr)
        return 2
    cpu = platform.processor() or platform.machine()
    pace = f"reading each question {a.think:g} s" if a.think else "answering as fast as the replies come"
    where = a.folder or tempfile.gettempdir()
    print(
        f"# scripts/serve.py on 127.0.0.1, {os.cpu_count()} CPU cores ({cpu}), {a.seconds:g} s a level, people {pace}; "
        f"databases in {where}, whose disk syncs (fsync) in {fsync_ms(where):.2f} ms"
    )
    print(
        "| people | answers/s | reply p50 ms | p95 ms | p99 ms | answers kept | learned at stop | all learned after s "
        "| learned in a batch, steps after a later answer |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in a.people:
        r = level(n, a.seconds, a.max_answers, a.serve_args, a.think, a.folder)
        print(
            f"| {n} | {r['answers_per_s']:.1f} | {r['p50']:.0f} | {r['p95']:.0f} | {r['p99']:.0f} | {r['kept']} | "
            f"{r['learned_at_stop']} | {r['catch_up_s']:.1f} | {100 * r['batched']:.0f}% |"
            + (f" {r['errors']} refused" if r["errors"] else ""),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
