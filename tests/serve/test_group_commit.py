"""Answers that arrive together share one durable commit (group commit), each on disk before its reply: a slow disk's
sync is paid once for everyone waiting (issue "The page at a real study's pace and rigour")."""

import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time


from nvldb_pl.serve.store import Store

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _store_with_questions(tmp_path, n):
    store = Store(str(tmp_path / "g.db"))
    store.claim({"items_sha256": "x"})
    store.add_session("s", None)
    return store, [store.add_question("s", "shared", [0, 1], 0, 1) for _ in range(n)]


def _open(store, qid):
    """check() of add_answer: the question still open (an answer already given to it refuses this one)."""
    q = store.question(qid)
    if q[5]:
        raise ValueError(f"question: {qid} is already answered")
    return (q[1],)


def test_answers_arriving_together_share_one_sync_each_on_disk_before_it_returns(tmp_path, monkeypatch):
    """12 answers at once on a disk whose sync takes 50 ms: fewer syncs than answers (one a group), every answer in
    the database file and in <db>.acked when its call returns, handed on in the order committed."""
    store, qids = _store_with_questions(tmp_path, 12)
    syncs, real_sync = [], Store._sync

    def slow_sync(self):
        syncs.append(time.perf_counter())
        time.sleep(0.05)
        real_sync(self)

    monkeypatch.setattr(Store, "_sync", slow_sync)
    handed, seqs, seen_on_disk, start = [], {}, {}, threading.Barrier(12)

    def answer(qid):
        start.wait()
        seq, _, _ = store.add_answer(qid, "s", 1, lambda: _open(store, qid), lambda s, q: handed.append(s))
        seqs[qid] = seq
        with sqlite3.connect(f"file:{tmp_path / 'g.db'}?mode=ro", uri=True) as probe:  # another reader: the file
            seen_on_disk[qid] = probe.execute("SELECT COUNT(*) FROM answers WHERE seq = ?", (seq,)).fetchone()[0]

    threads = [threading.Thread(target=answer, args=(q,)) for q in qids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs.values()) == list(range(1, 13))
    assert all(seen_on_disk[q] == 1 for q in qids)
    assert handed == sorted(handed) == list(range(1, 13))  # the learner's queue in the database's order
    assert 2 <= len(syncs) <= 6, len(syncs)  # one sync a group: the first answer alone, then the rest together
    assert int(open(tmp_path / "g.db.acked").read().split()[0]) == 12
    store.close()


def test_a_refused_answer_in_a_group_leaves_the_others_kept_and_writes_nothing_of_itself(tmp_path, monkeypatch):
    """Two answers to one question and one to another, together: the second answer to the question is refused (its
    error raised to its caller alone), the other two kept."""
    store, (q1, q2) = _store_with_questions(tmp_path, 2)
    real_sync = Store._sync
    monkeypatch.setattr(Store, "_sync", lambda self: (time.sleep(0.05), real_sync(self)))
    results, start = [], threading.Barrier(3)

    def answer(qid):
        start.wait()
        try:
            results.append(("kept", qid, store.add_answer(qid, "s", 2, lambda: _open(store, qid))[0]))
        except ValueError as err:
            results.append(("refused", qid, str(err)))

    threads = [threading.Thread(target=answer, args=(q,)) for q in (q1, q1, q2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r[:2] for r in results) == [("kept", q1), ("kept", q2), ("refused", q1)]
    assert [r[2] for r in results if r[0] == "refused"] == [f"question: {q1} is already answered"]
    assert store.rows("SELECT COUNT(*), COUNT(DISTINCT question) FROM answers")[0] == (2, 2)
    store.close()


def test_a_server_killed_under_load_loses_no_acknowledged_answer(tmp_path):
    """Eight people answering as fast as replies come; the server killed with SIGKILL mid-load: every answer whose
    reply said it was taken is in the database afterwards."""
    db = str(tmp_path / "k.db")
    port_probe = __import__("socket").socket()
    port_probe.bind(("127.0.0.1", 0))
    port = port_probe.getsockname()[1]
    port_probe.close()
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--db", db, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert "serving" in proc.stdout.readline()
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    acked, stop = [], threading.Event()

    def person():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", "/api/session", b"{}", {"Content-Type": "application/json"})
            sid = json.loads(conn.getresponse().read())["session"]
            while not stop.is_set():
                conn.request("GET", f"/api/question?session={sid}")
                q = json.loads(conn.getresponse().read())
                body = json.dumps({"session": sid, "question": q["question"], "choice": 1}).encode()
                conn.request("POST", "/api/answer", body, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                data = json.loads(reply.read())
                if reply.status == 200:
                    acked.append(data["answer"])
        except (OSError, http.client.HTTPException, ValueError, KeyError):
            return  # the server is gone

    people = [threading.Thread(target=person) for _ in range(8)]
    for t in people:
        t.start()
    while len(acked) < 60:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    stop.set()
    for t in people:
        t.join(timeout=30)
    with sqlite3.connect(db) as con:
        kept = {r[0] for r in con.execute("SELECT seq FROM answers")}
    assert len(acked) >= 60 and set(acked) <= kept, sorted(set(acked) - kept)
