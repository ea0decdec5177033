"""The annotation page in a real browser: headless Chromium (Debian's package) driven by Playwright.

A person answers 20 questions by clicking; the server is killed with SIGKILL after the 12th and started
again on the same database; all 20 answers are in the database and in the learner, and the ranking view
shows the learner's own order. Skipped, with the reason, where Playwright or Chromium is not installed.
"""

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys

import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[test]')")
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (apt-get install chromium)")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
UTILITY = {"Alder": 3.0, "Birch": 2.0, "Cedar": 1.0, "<b>Damson</b>": 0.0, "Elm": -1.0, "Fir": -2.0}


def _items(tmp_path):
    f = tmp_path / "trees.csv"
    rows = ["name,text,height,leaf,bark"]
    for k, name in enumerate(UTILITY):
        text = '<img src=x onerror="window.pwned=1">' if k == 3 else f"tree {k}"
        rows.append(f'"{name}","{text}",{UTILITY[name] + 0.3 * (k % 2)},{(k * 7) % 5},{(k * 3) % 4}')
    f.write_text("\n".join(rows) + "\n")
    return str(f)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(items, db, port, *extra):
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "serve.py"),
            "--items",
            items,
            "--db",
            db,
            "--port",
            str(port),
            "--save-every",
            "5",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    said = []
    while not (said and said[-1].startswith("serving")) and len(said) < 20:  # warnings may come first
        said.append(proc.stdout.readline())
        if not said[-1]:  # the process ended
            break
    if not said[-1].startswith("serving 6 items") or f"http://127.0.0.1:{port}/" not in said[-1]:
        proc.kill()
        raise AssertionError("".join(said) + proc.communicate()[0])
    restored, researcher = proc.stdout.readline(), proc.stdout.readline()
    return proc, restored, researcher.rsplit("?token=", 1)[1].strip()


def _answer(page, n):
    """Click the preferred item of the question shown; wait until the page counts ``n`` answers."""
    names = [page.locator(f"#{s} .name").inner_text() for s in ("first", "second")]
    page.click("#first" if UTILITY[names[0]] > UTILITY[names[1]] else "#second")
    page.wait_for_function(f"document.getElementById('count').dataset.answers === '{n}'", timeout=30000)


def test_twenty_answers_by_clicking_survive_a_kill(tmp_path):
    items, db, port = _items(tmp_path), str(tmp_path / "answers.db"), _free_port()
    shots = os.environ.get("NVLDB_SCREENSHOTS")
    proc, _, token = _start(items, db, port)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            # the test's own waits evaluate strings, which the page's content policy forbids it (not the page's script)
            page = browser.new_page(viewport={"width": 1000, "height": 640}, bypass_csp=True)
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#first .name")
            for n in range(1, 13):
                _answer(page, n)
            asked = page.get_attribute("#ask", "data-question")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            proc, restored, token = _start(items, db, port)
            assert "12 kept" in restored, restored
            page.reload()
            page.wait_for_selector("#first .name")
            assert page.get_attribute("#ask", "data-question") == asked  # the open question survives too
            for n in range(13, 21):
                _answer(page, n)
            if shots:
                page.screenshot(path=os.path.join(shots, "serve-question.png"))
            page.keyboard.press("0")  # "can't decide" by key: kept, not learned from
            page.wait_for_function("document.getElementById('count').dataset.answers === '21'", timeout=30000)
            assert page.evaluate("window.pwned") is None and page.locator("#first b, #second b").count() == 0
            page.click("#to-rank")
            page.wait_for_function("document.querySelectorAll('#ranking tr').length === 6", timeout=30000)
            shown = page.locator("#ranking tr td:nth-child(2)").all_inner_texts()
            if shots:
                page.screenshot(path=os.path.join(shots, "serve-ranking.png"))
            own = page.evaluate(f"fetch('/api/ranking?token={token}').then(r => r.json())")
            status = page.evaluate(f"fetch('/api/status?token={token}').then(r => r.json())")
            browser.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    scores = [r["score"] for r in own["ranking"]]
    assert shown == [r["name"] for r in own["ranking"]] and scores == sorted(scores, reverse=True)
    assert status["answers"] == 21 and status["learned"] == {"shared": 20}
    db_ = sqlite3.connect(db)
    assert db_.execute("SELECT COUNT(*), SUM(choice != 0), SUM(learned) FROM answers").fetchone() == (21, 20, 20)
    assert "stopped; 21 answers" in out


