"""reproduce.py --ray: the grid on a real Ray cluster (a head started by `ray start --head` and a second node, as a
cluster's machines would be), seed for seed the one-process grid's runs; a worker killed mid-grid costs only its
run's rounds since its last save; Ctrl-C says what finished and the same command goes on; without Ray, one line."""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests.experiments.test_grid_cells import _per_seed
from tests.helpers.ray_lock import one_ray_cluster
from tests.helpers.script_loader import load_script

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "reproduce.py")
GRID = ["--tasks", "cos", "square", "--methods", "NVLDB-UCB-ASYM", "Random", "--rounds", "6", "--seeds", "2"]
GRID += ["--set", "network.width=4", "grad_steps=1"]
LONG = ["--tasks", "cos", "--methods", "NVLDB-UCB-ASYM", "NLDB-UCB-ASYM", "--rounds", "250", "--seeds", "2"]
LONG += ["--set", "network.width=4", "grad_steps=2"]


@pytest.fixture
def cluster():
    """A head (1 CPU) and a second node (1 CPU) on this machine; its address. One cluster at a time on the machine
    (a lock: `ray stop` ends every cluster here), whichever worker of the suite asks."""
    ray = shutil.which("ray", path=os.path.dirname(sys.executable))
    if ray is None:
        pytest.skip("the ray extra is not installed")
    lock = one_ray_cluster()
    lock.__enter__()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="/tmp/ray")  # a short path: Ray's sockets live under it
    common = ["--num-cpus", "1", "--disable-usage-stats"]
    address = f"127.0.0.1:{port}"
    before = {k: os.environ.get(k) for k in ("RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")}
    token = os.path.join(temp, "auth_token")  # the cluster's own (not one of ~/.ray, which a head would take up)
    with open(token, "w") as fh:
        fh.write(secrets.token_hex(32))
    os.environ.update(RAY_AUTH_TOKEN_PATH=token, RAY_AUTH_MODE="token")  # the nodes and the drivers alike
    try:
        for how in (
            ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}"],
            [f"--address={address}"],
        ):
            started = subprocess.run([ray, "start", *how, *common], capture_output=True, text=True, timeout=120)
            assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-3000:]
        yield address
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
        for k, v in before.items():
            os.environ.pop(k) if v is None else os.environ.update({k: v})
        lock.__exit__(None, None, None)


def long_whole(tmp_path) -> dict:
    """LONG's runs by the one-process grid: each seed's result."""
    whole = str(tmp_path / "long_whole")
    assert load_script("reproduce").main(["--out", whole, *LONG]) == 0
    return _per_seed(whole)


