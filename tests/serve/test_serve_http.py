"""The annotation server's HTTP API through FastAPI's test client (the serve extra; skipped without it)."""

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install -e '.[serve]')")
pytest.importorskip("httpx", reason="httpx (FastAPI's test client) is not installed")

from fastapi.testclient import TestClient  # noqa: E402

from nvldb_pl.serve.annotation import SHARED, Annotation  # noqa: E402
from nvldb_pl.serve.app import make_app  # noqa: E402
from nvldb_pl.serve.items import builtin_catalog, kendall_tau  # noqa: E402
from nvldb_pl.serve.store import Store  # noqa: E402
from tests.serve.test_serve import CONFIG, TASTE, _person  # noqa: E402


def _client(tmp_path, token=None, **kw):
    ann = Annotation(builtin_catalog(), Store(str(tmp_path / "a.db")), CONFIG, **kw)
    return TestClient(make_app(ann, token)), ann


def test_the_page_and_a_session_of_questions_and_answers(tmp_path):
    c, ann = _client(tmp_path)
    page = c.get("/")
    assert page.status_code == 200 and "A or B?" in page.text and "<script>" in page.text
    sid = c.post("/api/session", json={}).json()["session"]
    for n in range(1, 6):
        q = c.get("/api/question", params={"session": sid}).json()
        r = c.post("/api/answer", json={"session": sid, "question": q["question"], "choice": _person(q)})
        assert r.status_code == 200 and r.json()["answers"] == n and r.json()["learned"] == n
    rank = c.get("/api/ranking").json()
    # the ranking: the taste posterior over the items' utilities given the five answers (the answers CSV's pairs),
    # in the items' own features
    from nvldb_pl.maths.posterior import taste_posterior

    x = ann.items.raw
    rows = [line.split(",") for line in c.get("/api/answers.csv").text.strip().splitlines()[1:]]
    index = {name: k for k, name in enumerate(ann.items.names)}
    first, second = np.array([x[index[r[4]]] for r in rows]), np.array([x[index[r[5]]] for r in rows])
    o = np.array([float(r[7] == r[4]) for r in rows])
    scores = taste_posterior(x, first, second, o)[0].numpy()
    assert [r["name"] for r in rank["ranking"]] == [ann.items.names[k] for k in np.argsort(-scores, kind="stable")]
    assert len(rank["settle"]) == 5 and all(-1 <= s["tau"] <= 1 for s in rank["settle"])
    csv = c.get("/api/answers.csv")
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert len(csv.text.strip().splitlines()) == 6
    assert c.get("/api/ranking.csv").text.splitlines()[0] == "rank,name,score,p_beats_average,p_low,p_high,compared"
    status = {"answers": 5, "learned": {SHARED: 5}, "restored": {}, "items": 12, "repeats_avoided": 0}
    assert c.get("/api/status").json() == status


@pytest.mark.parametrize(
    "method, url, body, status, message",
    [
        ("post", "/api/answer", b"{not json", 400, "body: not valid JSON"),
        ("post", "/api/answer", [1, 2], 400, "body: a JSON object"),
        ("post", "/api/answer", {"session": "S", "question": 1}, 422, "missing field(s) ['choice']"),
        ("post", "/api/answer", {"session": "S", "question": 1, "choice": 1, "x": 0}, 422, "no field(s) ['x']"),
        ("post", "/api/answer", {"session": "S", "question": 99, "choice": 1}, 404, "99 was never asked"),
        ("post", "/api/answer", {"session": "S", "question": "Q", "choice": 5}, 422, "choice: 1 (the first item)"),
        (
            "post",
            "/api/answer",
            {"session": "nobody", "question": "Q", "choice": 1},
            404,
            "session: not a session of this server",
        ),
        ("get", "/api/question", None, 422, "query.session: Field required"),
        ("get", "/api/nothing", None, 404, "/api/nothing: Not Found"),
        ("post", "/api/session", {"annotator": ""}, 422, "annotator: a name of 1 to 100"),
    ],
)
def test_a_bad_request_gets_a_4xx_with_one_line_and_changes_nothing(tmp_path, method, url, body, status, message):
    c, ann = _client(tmp_path)
    sid = c.post("/api/session").json()["session"]
    q = c.get("/api/question", params={"session": sid}).json()
    if isinstance(body, dict):
        body = {k: {"S": sid, "Q": q["question"]}.get(v, v) if isinstance(v, str) else v for k, v in body.items()}
    kw = (
        {"content": body, "headers": {"content-type": "application/json"}}
        if isinstance(body, bytes)
        else {"json": body}
    )
    r = getattr(c, method)(url, **kw) if method == "post" else c.get(url)
    assert r.status_code == status, r.text
    assert message in r.json()["error"] and "\n" not in r.json()["error"]
    assert ann.store.count_answers() == 0 and ann.bandits[SHARED].num_observed == 0
    assert c.get("/api/question", params={"session": sid}).json()["question"] == q["question"]


def test_two_sessions_at_once(tmp_path):
    c, ann = _client(tmp_path)
    s1, s2 = (c.post("/api/session").json()["session"] for _ in range(2))
    q1 = c.get("/api/question", params={"session": s1}).json()
    q2 = c.get("/api/question", params={"session": s2}).json()
    assert q1["question"] != q2["question"]
    # answered late and out of order, each by its own session; one refused for the other
    assert c.post("/api/answer", json={"session": s1, "question": q2["question"], "choice": 1}).status_code == 403
    assert c.post("/api/answer", json={"session": s2, "question": q2["question"], "choice": 2}).status_code == 200
    assert c.post("/api/answer", json={"session": s1, "question": q1["question"], "choice": 1}).status_code == 200
    assert ann.bandits[SHARED].num_observed == 2
    assert c.post("/api/answer", json={"session": s1, "question": q1["question"], "choice": 1}).status_code == 409


def test_an_access_token_is_required_where_set(tmp_path):
    c, _ = _client(tmp_path, token="s3cret")
    assert c.get("/").status_code == 200  # the page itself; its API calls carry the token
    r = c.post("/api/session")
    assert r.status_code == 401 and "token: missing or wrong" in r.json()["error"]
    assert c.post("/api/session", headers={"X-Token": "wrong"}).status_code == 401
    assert c.post("/api/session", headers={"X-Token": "s3cret"}).status_code == 200
    assert c.post("/api/session?token=s3cret").status_code == 200


def test_a_simulated_person_through_http(tmp_path, capsys):
    """A hidden linear taste (duel.py --simulate's) answers 30 questions; Kendall tau to the hidden ranking."""
    c, ann = _client(tmp_path)
    sid = c.post("/api/session").json()["session"]
    for _ in range(30):
        q = c.get("/api/question", params={"session": sid}).json()
        assert (
            c.post("/api/answer", json={"session": sid, "question": q["question"], "choice": _person(q)}).status_code
            == 200
        )
    tau = kendall_tau(ann.bandits[SHARED].scores(ann.items.contexts), ann.items.raw @ TASTE)
    with capsys.disabled():
        print(f"\n[serve] simulated person, 30 answers over HTTP: Kendall tau to the hidden ranking {tau:.2f}")
    assert tau >= 0.5  # 0.64 measured (seeds 0-5: 0.58-0.91); a learner that learned nothing scores about 0
