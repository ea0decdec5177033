"""The commands docs/serve.md and lab/results/short/README.md show for few answers, shortened: the live benchmark, the
ranking objective's tau table, the short-horizon table and the crossover figure."""

import json
import os

import pytest

from tests.helpers.script_loader import load_script

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_benchmark_live_prints_observe_and_select_per_window(capsys):
    bench = load_script("benchmark_live")
    args = ["--answers", "12", "--windows", "5", "12", "--span", "4", "--threads", "1"]
    assert bench.main(args + ["--config", os.path.join(ROOT, "configs", "live-full.yaml")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 5 |") or line.startswith("| 12 |")]
    assert len(rows) == 2 and "cpu" in out and all(len(r.split("|")) == 7 for r in rows)
    assert bench.main(["--answers", "3", "--windows", "5"]) == 2


def test_rank_tau_runs_every_policy_on_every_catalog_and_summarizes(tmp_path, capsys):
    tau = load_script("diagnostics/rank_tau")
    out = str(tmp_path / "tau.jsonl")
    assert tau.main(["--persons", "2", "--answers", "10", "--policies", "regret", "rank", "random", "--out", out]) == 0
    rows = [json.loads(line) for line in open(out)]
    assert len(rows) == 4 * 3 * 2 and all(
        len(r["tau"]) == 10 and -1 <= min(r["tau"]) <= max(r["tau"]) <= 1 for r in rows
    )
    assert {r["catalog"] for r in rows} >= {"Train trips (20, d=4), fitted person", "built-in (12 items, d=5)"}
    capsys.readouterr()
    assert tau.main(["--summary", out]) == 0
    assert "| rank | 2 |" in capsys.readouterr().out


def test_rank_tau_batches_as_results_batched_readme_shows(tmp_path, capsys):
    """--batch K: the group's questions chosen before it, its steps after its last answer (a learner other than
    every-answer's); --pending and --train-all change it again; the rows and the table say which; bad values refused."""
    tau = load_script("diagnostics/rank_tau")
    base = ["--persons", "1", "--answers", "8", "--policies", "rank", "--catalogs", "built-in (12 items, d=5)"]
    taus = {}
    for extra in ([], ["--batch", "4"], ["--batch", "4", "--pending"], ["--batch", "4", "--train-all"]):
        out = str(tmp_path / f"tau{len(taus)}.jsonl")
        assert tau.main(base + extra + ["--at", "4", "8", "--out", out]) == 0
        (row,) = [json.loads(line) for line in open(out)]
        taus[" ".join(extra)] = row["tau"]
        assert row.get("batch") == (" ".join(extra[1:]).replace("--", "").replace("-", " ") or None)
    assert len({tuple(t) for t in taus.values()}) == 4
    assert "| rank (batch 4 pending) | 1 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        tau.main(base + ["--batch", "0"])
    assert "--batch and --at: at least 1" in capsys.readouterr().err


def test_the_short_table_pairs_a_sweep_with_a_report_folder(tmp_path, capsys):
    table = load_script("diagnostics/short_table")
    sweep = os.path.join(ROOT, "lab", "results", "short", "candidates_T300.jsonl")
    args = ["--sweep", sweep, "--against", "PairwiseGP", os.path.join(ROOT, "lab", "results", "short", "gp300")]
    assert table.main(args + ["--tasks", "square"]) == 0
    out = capsys.readouterr().out
    assert "| {} | 1.300 ± 0.785 | +0.339 ± 0.163 | 5/20 |" in out


def test_benchmark_live_times_the_servers_handlers_with_page(capsys):
    bench = load_script("benchmark_live")
    assert bench.main(["--page", "--answers", "8", "--windows", "8", "--span", "4", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "the server's handlers, objective rank" in out and any(line.startswith("| 8 |") for line in out.splitlines())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", "nothing.yaml"], "--config: nothing.yaml: no such config file"),
        (["--dim", "-1"], "--dim: must be an integer >= 1, got -1"),
        (["--offer", "-1"], "--offer: must be an integer >= 2, got -1"),
        (["--threads", "-1"], "--threads: must be an integer >= 1, got -1"),
        (["--windows", "-1"], "--windows: at least one window <= --answers, every one >= 1"),
    ],
)
def test_benchmark_live_refuses_bad_input_in_one_line(capsys, args, message):
    """Each was a traceback (FileNotFoundError, numpy's 'negative dimensions', torch's set_num_threads) or, for a
    window of -1, a run of 5000 answers."""
    assert load_script("benchmark_live").main(args) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message}" + err[len(f"error: {message}") :] and len(err.strip().splitlines()) == 1, err