def _reproduce(*args, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, SCRIPT, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _done(proc, timeout=600):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_the_grid_and_a_sweep_on_a_ray_cluster(tmp_path, cluster):
    """One cluster for the three (a cluster's start is 10 s): each a check below."""
    grid_runs_as_in_one_process(tmp_path / "grid", cluster)
    a_killed_worker_costs_only_its_unfinished_rounds(tmp_path / "killed", cluster)
    a_sweep_writes_the_one_process_rows_once_each_despite_a_killed_worker(tmp_path / "sweep", cluster)


def grid_runs_as_in_one_process(tmp_path, cluster):
    whole, spread = str(tmp_path / "whole"), str(tmp_path / "spread")
    assert load_script("reproduce").main(["--out", whole, *GRID]) == 0
    code, out, err = _done(_reproduce("--out", spread, *GRID, "--ray", cluster))
    assert code == 0, err[-3000:]
    assert out.count("[run]") == 4 and "[ray]   4 runs on" in out and "4 done, 0 running or waiting" in out
    assert _per_seed(spread) == _per_seed(whole) and len(_per_seed(whole)) == 4
    report = open(os.path.join(spread, "report.md")).read()
    assert "| NVLDB-UCB-ASYM |" in report and "| Random |" in report


def _saved(out: str) -> bool:
    for folder, _, files in os.walk(os.path.join(out, "runs")):
        if "last.ckpt" in files:
            return True
    return False


def _wait_for_a_save(out: str, proc, limit=300):
    start = time.time()
    while not _saved(out):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() - start < limit, "no run saved its round in time"
        time.sleep(0.2)


def a_killed_worker_costs_only_its_unfinished_rounds(tmp_path, cluster):
    spread, whole = str(tmp_path / "spread"), long_whole(tmp_path)
    proc = _reproduce("--out", spread, *LONG, "--ray", cluster)
    _wait_for_a_save(spread, proc)
    killed = subprocess.run(["pkill", "-9", "-f", "ray::_cell"], capture_output=True).returncode
    assert killed == 0, "no worker to kill"
    code, out, err = _done(proc)
    assert code == 0, err[-3000:]
    assert "[go on]" in out  # a killed run went on from its save, not from round 0
    assert _per_seed(spread) == whole and len(whole) == 2


@pytest.mark.slow
def test_ctrl_c_stops_the_grid_saying_what_finished_and_the_same_command_goes_on(tmp_path, cluster):
    spread, whole = str(tmp_path / "spread"), long_whole(tmp_path)
    proc = _reproduce("--out", spread, *LONG, "--ray", cluster)
    _wait_for_a_save(spread, proc)
    proc.send_signal(signal.SIGINT)
    code, _, err = _done(proc)
    assert code == 130, err[-3000:]
    assert "stopped by Ctrl-C: " in err and "the same command reuses them and goes on" in err
    code, out, err = _done(_reproduce("--out", spread, *LONG, "--ray", cluster))
    assert code == 0, err[-3000:]
    assert "[go on]" in out or "[reuse]" in out
    assert _per_seed(spread) == whole


def test_ray_is_refused_in_one_line_where_it_cannot_run(tmp_path, capsys, monkeypatch):
    reproduce = load_script("reproduce")
    out = str(tmp_path / "r")
    assert reproduce.main(["--out", out, *GRID, "--ray", "auto", "--cell", "0", "--cells", "2"]) == 2
    assert capsys.readouterr().err == "error: --ray: runs the whole grid; not with --cell\n"
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port where nothing answers
        s.bind(("127.0.0.1", 0))
        nothing = f"127.0.0.1:{s.getsockname()[1]}"
    assert reproduce.main(["--out", out, *GRID, "--ray", nothing]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --ray {nothing}: no Ray cluster answers there (") and err.count("\n") == 1
    monkeypatch.setitem(sys.modules, "ray", None)  # as without the extra
    assert reproduce.main(["--out", out, *GRID, "--ray", "auto"]) == 2
    assert capsys.readouterr().err == "error: --ray: Ray is not installed; pip install 'nvldb_pl[ray]' installs it\n"
    assert not os.path.exists(out)


SWEEP = ["--rounds", "150", "--seeds", "2", "--tasks", "cos", "square", "--threads", "1"]
SWEEP += ["--grid", '[{"network": {"width": 4}, "grad_steps": 1}, {"network": {"width": 4}, "grad_steps": 2}]']


def _rows(path: str) -> dict:
    import json

    return {(r["task"], json.dumps(r["config"])): r["per_seed"] for r in map(json.loads, open(path))}


def a_sweep_writes_the_one_process_rows_once_each_despite_a_killed_worker(tmp_path, cluster):
    sweep = os.path.join(ROOT, "scripts", "sweep.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one, spread = str(tmp_path / "one.jsonl"), str(tmp_path / "ray.jsonl")
    subprocess.run([sys.executable, sweep, *SWEEP, "--out", one], check=True, capture_output=True, env=env, cwd=ROOT)
    proc = subprocess.Popen(
        [sys.executable, sweep, *SWEEP, "--out", spread, "--ray", cluster],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    start = time.time()
    while not (os.path.exists(spread) and open(spread).read().count("\n") >= 1):  # a row written: kill the others
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() - start < 300
        time.sleep(0.1)
    assert subprocess.run(["pkill", "-9", "-f", "ray::sweep_row"], capture_output=True).returncode == 0, "none to kill"
    code, out, err = _done(proc)
    assert code == 0, err[-3000:]
    lines = open(spread).read().splitlines()
    assert len(lines) == 4 and len(set(lines)) == 4  # every run once
    assert _rows(spread) == _rows(one)
