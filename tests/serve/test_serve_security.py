"""The page ready for a real study, its security side: exports that a spreadsheet cannot run, annotators
authenticated by their own links, no session id in an export, the Host header checked, the researcher's token for
what covers every annotator, and every out-of-range or oversized value a 4xx in one line that does not echo it."""

import csv
import io

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install -e '.[serve]')")
pytest.importorskip("httpx", reason="httpx (FastAPI's test client) is not installed")

from fastapi.testclient import TestClient  # noqa: E402

from nvldb_pl.serve.annotation import Annotation  # noqa: E402
from nvldb_pl.serve.app import make_app  # noqa: E402
from nvldb_pl.serve.items import builtin_catalog, read_items  # noqa: E402
from nvldb_pl.serve.store import Store  # noqa: E402
from tests.serve.test_serve import CONFIG  # noqa: E402

RESEARCHER = "r-secret-token"


def _client(tmp_path, items=None, **kw):
    ann = Annotation(items or builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG, **kw)
    app = make_app(ann, researcher_token=RESEARCHER, allowed_hosts={"127.0.0.1", "localhost", "testserver"})
    return TestClient(app), ann


def _answer(c, sid, choice=1):
    q = c.get("/api/question", params={"session": sid}).json()
    return c.post("/api/answer", json={"session": sid, "question": q["question"], "choice": choice})


def test_export_cells_a_spreadsheet_would_run_are_neutralized(tmp_path):
    f = tmp_path / "items.csv"
    f.write_text("name,x,y\n\"=cmd|' /C calc'!A0\",1,0\n+1+1,2,1\n-2+3,3,3\n@SUM(A1),4,0\nplain,5,2\n")
    c, _ = _client(tmp_path, read_items(str(f)), offer=None)
    sid = c.post("/api/session", json={"annotator": "=HYPERLINK(\"x\")"}).json()["session"]
    for _ in range(4):
        assert _answer(c, sid).status_code == 200
    auth = {"X-Token": RESEARCHER}
    answers = list(csv.reader(io.StringIO(c.get("/api/answers.csv", headers=auth).text)))
    ranking = list(csv.reader(io.StringIO(c.get("/api/ranking.csv", headers=auth).text)))
    cells = [cell for row in answers[1:] for cell in row[2:6] + row[7:8]] + [row[1] for row in ranking[1:]]
    assert any(cell.startswith("'=") for cell in cells) and any(cell.startswith("'@") for cell in cells)
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "-", "@")]


def test_an_invited_annotator_is_the_only_one_who_answers_as_them(tmp_path):
    c, ann = _client(tmp_path, per_annotator=True)
    alice, bob = ann.invite("alice"), ann.invite("bob")
    as_alice = c.post("/api/session", json={"invite": alice}).json()["session"]
    as_bob = c.post("/api/session", json={"invite": bob}).json()["session"]
    assert ann.learner_of(as_alice) == "alice" and ann.learner_of(as_bob) == "bob"
    for body in ({"annotator": "alice"}, {}, {"invite": "guess"}, {"invite": bob, "annotator": "alice"}):
        r = c.post("/api/session", json=body)
        assert r.status_code in (403, 422) and r.json()["error"].split(":")[0] in ("invite", "annotator"), body
    q = c.get("/api/question", params={"session": as_alice}).json()
    r = c.post("/api/answer", json={"session": as_bob, "question": q["question"], "choice": 1})
    assert r.status_code == 403 and ann.store.count_answers() == 0
    assert _answer(c, as_alice).status_code == 200 and ann.bandits["alice"].num_observed == 1


def test_no_session_id_leaves_the_server_in_an_export(tmp_path):
    c, ann = _client(tmp_path, per_annotator=True)
    sids = [c.post("/api/session", json={}).json()["session"] for _ in range(2)]
    for sid in sids:
        assert _answer(c, sid).status_code == 200
    text = c.get("/api/answers.csv", headers={"X-Token": RESEARCHER}).text
    assert not [sid for sid in sids if sid in text]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["session"], r["learner"]) for r in rows] == [("1", "session 1"), ("2", "session 2")]


def test_what_covers_every_annotator_needs_the_researchers_token(tmp_path):
    c, _ = _client(tmp_path)
    sid = c.post("/api/session", json={}).json()["session"]
    assert _answer(c, sid).status_code == 200
    for url in ("/api/answers.csv", "/api/status", "/api/ranking", "/api/ranking.csv"):
        assert c.get(url).status_code == 401, url
        assert c.get(url, headers={"X-Token": RESEARCHER}).status_code == 200, url
        assert c.get(url, params={"token": "wrong"}).status_code == 401, url
    assert c.get("/api/ranking", params={"session": sid}).status_code == 200  # the annotator's own view