def test_the_page_runs_under_its_content_policy_and_refuses_framing(tmp_path):
    """Without bypassing the policy: the page's own script and style run (a question is shown and answered by
    key), an item's markup stays text, and the page may not be framed."""
    items, db, port = _items(tmp_path), str(tmp_path / "answers.db"), _free_port()
    proc, _, token = _start(items, db, port)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            response = page.goto(f"http://127.0.0.1:{port}/")
            assert response.headers["x-frame-options"] == "DENY"
            assert "script-src 'sha256-" in response.headers["content-security-policy"]
            page.wait_for_selector("#first .name")
            page.keyboard.press("1")
            page.locator("#count[data-answers='1']").wait_for(timeout=30000)
            assert page.locator("#first b, #second b").count() == 0
            browser.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def _wait(page, expression, timeout=30000):
    page.wait_for_function(expression, timeout=timeout)


def _prefer(page):
    names = [page.locator(f"#{s} .name").inner_text() for s in ("first", "second")]
    page.click("#first" if UTILITY[names[0]] > UTILITY[names[1]] else "#second")


def test_the_persons_side_a_second_tab_undo_a_server_that_is_down_and_the_end(tmp_path):
    """Two tabs of one person: an answer in the first makes the second's question stale, and a click there brings
    the next question with a note (it was refused, the page stuck); undo takes the answer back (the same pair asked
    again); with the server down a click says so and is retried, and lands once the server is back; after
    --questions-per-person answers the page thanks the person, shows the study's completion code and link, and asks
    no more."""
    items, db, port = _items(tmp_path), str(tmp_path / "answers.db"), _free_port()
    study = (
        "--questions-per-person",
        "3",
        "--completion-code",
        "C0DE-42",
        "--completion-url",
        "https://example.org/done",
    )
    proc, _, _ = _start(items, db, port, *study)
    url = f"http://127.0.0.1:{port}/"
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            context = browser.new_context(bypass_csp=True)  # one person: one session in both tabs (localStorage)
            one, two = context.new_page(), context.new_page()
            for page in (one, two):
                page.goto(url)
                page.wait_for_selector("#first .name")
            asked = one.get_attribute("#ask", "data-question")
            assert two.get_attribute("#ask", "data-question") == asked
            pair = [one.locator(f"#{s} .name").inner_text() for s in ("first", "second")]
            _prefer(one)
            _wait(one, "document.getElementById('count').dataset.yours === '1'")
            _prefer(two)  # stale here
            _wait(two, "document.getElementById('note').textContent.includes('answered already')")
            _wait(two, f"document.getElementById('ask').dataset.question !== '{asked}'")
            assert two.get_attribute("#ask", "data-question") == one.get_attribute("#ask", "data-question") != asked
            assert two.locator("#error").inner_text() == "" and two.locator("#count").get_attribute("data-yours") == "1"
            one.click("#undo")
            _wait(one, "document.getElementById('count').dataset.yours === '0'")
            assert "taken back" in one.locator("#note").inner_text()
            assert [one.locator(f"#{s} .name").inner_text() for s in ("first", "second")] == pair  # asked again
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            _prefer(one)
            _wait(one, "document.getElementById('error').textContent.startsWith('The server cannot be reached')")
            proc, restored, _ = _start(items, db, port, *study)
            _wait(one, "document.getElementById('count').dataset.yours === '1'", timeout=60000)
            _prefer(one)
            _wait(one, "document.getElementById('count').dataset.yours === '2'")
            _prefer(one)
            one.wait_for_selector("#done", state="visible", timeout=30000)
            assert one.locator("#ask").is_hidden() and "Thank you" in one.locator("#done").inner_text()
            assert one.locator("#completion-code").inner_text() == "C0DE-42"  # the study site's code, and its link
            assert one.get_attribute("#completion-url", "href") == "https://example.org/done"
            browser.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    con = sqlite3.connect(db)
    rows = con.execute("SELECT COUNT(*), SUM(undone IS NOT NULL) FROM answers").fetchone()
    assert rows == (4, 1)  # three kept and the one taken back, kept as undone
    assert "0 kept" in restored  # (the one answer before the kill was taken back)


