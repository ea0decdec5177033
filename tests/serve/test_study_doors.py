"""The page for a paid study, its doors (issue "The page, safe and complete for a paid study"): each request that got
through before is refused now, over HTTP. A study's ranking is not shown to its participants, nor to anyone naming a
session that is not one; one invite link is one session; a re-invite or a withdrawal ends the old link and its session;
a body without its length (chunked) is refused before it is read; control and direction characters reach no export."""

import csv
import io
import itertools
import socket

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install -e '.[serve]')")
pytest.importorskip("httpx", reason="httpx (FastAPI's test client) is not installed")

from tests.serve.test_serve_security import RESEARCHER, _answer, _client  # noqa: E402

AUTH = {"X-Token": RESEARCHER}


def test_a_studys_ranking_is_closed_to_participants_and_to_a_made_up_session(tmp_path):
    """It was open: GET /api/ranking?session=x (any x) and /api/ranking.csv?session=x returned the whole ranking with
    no credential, even in an invite-only study, and participants saw the ranking everyone's answers made."""
    c, ann = _client(tmp_path, questions_per_person=5)
    sid = c.post("/api/session", json={"invite": ann.invite("alice")}).json()["session"]
    assert _answer(c, sid).status_code == 200
    for url in ("/api/ranking", "/api/ranking.csv"):
        for params in ({"session": "x"}, {"session": "0" * 32}, {"session": sid}):
            r = c.get(url, params=params)
            assert r.status_code == 403 and r.json()["error"].startswith("ranking: this study does not show"), (url, r)
        assert c.get(url, params={"session": sid}, headers=AUTH).status_code == 200  # the researcher's link
    assert c.get("/api/question", params={"session": sid}).json()["ranking"] is False  # the page hides its tab


@pytest.mark.parametrize("show", [None, True])
def test_a_shown_ranking_needs_a_real_session(tmp_path, show):
    c, ann = _client(tmp_path, show_ranking=show)  # None: no invites, so shown (as before)
    sid = c.post("/api/session", json={}).json()["session"]
    assert _answer(c, sid).status_code == 200
    for url in ("/api/ranking", "/api/ranking.csv"):
        assert c.get(url, params={"session": sid}).status_code == 200
        for fake in ("x", "0" * 32):
            r = c.get(url, params={"session": fake})
            assert r.status_code == 404 and r.json()["error"].startswith("session: not a session"), (url, fake)
    assert c.get("/api/question", params={"session": sid}).json()["ranking"] is True


def test_one_invite_link_is_one_session_with_one_goal(tmp_path):
    """It made a new session at every POST: one link, unlimited sessions, each with its own goal (goal 5, 15 taken)."""
    c, ann = _client(tmp_path, questions_per_person=5)
    link = ann.invite("alice")
    sids = {c.post("/api/session", json={"invite": link}).json()["session"] for _ in range(3)}
    assert len(sids) == 1
    (sid,) = sids
    taken = 0
    while not c.get("/api/question", params={"session": sid}).json().get("done"):
        assert _answer(c, sid).status_code == 200
        taken += 1
    again = c.post("/api/session", json={"invite": link}).json()["session"]
    assert (taken, again) == (5, sid)
    assert c.get("/api/question", params={"session": again}).json()["done"] is True
    assert ann.store.count_answers() == 5


