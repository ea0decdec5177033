"""scripts/serve.py as a user runs it: every command README.md and docs/ show, and its refusals in one line."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install -e '.[serve]')")
pytest.importorskip("uvicorn", reason="the serve extra is not installed (pip install -e '.[serve]')")

from tests.helpers.script_loader import load_script  # noqa: E402
from tests.test_readme import DOCS, ROOT  # noqa: E402


def serve_commands() -> list:
    out = []
    for f in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", open(os.path.join(ROOT, f)).read(), flags=re.S):
            for line in block.splitlines():
                line = line.split("#", 1)[0].strip()
                if line.startswith("python scripts/serve.py") and line not in out:
                    out.append(line)
    return out


def _serve(args, tmp_path):
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_the_docs_show_serve_commands():
    commands = serve_commands()
    assert "python scripts/serve.py" in commands and any("--items" in c for c in commands)


@pytest.mark.parametrize("command", serve_commands())
def test_a_serve_command_of_the_docs_serves_the_page(command, tmp_path):
    """Run as shown, on a temporary database and a free port (appended: the last value counts)."""
    args = shlex.split(command)[2:] + ["--db", str(tmp_path / "a.db"), "--port", "0"]
    proc = _serve(args, tmp_path)
    try:
        first = proc.stdout.readline()
        address = re.search(r"at (http://127\.0\.0\.1:\d+/)(\?token=(\S+))?", first)
        assert address, first + proc.stderr.read()
        proc.stdout.readline()  # answers kept and restored
        researcher = re.search(
            r"researcher \(exports, status, every ranking\): \S+\?token=(\S+)", proc.stdout.readline()
        )
        assert "A or B?" in urllib.request.urlopen(address.group(1), timeout=30).read().decode()
        req = urllib.request.Request(address.group(1) + "api/status", headers={"X-Token": researcher.group(1)})
        status = json.loads(urllib.request.urlopen(req, timeout=30).read())
        assert status["answers"] == 0 and status["items"] >= 2
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped; 0 answers" in out, out + err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--items", "nothing.csv"], "--items: nothing.csv: no such file"),
        (["--items", "BAD"], "line 3, column 'x': not a number: 'oops'"),
        (["--port", "70000"], "--port: must be between 0 and 65535"),
        (["--host", "no-such-host.invalid"], "--host: 'no-such-host.invalid' "),  # (a bind on a name could hang)
        (["--db", "no/such/folder/a.db"], "--db: no/such/folder/a.db: folder"),
        (["--offer", "1"], "--offer: must be an integer >= 2"),
        (["--config", "nothing.yaml"], "--config: nothing.yaml: no such file"),
        (["--config", "FLAT"], "model: ['lr'] beside class_path"),  # (it served, and failed at the first question)
    ],
)
def test_a_bad_start_is_refused_in_one_line(args, message, tmp_path, capsys, monkeypatch):
    """Refused in one line, and the files of a database it would have made are not left behind."""
    bad = tmp_path / "bad.csv"
    bad.write_text("name,x\nA,1\nB,oops\n")
    flat = tmp_path / "flat.yaml"
    flat.write_text("data:\n  dim: 5\nmodel:\n  class_path: NDB\n  lr: 0.1\n")
    args = [str(bad) if a == "BAD" else str(flat) if a == "FLAT" else a for a in args]
    if "--db" not in args:
        args += ["--db", str(tmp_path / "a.db")]
    monkeypatch.chdir(ROOT)
    code = load_script("serve").main(args + ["--port", "0"] if "--port" not in args else args)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "flat.yaml"]


def test_a_second_server_on_one_database_is_refused_naming_the_first(tmp_path):
    """Two servers on one --db each learned half of the answers and restored a learner that differed from a replay;
    the second start is refused in one line naming the first, which serves on."""
    db = str(tmp_path / "a.db")
    first = _serve(["--db", db, "--port", "0"], tmp_path)
    try:
        line = first.stdout.readline()
        assert "serving" in line, line + first.stderr.read()
        second = subprocess.run(
            [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--db", db, "--port", "0"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2 and len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert f"error: --db: {db} is in use by another server (pid {first.pid} on " in second.stderr
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)


def test_the_load_script_prints_a_row_for_each_number_of_people(capsys):
    """scripts/load_serve.py (bounded: here 1 and 3 people, 2 s each, 40 answers at most) prints its table with every
    answer kept and learned."""
    assert load_script("load_serve").main(["--people", "1", "3", "--seconds", "2", "--max-answers", "40"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if re.match(r"\| \d", line)]
    assert [int(r[0]) for r in rows] == [1, 3]
    for r in rows:
        kept, learned_after = int(r[5]), float(r[7])
        assert 0 < kept <= 40 and float(r[1]) > 0 and learned_after < 30
        assert 0 <= float(r[8].strip().rstrip("%")) <= 100  # the share learned in a batch


def test_the_load_script_answers_on_a_catalog_of_other_features(capsys):
    """docs/load-items.csv (30 items, 6 features: the load table's catalog) through ``-- --items``: the simulated
    people answered with a taste of 5 features and every answer failed (a matmul of 6 by 5)."""
    items = os.path.join(ROOT, "docs", "load-items.csv")
    assert (
        load_script("load_serve").main(
            ["--people", "2", "--seconds", "2", "--max-answers", "20", "--", "--items", items]
        )
        == 0
    )
    (row,) = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if re.match(r"\| \d", line)]
    assert 0 < int(row[5]) <= 20 and "refused" not in row[-1]


def test_the_load_scripts_people_who_read_each_question_answer_no_faster_than_they_read(capsys):
    """--think 0.2: two people for 2 s answer at most 2 / 0.2 a second, and the header says how they answer."""
    assert load_script("load_serve").main(["--people", "2", "--seconds", "2", "--think", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "people reading each question 0.2 s" in out
    (row,) = [line.split("|")[1:-1] for line in out.splitlines() if re.match(r"\| \d", line)]
    assert 0 < float(row[1]) <= 2 / 0.2 and int(row[5]) <= 2 * (2 / 0.2 + 1)
    assert load_script("load_serve").main(["--people", "1", "--think", "-1"]) == 2
    assert "error: --think: seconds from 0 to 60, got -1.0" in capsys.readouterr().err


def test_a_stop_sent_to_the_whole_process_group_stops_the_server_cleanly(tmp_path):
    """A terminal's Ctrl-C, `timeout` or a service manager signal the server's whole group, its learning process
        too: the server stops it (learned, saved), and it said "the learning process ended (exit code -15)"; a signal
    as the server starts is taken too (it ended the process with -15, nothing saved)."""
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--db", str(tmp_path / "a.db"), "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, signalled whole below
    )
    try:
        assert "serving" in proc.stdout.readline()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped; 0 answers" in out and "error" not in err, out + err


def test_without_db_the_answers_go_to_the_users_data_folder_not_the_folder_it_starts_in(tmp_path):
    """serve.py's default --db: answers.db in $XDG_DATA_HOME/nvldb_pl (made), nothing in the folder it starts in
    (it was answers.db there: a start from a checkout wrote into the work tree)."""
    data, here = tmp_path / "data", tmp_path / "here"
    here.mkdir()
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), "--port", "0"],
        cwd=here,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "XDG_DATA_HOME": str(data)},
    )
    try:
        first = proc.stdout.readline()
        assert "serving" in first, first + proc.stderr.read()
        assert f"answers in {data / 'nvldb_pl' / 'answers.db'}:" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert (data / "nvldb_pl" / "answers.db").is_file()
    assert list(here.iterdir()) == []
