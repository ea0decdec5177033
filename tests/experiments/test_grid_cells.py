"""reproduce.py --cell I --cells N: a job array's shares of one grid, started at once into one --out, make the runs
of the one-process grid seed for seed; --report-only then writes its report."""

import glob
import json
import os
import re
import subprocess
import sys

from tests.helpers.script_loader import load_script

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
GRID = ["--tasks", "cos", "square", "--methods", "NVLDB-UCB-ASYM", "Random", "--rounds", "6", "--seeds", "2"]
GRID += ["--set", "network.width=4", "grad_steps=1"]


def _per_seed(out: str) -> dict:
    """(task, method) -> every seed's (id, R(T)/T) of the run under ``out``."""
    found = {}
    for path in glob.glob(os.path.join(out, "runs", "*", "*", "lightning_logs", "*", "summary.json")):
        task, method = path.split(os.sep)[-5:-3]
        with open(path) as fh:
            found[task, method] = [(s["seed"], s["cum_avg_regret"]) for s in json.load(fh)["seeds"]]
    return found


def test_the_shares_of_a_grid_run_at_once_make_the_one_process_grids_runs_and_report(tmp_path):
    whole, shared = str(tmp_path / "whole"), str(tmp_path / "shared")
    assert load_script("reproduce").main(["--out", whole, *GRID]) == 0
    script = os.path.join(ROOT, "scripts", "reproduce.py")
    shares = [
        subprocess.Popen(
            [sys.executable, script, "--out", shared, *GRID, "--cell", str(i), "--cells", "3"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    said = [p.communicate(timeout=600) for p in shares]
    assert [p.returncode for p in shares] == [0, 0, 0], [err[-2000:] for _, err in said]
    ran = [out.count("[run]") for out, _ in said]
    assert ran == [2, 1, 1]  # places 0 and 3, 1, 2 of the four (task, method) pairs
    assert "share 0 of 3: 2 of 4 runs of the grid done" in said[0][0]
    assert not os.path.exists(os.path.join(shared, "report.md"))  # no share writes the report of them all
    assert _per_seed(shared) == _per_seed(whole) and len(_per_seed(whole)) == 4
    assert load_script("reproduce").main(["--out", shared, *GRID, "--report-only"]) == 0
    report = open(os.path.join(shared, "report.md")).read()
    assert "| NVLDB-UCB-ASYM |" in report and "| Random |" in report


def test_a_share_is_refused_without_its_count_or_outside_it(tmp_path, capsys):
    reproduce = load_script("reproduce")
    out = str(tmp_path / "r")
    for extra, said in [
        (["--cell", "1"], "--cell and --cells: give both"),
        (["--cell", "3", "--cells", "3"], "--cell: must be between 0 and --cells - 1 = 2, got 3"),
        (["--cells", "0", "--cell", "0"], "--cells: must be >= 1, got 0"),
        (["--cell", "0", "--cells", "2", "--report-only"], "--cell: a share runs part of the grid"),
    ]:
        assert reproduce.main(["--out", out, *GRID, *extra]) == 2
        assert said in capsys.readouterr().err
    assert not os.path.exists(out)


def test_the_sbatch_example_runs_its_shares_as_a_job_array_would(tmp_path):
    """docs/shares.sbatch under bash, once per task of its array (SLURM_ARRAY_TASK_ID as Slurm sets it), with shorter
    runs: the shares together make every run of its grid, and its --report-only line writes the report."""
    path = os.path.join(ROOT, "docs", "shares.sbatch")
    text = open(path).read()
    first, last = map(int, re.search(r"^#SBATCH --array=(\d+)-(\d+)$", text, flags=re.M).groups())
    assert f"--cells {last - first + 1} " in text  # the array's size is the count of shares
    (tmp_path / "scripts").symlink_to(os.path.join(ROOT, "scripts"))
    short = ["--rounds", "6", "--seeds", "2", "--set", "network.width=4", "grad_steps=1"]
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    tasks = [
        subprocess.Popen(
            ["bash", path, *short],
            cwd=tmp_path,
            env={**env, "SLURM_ARRAY_TASK_ID": str(i), "SLURM_CPUS_PER_TASK": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(first, last + 1)
    ]
    said = [p.communicate(timeout=600) for p in tasks]
    assert [p.returncode for p in tasks] == [0] * len(tasks), [err[-2000:] for _, err in said]
    out = str(tmp_path / "runs" / "grid")
    assert sorted(_per_seed(out)) == [(t, m) for t in ("cos", "square") for m in ("NDB-UCB", "NVLDB-UCB-ASYM")]
    report = re.search(r"^#\s+(python scripts/reproduce\.py .* --report-only)$", text, flags=re.M).group(1)
    argv = report.split()[1:] + short
    assert subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, timeout=600).returncode == 0
    assert os.path.exists(os.path.join(out, "report.md"))