@pytest.mark.parametrize("how", ["re-invite", "withdraw"])
def test_a_replaced_or_withdrawn_invite_ends_its_link_and_its_session(tmp_path, how):
    """A re-invite left the old link's sessions answering, and no command removed an invite."""
    c, ann = _client(tmp_path)
    old = ann.invite("alice")
    sid = c.post("/api/session", json={"invite": old}).json()["session"]
    assert _answer(c, sid).status_code == 200
    q = c.get("/api/question", params={"session": sid}).json()["question"]
    new = ann.invite("alice") if how == "re-invite" else ann.withdraw("alice")
    for r in (
        c.get("/api/question", params={"session": sid}),
        c.post("/api/answer", json={"session": sid, "question": q, "choice": 1}),
        c.post("/api/undo", json={"session": sid}),
    ):
        assert r.status_code == 403 and r.json()["error"].startswith("session: its invite was replaced or withdrawn")
    r = c.post("/api/session", json={"invite": old})
    assert r.status_code == 403 and r.json()["error"].startswith("invite: not an invite of this study")
    assert c.post("/api/session", json={}).status_code == 403  # the study stays invite-only
    assert ann.store.count_answers() == 1  # the answer given stays
    if how == "re-invite":
        fresh = c.post("/api/session", json={"invite": new}).json()["session"]
        assert fresh != sid and _answer(c, fresh).status_code == 200
    with pytest.raises(ValueError, match="--withdraw: 'bob' has no invite in this study"):
        ann.withdraw("bob")