def test_a_study_with_consent_shows_its_text_and_asks_only_after_the_person_agrees(tmp_path):
    """--consent FILE: the page shows the text (its paragraphs, as text) and no question until "I agree"; the session
    then starts with the consent recorded."""
    items, db, port = _items(tmp_path), str(tmp_path / "answers.db"), _free_port()
    text = tmp_path / "consent.txt"
    text.write_text(
        "You will compare pairs of drinks.\n\nYour answers are kept <b>anonymously</b>.\n", encoding="utf-8"
    )
    proc, _, _ = _start(items, db, port, "--consent", str(text))
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#consent", state="visible")
            paragraphs = page.locator("#consent-text p").all_inner_texts()
            assert paragraphs == ["You will compare pairs of drinks.", "Your answers are kept <b>anonymously</b>."]
            assert page.locator("#ask").is_hidden()
            assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM sessions").fetchone() == (0,)
            page.click("#agree")
            page.wait_for_selector("#first .name")
            assert page.locator("#consent").is_hidden()
            browser.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM consents").fetchone() == (1,)


def test_the_researchers_link_and_a_prolific_style_open_study(tmp_path):
    """The researcher's link of an invite-only study with a consent text asked for consent, then showed the red
    "annotators are invited" error over empty cards. Now it opens on the ranking and every export, no consent, no
    question, no error. And a participant of an open study, named by the site's id in the address
    (``?annotator=PID``), answers to the goal and is shown the study's code, with no Ranking tab on the consent
    screen."""
    items, port = _items(tmp_path), _free_port()
    consent = tmp_path / "consent.txt"
    consent.write_text("You agree to compare trees.\n")
    proc, _, token = _start(items, str(tmp_path / "invited.db"), port, "--invite", "alice", "--consent", str(consent))
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/?token={token}")
            page.wait_for_selector("#rank", state="visible", timeout=30000)
            page.wait_for_selector("#exports", state="visible", timeout=30000)
            assert page.locator("#consent").is_hidden() and page.locator("#ask").is_hidden()
            assert page.locator("#to-ask").is_hidden() and page.locator("#error").inner_text() == ""
            links = page.locator("#exports a")
            assert links.count() == 6
            assert all(f"token={token}" in links.nth(k).get_attribute("href") for k in range(6))
            browser.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    port = _free_port()
    study = ("--per-annotator", "--questions-per-person", "3", "--completion-code", "PROLIFIC1", "--consent")
    proc, _, _ = _start(items, str(tmp_path / "open.db"), port, *study, str(consent))
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_context(bypass_csp=True).new_page()  # (the waits evaluate a string)
            page.goto(f"http://127.0.0.1:{port}/?annotator=5f1c0a77e2")
            page.wait_for_selector("#consent", state="visible", timeout=30000)
            assert page.locator("#to-rank").is_hidden()  # no Ranking tab on the consent screen
            page.click("#agree")
            for n in range(1, 4):
                page.wait_for_selector("#first .name", timeout=30000)
                _prefer(page)
                _wait(page, f"document.getElementById('count').dataset.yours === '{n}'")
            page.wait_for_selector("#done", state="visible", timeout=30000)
            assert page.locator("#completion-code").inner_text() == "PROLIFIC1"
            browser.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    con = sqlite3.connect(str(tmp_path / "open.db"))
    assert con.execute("SELECT annotator FROM sessions").fetchall() == [("5f1c0a77e2",)]
    assert con.execute("SELECT COUNT(*) FROM consents").fetchone()[0] == 1
