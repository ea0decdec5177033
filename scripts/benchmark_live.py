"""The live learner's cost of an answer as the answers add up: ``observe`` (and ``select``) times, p50 and p99,
in windows of answers, with the device named.

    python scripts/benchmark_live.py --answers 5000 --windows 100 500 1000 2000 5000
    python scripts/benchmark_live.py --config configs/live-full.yaml --answers 700 --windows 100 700
    python scripts/benchmark_live.py --page --answers 2000 --windows 100 1000 2000

A simulated person (a hidden linear taste, logistic noise) answers pairs of ``--offer`` items drawn afresh each
question from the unit sphere in ``--dim`` dimensions. Each window reports the answers just before it (the last
``--span`` of them): p50 and p99 of ``observe`` and of ``select`` in milliseconds, on this process's threads.
``--page``: the annotation server's own handlers instead (``Annotation.question`` and ``Annotation.answer`` on the
built-in catalog with its SQLite store in a temporary folder, objective ``--objective``; no HTTP): the reply's
cost without the network.
"""

import argparse
import os
import platform
import sys
import time

import numpy as np
import torch

from nvldb_pl.live import DuelingBandit

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "live.yaml"))
    ap.add_argument("--answers", type=int, default=5000)
    ap.add_argument("--windows", type=int, nargs="+", default=[100, 500, 1000, 2000, 5000])
    ap.add_argument("--span", type=int, default=50, help="answers a window reports (those just before it)")
    ap.add_argument("--dim", type=int, default=5)
    ap.add_argument("--offer", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--page", action="store_true", help="time the annotation server's question and answer")
    ap.add_argument("--objective", default="rank", choices=["rank", "regret"], help="with --page (default rank)")
    a = ap.parse_args(argv)
    for flag, value, least in (("--answers", a.answers, 1), ("--offer", a.offer, 2), ("--threads", a.threads, 1)):
        if value is not None and value < least:
            print(f"error: {flag}: must be an integer >= {least}, got {value}", file=sys.stderr)
            return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    windows = sorted(w for w in a.windows if w <= a.answers)
    if not windows or a.span < 1 or windows[0] < 1:
        print("error: --windows: at least one window <= --answers, every one >= 1, and --span >= 1", file=sys.stderr)
        return 2
    try:
        bandit = DuelingBandit.from_config(a.config, dim=a.dim, horizon=a.answers)  # a bad config or dim: named now
    except (ValueError, FileNotFoundError) as err:
        text = str(err)
        print(f"error: --dim{text[3:]}" if text.startswith("dim:") else f"error: --config: {text}", file=sys.stderr)
        return 2
    if a.page:
        return page(a, windows)
    rng = np.random.default_rng(0)
    taste = rng.standard_normal(a.dim)
    cpu = platform.processor() or platform.machine()
    print(
        f"{a.config}: {a.answers} answers, d={a.dim}, {a.offer} items a question; cpu ({cpu}), "
        f"{torch.get_num_threads()} torch thread(s)"
    )

    def step():
        x = rng.uniform(-1, 1, (a.offer, a.dim))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        t0 = time.perf_counter()
        i, j = bandit.select(x)
        t1 = time.perf_counter()
        won = rng.uniform() < 1 / (1 + np.exp(-3 * (x[i] - x[j]) @ taste))
        bandit.observe(x, i, j, int(won))
        return 1e3 * (time.perf_counter() - t1), 1e3 * (t1 - t0)

    time_answers(step, a.answers, windows, a.span, ("observe", "select"))
    return 0


def time_answers(step, answers: int, windows: list, span: int, names: tuple) -> None:
    """Run ``step`` (one answer: (ms of the first part, ms of the second)) ``answers`` times; print p50 and p99 of
    each over the last ``span`` answers at every window."""
    print(f"| answers | {names[0]} p50 ms | {names[0]} p99 ms | {names[1]} p50 ms | {names[1]} p99 ms |")
    print("|---|---|---|---|---|")
    first, second = [], []
    for n in range(1, answers + 1):
        a_ms, b_ms = step()
        first.append(a_ms)
        second.append(b_ms)
        if n in windows:
            f, s = np.array(first[-span:]), np.array(second[-span:])
            print(
                f"| {n} | {np.percentile(f, 50):.1f} | {np.percentile(f, 99):.1f} | "
                f"{np.percentile(s, 50):.1f} | {np.percentile(s, 99):.1f} |",
                flush=True,
            )


def page(a, windows) -> int:
    """--page: the server's question and answer handlers, timed per answer."""
    import tempfile

    from nvldb_pl.serve.annotation import Annotation
    from nvldb_pl.serve.items import builtin_catalog
    from nvldb_pl.serve.store import Store

    with tempfile.TemporaryDirectory() as folder:
        items = builtin_catalog()
        offer = None if a.objective == "rank" else min(a.offer, len(items.names))
        ann = Annotation(items, Store(os.path.join(folder, "a.db")), a.config, 0, offer, objective=a.objective)
        sid, taste = ann.new_session(), np.random.default_rng(0).standard_normal(len(items.features))
        print(
            f"{a.config}: the server's handlers, objective {a.objective}, {a.answers} answers, "
            f"{len(items.names)} items; cpu ({platform.processor() or platform.machine()}), "
            f"{torch.get_num_threads()} torch thread(s)"
        )

        def step():
            t0 = time.perf_counter()
            q = ann.question(sid)
            t1 = time.perf_counter()
            first = np.array([q["first"]["features"][f] for f in items.features]) @ taste
            second = np.array([q["second"]["features"][f] for f in items.features]) @ taste
            ann.answer(sid, q["question"], 1 if first > second else 2)
            return 1e3 * (time.perf_counter() - t1), 1e3 * (t1 - t0)

        time_answers(step, a.answers, windows, a.span, ("answer", "question"))
        ann.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