def test_another_host_header_is_refused(tmp_path):
    c, _ = _client(tmp_path)
    r = c.get("/", headers={"Host": "attacker.example"})
    assert r.status_code == 400 and r.json()["error"].startswith("Host: this server answers to")
    assert c.get("/", headers={"Host": "127.0.0.1:8000"}).status_code == 200


def test_every_response_forbids_framing_and_carries_the_content_policy(tmp_path):
    c, _ = _client(tmp_path)
    for r in (c.get("/"), c.post("/api/session", json={}), c.get("/api/status")):
        assert r.headers["x-frame-options"] == "DENY" and r.headers["referrer-policy"] == "no-referrer"
        policy = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'sha256-" in policy and "unsafe" not in policy


@pytest.mark.parametrize(
    "how, status, start",
    [
        ("question 2**63", 404, "question: 9223372036854775808 was never asked"),
        ("question -1", 404, "question: -1 was never asked"),
        ("choice 1.0", 422, "choice: 1 (the first item), 2 (the second) or 0 (can't decide), got 1.0"),
        ("a 10 MB body", 413, "body: at most 65536 bytes"),
        ("a 50 kB session", 404, "session: not a session of this server"),
        ("a 100 kB question", 422, "question: a question number, got 'xxxxxxxx"),
    ],
)
def test_an_out_of_range_or_oversized_value_is_a_4xx_in_one_short_line(tmp_path, how, status, start):
    c, ann = _client(tmp_path)
    sid = c.post("/api/session", json={}).json()["session"]
    q = c.get("/api/question", params={"session": sid}).json()["question"]
    body = {"session": sid, "question": q, "choice": 1}
    if how == "question 2**63":
        body["question"] = 2**63
    elif how == "question -1":
        body["question"] = -1
    elif how == "choice 1.0":
        body["choice"] = 1.0
    elif how == "a 50 kB session":
        body["session"] = "x" * 50_000
    elif how == "a 100 kB question":
        body["question"] = "x" * 60_000
    if how == "a 10 MB body":
        r = c.post(
            "/api/answer",
            content=b'{"session": "' + b"x" * 10_000_000 + b'"}',
            headers={"Content-Type": "application/json"},
        )
    else:
        r = c.post("/api/answer", json=body)
    assert r.status_code == status and r.json()["error"].startswith(start), r.text[:300]
    assert len(r.text) < 400 and ann.store.count_answers() == 0


def test_an_items_cell_over_the_csv_field_limit_is_one_line_naming_the_file_and_line(tmp_path):
    """A cell of more than 128 KiB (a pasted image, a runaway quote) was a _csv.Error traceback."""
    from nvldb_pl.serve.items import read_items

    path = tmp_path / "items.csv"
    path.write_text("name,text,price\nA,short,1\nB," + "x" * 200_000 + ",2\n")
    with pytest.raises(ValueError, match=r"items.csv, line 3: a cell of more than 131072 characters"):
        read_items(str(path))


def test_a_host_header_with_a_path_opens_no_export_and_an_old_starlette_is_refused(tmp_path):
    """``Host: 127.0.0.1:8000/x`` opened every researcher export without a token under starlette before 1.0.1
    (CVE-2026-48710): refused here, and scripts/serve.py refuses to start on such a starlette, naming the floor."""
    from nvldb_pl.serve.command import starlette_floor

    c, _ = _client(tmp_path)
    for url in ("/api/answers.csv", "/api/status", "/api/bradley-terry.csv"):
        assert c.get(url, headers={"Host": "127.0.0.1:8000/x"}).status_code in (400, 401), url
    assert starlette_floor() == "" and starlette_floor("1.0.1") == "" and starlette_floor("1.10.0") == ""
    said = starlette_floor("0.37.2")
    assert said.startswith("starlette 0.37.2 lets a malformed Host header") and "starlette>=1.0.1" in said


def test_the_researchers_view_links_every_export_and_each_opens_with_the_token(tmp_path):
    """The page linked two of the researcher's exports (answers.csv, ranking.csv): it links all six now, and each
    link, as the page makes it (the token in the address), opens."""
    import re

    c, _ = _client(tmp_path)
    page = c.get("/").text
    ids = re.findall(r'<a id="(export-[\w-]+)" download>', page)
    assert len(ids) == 6, ids
    urls = {i: re.search(rf'\$\("{i}"\)\.href = withToken\("([^"]+)"', page).group(1) for i in ids}
    assert set(urls.values()) >= {"/api/answers.csv", "/api/answers.json", "/api/bradley-terry.csv"}
    for i, url in urls.items():
        assert c.get(url, params={"token": RESEARCHER}).status_code == 200, (i, url)
        assert c.get(url).status_code == 401, (i, url)