def test_a_chunked_or_unsized_body_is_refused_before_it_is_read(tmp_path):
    """A chunked request body skipped the size limit (a 200 MB POST took the server from 390 MB to 1 GB)."""
    c, ann = _client(tmp_path)

    def chunks():
        for _ in range(4):
            yield b"x" * 40_000

    r = c.post("/api/session", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 411 and r.json()["error"].startswith("body: give its Content-Length")
    assert ann.store.count_answers() == 0 and c.post("/api/session", json={}).status_code == 200


def test_a_chunked_body_over_a_real_socket_gets_411_at_once(tmp_path):
    """The same over HTTP/1.1 on a socket, as a client that sends chunks for ever would: the reply comes before the
    body (the server reads none of it)."""
    import threading

    import uvicorn

    from nvldb_pl.serve.app import make_app

    _, ann = _client(tmp_path)
    server = uvicorn.Server(uvicorn.Config(make_app(ann, researcher_token=RESEARCHER), log_level="warning"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port = sock.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        for _ in range(100):
            if server.started:
                break
            thread.join(0.05)
        head = b"POST /api/session HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        client.sendall(head + b"Content-Type: application/json\r\n\r\n" + b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
        reply = client.recv(4096).decode()
        assert reply.startswith("HTTP/1.1 411"), reply
        client.close()
    finally:
        server.should_exit = True
        thread.join(10)


def test_control_and_direction_characters_reach_no_export(tmp_path):
    """NUL and right-to-left marks passed into the CSV cells (a cell that reads other than it is)."""
    f = tmp_path / "items.csv"
    f.write_text("name,x,y\ngood\u202eevil,1,0\nnul\x00here,2,1\nplain,3,3\n", encoding="utf-8")
    from nvldb_pl.serve.items import read_items

    c, ann = _client(tmp_path, read_items(str(f)), offer=None)
    r = c.post("/api/session", json={"annotator": "al\u202eice"})
    assert r.status_code == 422 and r.json()["error"].startswith("annotator: a name of 1 to 100 printable")
    assert c.post("/api/session", json={"annotator": "nul\x00"}).status_code == 422
    sid = c.post("/api/session", json={"annotator": "alice"}).json()["session"]
    for _ in range(3):
        assert _answer(c, sid).status_code == 200
    for url in ("/api/answers.csv", "/api/ranking.csv"):
        text = c.get(url, headers=AUTH).text
        assert not any(ch in text for ch in "\x00\u202e"), url
        cells = {cell for row in csv.reader(io.StringIO(text)) for cell in row}
        assert {"goodevil", "nulhere"} <= cells or url == "/api/answers.csv", cells


def test_serve_script_withdraws_only_an_invite_it_has_and_a_refused_start_leaves_no_file(tmp_path, capsys):
    from tests.helpers.script_loader import load_script

    serve = load_script("serve")
    db = tmp_path / "s.db"
    assert serve.main(["--db", str(db), "--port", "0", "--withdraw", "bob"]) == 2
    assert "error: --withdraw: 'bob' has no invite in this study" in capsys.readouterr().err
    assert serve.main(["--db", str(db), "--port", "0", "--withdraw", "bob", "--invite", "bob"]) == 2
    assert "error: --withdraw/--invite: ['bob'] given to both; give one" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):
        serve.main(["--show-ranking", "--hide-ranking"])


def test_a_busy_port_is_refused_and_the_server_exits_leaving_no_file(tmp_path):
    """It printed the error and never exited (the learner's process, started before the bind, kept it alive)."""
    import os
    import subprocess
    import sys

    from tests.test_readme import ROOT

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    db = tmp_path / "s.db"
    try:
        res = subprocess.run(
            [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--db", str(db), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    finally:
        busy.close()
    assert res.returncode == 2 and f"error: --host/--port: cannot listen on 127.0.0.1:{port}" in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_person_who_reaches_the_goal_gets_the_studys_completion_code_and_link(tmp_path):
    url = "https://app.prolific.com/submissions/complete?cc=C1X2Y3"
    c, ann = _client(tmp_path, questions_per_person=3, completion_code="C1X2Y3", completion_url=url)
    sid = c.post("/api/session", json={}).json()["session"]
    q = c.get("/api/question", params={"session": sid}).json()
    assert "completion" not in q  # not before the goal
    for _ in range(3):
        assert _answer(c, sid).status_code == 200
    done = c.get("/api/question", params={"session": sid}).json()
    assert done["done"] is True and done["completion"] == {"code": "C1X2Y3", "url": url}


def test_a_completion_code_is_earned_by_answers_with_a_choice_and_not_by_failing_every_check(tmp_path):
    """Six "can't decide" clicks earned the code of a 6-question study, and so did answering every attention check the
    other way. Now the goal counts answers with a choice; a person who answered every check the other way is given
    --completion-code-failed (the study site's code for that outcome), and the exports say who consented and who
    completed."""
    from nvldb_pl.serve.items import builtin_catalog

    names = builtin_catalog().names
    url = "https://app.prolific.com/submissions/complete?cc=C1X2Y3"
    c, ann = _client(
        tmp_path,
        questions_per_person=4,
        completion_code="C1X2Y3",
        completion_url=url,
        completion_code_failed="FAILED9",
        attention=[f"{names[2]}>{names[5]}"],
        attention_every=2,
    )
    skipper, good, careless = (c.post("/api/session", json={}).json()["session"] for _ in range(3))
    for _ in range(6):
        assert _answer(c, skipper, choice=0).status_code == 200
    assert "done" not in c.get("/api/question", params={"session": skipper}).json()  # no answer given: no code

    def play(sid, right: bool):
        while True:
            q = c.get("/api/question", params={"session": sid}).json()
            if q.get("done"):
                return q
            pair = (q["first"]["index"], q["second"]["index"])
            known = 1 if pair == (2, 5) else 2 if pair == (5, 2) else None
            choice = 1 if known is None else known if right else 3 - known
            assert (
                c.post("/api/answer", json={"session": sid, "question": q["question"], "choice": choice}).status_code
                == 200
            )

    assert play(good, True)["completion"] == {"code": "C1X2Y3", "url": url}
    assert play(careless, False)["completion"] == {"code": "FAILED9", "url": None}
    by = {s["session"]: s for s in c.get("/api/reliability", headers=AUTH).json()["sessions"]}
    assert by[2]["completed"] and by[3]["completed"] and not by[1]["completed"] and by[1]["skips"] == 6
    assert by[3]["failed_checks"] == by[3]["attention"] == 2 and by[2]["failed_checks"] == 0
    assert all(by[n]["consented"] is False for n in by)  # (no --consent here)
    with pytest.raises(ValueError, match="--completion-code-failed: the code for failed attention checks"):
        _client(tmp_path, questions_per_person=4, completion_code_failed="F1")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"completion_code": "C1"}, "--completion-code/--completion-url: given at the end of the questions"),
        ({"completion_code": "no spaces", "questions_per_person": 3}, "--completion-code: 1 to 64 letters"),
        ({"completion_url": "javascript:alert(1)", "questions_per_person": 3}, "--completion-url: an http(s)://"),
    ],
)
def test_a_completion_code_or_link_that_cannot_work_is_refused(tmp_path, kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _client(tmp_path, **kw)


def test_a_study_with_consent_starts_a_session_only_with_it_and_records_it(tmp_path):
    text = "You will compare pairs.\n\nYour answers are kept."
    c, ann = _client(tmp_path, consent_text=text)
    assert c.get("/api/study").json() == {"consent": text, "researcher": False}
    assert c.get("/api/study", headers=AUTH).json()["researcher"] is True
    for body in ({}, {"consent": False}, {"consent": "yes"}):
        r = c.post("/api/session", json=body)
        assert r.status_code == 403 and r.json()["error"].startswith("consent: this study asks"), body
    sid = c.post("/api/session", json={"consent": True}).json()["session"]
    assert _answer(c, sid).status_code == 200
    assert c.get("/api/status", headers=AUTH).json()["consents"] == 1
    (tmp_path / "plain").mkdir()
    plain, _ = _client(tmp_path / "plain")
    assert plain.get("/api/study").json() == {"consent": None, "researcher": False}
    r = plain.post("/api/session", json={"consent": True})
    assert r.status_code == 422 and r.json()["error"].startswith("consent: this study asks for none")


def test_an_invited_person_consents_once_for_their_one_session(tmp_path):
    c, ann = _client(tmp_path, consent_text="Agree?")
    link = ann.invite("alice")
    assert c.post("/api/session", json={"invite": link}).status_code == 403
    sid = c.post("/api/session", json={"invite": link, "consent": True}).json()["session"]
    assert c.post("/api/session", json={"invite": link, "consent": True}).json()["session"] == sid
    assert ann.store.consents() == 1


@pytest.mark.parametrize("text", ["", "   ", "a\x00b", "x" * 20001])
def test_a_consent_text_that_cannot_be_shown_is_refused(tmp_path, text):
    with pytest.raises(ValueError, match="--consent: a text of 1 to 20000 printable characters"):
        _client(tmp_path, consent_text=text)


@pytest.mark.parametrize("balance", [False, True])
def test_balanced_sides_put_the_learners_first_pick_on_either_side_and_record_it_as_shown(tmp_path, balance):
    """The learner's first pick was always on the left: a person's leaning to one side passed for a preference.
    With balance_sides it is on the left or the right at random (seeded by the question); the answer and the export
    name the item as shown, and what the person preferred is what they clicked."""
    c, ann = _client(tmp_path, offer=None, balance_sides=balance)
    picks = itertools.cycle([(0, 1), (2, 3)])  # the learner's picks: its first item first (never one pair twice)
    ann._select = lambda key, offer: next(picks)
    sid = c.post("/api/session", json={}).json()["session"]
    lefts = []
    for _ in range(24):
        q = c.get("/api/question", params={"session": sid}).json()
        lefts.append(q["first"]["index"])
        assert {q["first"]["index"], q["second"]["index"]} in ({0, 1}, {2, 3})
        assert c.post("/api/answer", json={"session": sid, "question": q["question"], "choice": 1}).status_code == 200
    rows = list(csv.DictReader(io.StringIO(c.get("/api/answers.csv", headers=AUTH).text)))
    names = ann.items.names
    assert [r["preferred"] for r in rows] == [names[k] for k in lefts]  # the left one, as clicked
    second_left = sum(k in (1, 3) for k in lefts)  # the learner's second item shown on the left
    if balance:
        assert 6 <= second_left <= 18, lefts
    else:
        assert second_left == 0


def test_the_researcher_exports_answers_as_json_with_time_per_answer_and_a_bradley_terry_table(tmp_path):
    c, ann = _client(tmp_path, offer=None)
    sid = c.post("/api/session", json={"annotator": "alice"}).json()["session"]
    for _ in range(6):
        assert _answer(c, sid).status_code == 200
    for url in ("/api/answers.json", "/api/bradley-terry.csv"):
        assert c.get(url).status_code == 401  # the researcher's token
    rows = c.get("/api/answers.json", headers=AUTH).json()
    text = list(csv.DictReader(io.StringIO(c.get("/api/answers.csv", headers=AUTH).text)))
    assert len(rows) == len(text) == 6 and [r["preferred"] for r in rows] == [r["preferred"] for r in text]
    assert all(r["session"] == 1 and r["annotator"] == "alice" and 0 <= r["seconds"] < 60 for r in rows)
    assert [float(r["seconds"]) for r in text] == [r["seconds"] for r in rows]
    table = list(csv.DictReader(io.StringIO(c.get("/api/bradley-terry.csv", headers=AUTH).text)))
    assert len(table) == len(ann.items.names) and sum(int(r["wins"]) for r in table) == 6
    assert sum(int(r["comparisons"]) for r in table) == 12
    strengths = [float(r["log_strength"]) for r in table]
    assert strengths == sorted(strengths, reverse=True)


def test_repeats_ask_an_answered_pair_again_swapped_and_reliability_counts_agreement(tmp_path):
    """--repeat-every 3: every third question of a person is one they answered, sides swapped. A person who always
    prefers the item of lower index is consistent on every repeat, and two such persons agree on every pair both
    answered; one who always clicks the left is consistent on none (the sides were swapped)."""
    c, ann = _client(tmp_path, offer=None, repeat_every=3)
    picks = itertools.cycle([(0, 1), (2, 3), (4, 5), (1, 2)])  # the learner's picks, the same for both persons
    ann._select = lambda key, offer: next(picks)
    index = {n: k for k, n in enumerate(ann.items.names)}

    def play(sid, rule, n=12):
        asked = []
        for _ in range(n):
            q = c.get("/api/question", params={"session": sid}).json()
            pair = (q["first"]["index"], q["second"]["index"])
            asked.append(pair)
            choice = rule(pair)
            assert (
                c.post("/api/answer", json={"session": sid, "question": q["question"], "choice": choice}).status_code
                == 200
            )
        return asked

    lower = lambda pair: 1 if pair[0] < pair[1] else 2  # noqa: E731
    a, b = (c.post("/api/session", json={}).json()["session"] for _ in range(2))
    asked = play(a, lower)
    for k in (2, 5, 8, 11):  # the 3rd, 6th, ... question: an earlier pair, swapped
        assert (asked[k][1], asked[k][0]) in asked[:k], (k, asked)
    play(b, lower)
    assert c.get("/api/reliability").status_code == 401
    got = c.get("/api/reliability", headers=AUTH).json()
    by = {s["session"]: s for s in got["sessions"]}
    assert by[1]["repeats"] >= 4 and by[1]["consistent"] == by[1]["repeats"] and by[1]["answers"] == 12
    assert got["between"]["compared"] > 0 and got["between"]["agreeing"] == got["between"]["compared"]
    agreeing = got["between"]["agreeing"]
    play(c.post("/api/session", json={}).json()["session"], lambda pair: 2 if pair[0] < pair[1] else 1)  # the other
    play(c.post("/api/session", json={}).json()["session"], lambda pair: 1)  # always the left one
    got = c.get("/api/reliability", headers=AUTH).json()
    by = {s["session"]: s for s in got["sessions"]}
    assert by[3]["consistent"] == by[3]["repeats"] >= 4  # consistent, of the opposite taste
    assert by[4]["consistent"] < by[4]["repeats"]  # a swapped repeat answered the other way
    assert got["between"]["compared"] > got["between"]["agreeing"] >= agreeing
    assert index
    with pytest.raises(ValueError, match="--repeat-every: an integer >= 2"):
        _client(tmp_path, repeat_every=1)


def test_a_full_disk_is_a_503_in_one_line_on_the_page_and_in_the_log(tmp_path, capsys):
    """A full disk gave bare 500s (Internal Server Error, nothing in the log that said why)."""
    import sqlite3

    c, ann = _client(tmp_path)
    sid = c.post("/api/session", json={}).json()["session"]
    q = c.get("/api/question", params={"session": sid}).json()

    class Full:  # the database's connection on a full disk: an answer's transaction cannot be written
        def __init__(self, db):
            self.db = db

        def execute(self, sql, *args):
            if sql.startswith("INSERT INTO answers"):
                raise sqlite3.OperationalError("database or disk is full")
            return self.db.execute(sql, *args)

    ann.store.db = Full(ann.store.db)
    r = c.post("/api/answer", json={"session": sid, "question": q["question"], "choice": 1})
    assert r.status_code == 503 and r.json()["error"].startswith("the server cannot use its database or files")
    assert "database or disk is full" in r.json()["error"] and r.headers["x-frame-options"] == "DENY"
    assert "error: POST /api/answer: the server cannot use its database" in capsys.readouterr().err
    assert ann.store.count_answers() == 0


def test_a_refused_start_leaves_every_file_of_the_database_as_it_was(tmp_path):
    """A refused start rewrote the database's files though it said nothing changed: the lock file took the refused
    server's line, and a database made before this version's tables took them before the refusal. Now a refused
    start leaves every byte as it was, and a start that goes on brings the old file to this version's tables."""
    import hashlib
    import os
    import sqlite3
    import subprocess
    import sys

    from nvldb_pl.serve.annotation import Annotation
    from nvldb_pl.serve.items import builtin_catalog
    from nvldb_pl.serve.store import Store
    from tests.serve.test_serve import CONFIG, _answer_n
    from tests.test_readme import ROOT

    db = tmp_path / "a.db"
    ann = Annotation(builtin_catalog(), Store(str(db), exclusive=True), CONFIG, objective="rank", offer=None)
    _answer_n(ann, ann.new_session(), 4)
    ann.close()
    ann.store.close()
    con = sqlite3.connect(db)  # as a database made before these tables
    con.execute("DROP TABLE invite_sessions")
    con.execute("DROP TABLE consents")
    con.commit()
    con.close()  # (its log checkpointed and gone, as a server leaves it)

    def files():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(tmp_path.iterdir())}

    before = files()
    serve = [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--db", str(db), "--port", "0"]
    res = subprocess.run([*serve, "--seed", "3"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "was made with seed = 0, this server has 3" in res.stderr, res.stderr
    assert files() == before
    store = Store(str(db), exclusive=True)
    store.claim({"seed": 0})
    tables = {r[0] for r in store.rows("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"invite_sessions", "consents"} <= tables
    store.close()


@pytest.mark.parametrize("offer", [4, None])
def test_attention_checks_ask_a_known_pair_every_n_questions_and_reliability_counts_them(tmp_path, offer):
    """--attention "BETTER>WORSE" --attention-every 4: the 4th, 8th, 12th question of a person is that pair, sides at
    random; a person who answers it the known way is attentive on each. The checks' answers are learned by no one
    and left out of the Bradley-Terry table and the agreement between sessions (they were learned as any answer, and
    the known pair topped the Bradley-Terry export); one who answers them the other way is marked."""
    from nvldb_pl.serve.items import builtin_catalog

    names = builtin_catalog().names
    c, ann = _client(tmp_path, offer=offer, attention=[f"{names[2]}>{names[5]}"], attention_every=4)
    sid = c.post("/api/session", json={}).json()["session"]
    shown = []
    for _ in range(12):
        q = c.get("/api/question", params={"session": sid}).json()
        pair = (q["first"]["index"], q["second"]["index"])
        shown.append(pair)
        choice = 1 if pair == (2, 5) else 2 if pair == (5, 2) else 1
        assert (
            c.post("/api/answer", json={"session": sid, "question": q["question"], "choice": choice}).status_code == 200
        )
    assert all(set(shown[k]) == {2, 5} for k in (3, 7, 11)), shown
    row = c.get("/api/reliability", headers=AUTH).json()["sessions"][0]
    assert row["attention"] == 3 and row["attentive"] == 3 and row["failed_checks"] == 0 and row["answers"] == 12
    assert ann.bandits["shared"].num_observed == 9  # the three checks learned by no one
    checks = [r for r in c.get("/api/answers.json", headers=AUTH).json() if r["check"] == "attention"]
    assert len(checks) == 3 and all(r["learned"] is None for r in checks)
    bt = [r.split(",") for r in c.get("/api/bradley-terry.csv", headers=AUTH).text.splitlines()[1:]]
    assert sum(int(r[4]) for r in bt) == 2 * 9  # each of the 9 other answers compares two items; no check's
    other = c.post("/api/session", json={}).json()["session"]  # one who answers the checks the other way
    for _ in range(8):
        q = c.get("/api/question", params={"session": other}).json()
        pair = (q["first"]["index"], q["second"]["index"])
        choice = 2 if pair == (2, 5) else 1 if pair == (5, 2) else 1
        c.post("/api/answer", json={"session": other, "question": q["question"], "choice": choice})
    by = {s["session"]: s for s in c.get("/api/reliability", headers=AUTH).json()["sessions"]}
    assert by[2]["attention"] == 2 and by[2]["failed_checks"] == 2 and by[2]["attentive"] == 0


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"attention": ["Nope>Other"]}, "--attention: 'Nope>Other' is not BETTER>WORSE of two items"),
        ({"attention": ["x"]}, "--attention: 'x' is not BETTER>WORSE"),
        ({"attention_every": 5}, "--attention-every: asks the pairs of --attention; give them"),
    ],
)
def test_attention_checks_that_cannot_be_asked_are_refused(tmp_path, kw, message):
    with pytest.raises(ValueError, match=message):
        _client(tmp_path, **kw)


@pytest.mark.parametrize("flags, balanced", [([], True), (["--balance-sides"], True), (["--no-balance-sides"], False)])
def test_the_server_balances_sides_unless_told_not_to(tmp_path, monkeypatch, flags, balanced):
    """A study's default: the learner's first pick on either side (a leaning to one side is no preference);
    ``--no-balance-sides`` keeps it on the left."""
    from nvldb_pl.serve import annotation, command

    seen = {}

    def made(*args, **kwargs):
        seen.update(kwargs)
        raise ValueError("stopped here: the test reads the settings only")

    monkeypatch.setattr(annotation, "Annotation", made)  # main imports it when it runs
    assert command.main(["--db", str(tmp_path / "a.db"), "--port", "0", *flags]) == 2
    assert seen["balance_sides"] is balanced


@pytest.mark.parametrize(
    "kw, allowed, said",
    [
        ({"max_sessions": 2}, 2, "session: this study has its 2 sessions; no more start"),
        ({"max_sessions_per_client": 3}, 3, "session: 3 sessions were started from this address; no more start"),
    ],
)
def test_an_open_study_starts_no_more_sessions_than_it_allows(tmp_path, kw, allowed, said):
    """A script started 500 nameless sessions in 13 s (about 180 kB of learner each): an open study now takes at most
    --max-sessions in all and --max-sessions-per-client from one address; the next is a 429 that says so."""
    c, ann = _client(tmp_path, **kw)
    for _ in range(allowed):
        assert c.post("/api/session", json={}).status_code == 200
    r = c.post("/api/session", json={})
    assert r.status_code == 429 and r.json()["error"] == said
    assert ann.store.count_sessions() == allowed
    with pytest.raises(ValueError, match="--max-sessions: must be an integer >= 1, got 0"):
        _client(tmp_path, max_sessions=0)
