"""nvldb_pl.experiments.frames: a report folder as pandas tables, the same numbers the report and scripts/pair.py
read, paired only on shared seeds and streams, and docs/notebook.md's cell as a user pastes it."""

import gzip
import json
import math
import os
import re
import shutil

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from nvldb_pl.experiments import frames  # noqa: E402
from nvldb_pl.experiments.pair import final_regret  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METHODS = ["CoLSTIM", "Random"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("frames") / "demo")
    runs = frames.run(out, ["cos", "square"], METHODS, 30, 3)
    return out, runs


def test_load_gives_every_seeds_r_t_over_t_as_the_report_and_pair_read_them(report):
    out, runs = report
    assert len(runs) == 2 * 2 * 3 and set(runs["method"]) == set(METHODS)
    entries = json.load(open(os.path.join(out, "report.json")))
    for task in ("cos", "square"):
        for method in METHODS:
            mine = runs[(runs["task"] == task) & (runs["method"] == method)]
            by_seed, _ = final_regret(out, method, task, 30)
            assert {(b, s): r for b, s, r in zip(mine["base_seed"], mine["seed"], mine["regret"])} == by_seed
            row = frames.summary(runs).query("task == @task and method == @method").iloc[0]
            assert row["seeds"] == 3 and row["mean"] == pytest.approx(
                entries[f"{task}/{method}"]["R_T_over_T_mean"], 1e-5
            )
            assert row["se"] == pytest.approx(mine["regret"].std(ddof=1) / math.sqrt(3))


def test_paired_differences_are_seed_by_seed(report):
    _, runs = report
    p = frames.paired(runs, "CoLSTIM", "Random").set_index("task")
    for task in ("cos", "square"):
        a = runs.query("task == @task and method == 'CoLSTIM'").set_index("seed")["regret"]
        b = runs.query("task == @task and method == 'Random'").set_index("seed")["regret"]
        d = a - b
        assert p.loc[task, "difference"] == pytest.approx(d.mean())
        assert p.loc[task, "se"] == pytest.approx(d.std(ddof=1) / math.sqrt(3))
        assert p.loc[task, "wins"] == int((d < 0).sum()) and p.loc[task, "seeds"] == 3


def test_runs_on_other_streams_or_without_shared_seeds_are_refused_not_paired(report, tmp_path):
    out, _ = report
    other = str(tmp_path / "other")
    shutil.copytree(out, other, ignore=shutil.ignore_patterns("runs"))
    entries = json.load(open(os.path.join(other, "report.json")))
    entries["cos/Random"]["streams"] = {**entries["cos/Random"]["streams"], "dim": 6}
    json.dump(entries, open(os.path.join(other, "report.json"), "w"))
    with pytest.raises(ValueError, match="cos: CoLSTIM and Random ran on other streams .*dim 5 and 6"):
        frames.paired(frames.load(other), "CoLSTIM", "Random")
    runs = frames.load(out)
    runs.loc[runs["method"] == "Random", "base_seed"] = 7
    with pytest.raises(ValueError, match="share no seed"):
        frames.paired(runs, "CoLSTIM", "Random")
    with pytest.raises(ValueError, match="no task where both 'CoLSTIM' and 'NDB-UCB' ran"):
        frames.paired(runs, "CoLSTIM", "NDB-UCB")


def test_a_missing_or_damaged_file_is_refused_naming_it(report, tmp_path):
    out, _ = report
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "none" / "report.json"))):
        frames.load(str(tmp_path / "none"))
    cut = str(tmp_path / "cut")
    shutil.copytree(out, cut, ignore=shutil.ignore_patterns("runs"))
    path = os.path.join(cut, "curves_cos.csv.gz")
    data = gzip.open(path).read()
    with open(path, "wb") as fh:
        fh.write(gzip.compress(data)[:-30])
    with pytest.raises(ValueError, match=re.escape(path) + ": damaged"):
        frames.load(cut)


def test_the_plot_draws_a_mean_and_a_band_per_method(report):
    out, _ = report
    curves = frames.curves(out)
    assert set(curves.columns) == {"task", "method", "seed", "round", "regret"}
    ax = frames.plot(curves, "square")
    assert [line.get_label() for line in ax.get_lines()] == METHODS and len(ax.collections) == 2
    mean = curves.query("task == 'square' and method == 'Random'").groupby("round")["regret"].mean()
    assert list(ax.get_lines()[1].get_ydata()) == pytest.approx(list(mean.values))
    with pytest.raises(ValueError, match="no curves of \\['VACDB'\\]"):
        frames.plot(curves, "square", ["VACDB"])


def test_the_notebook_page_cell_runs_as_pasted(tmp_path, monkeypatch):
    text = open(os.path.join(ROOT, "docs", "notebook.md")).read()
    (block,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    scope: dict = {}
    exec(compile(block.replace(", 100, 4)", ", 20, 2)"), "docs/notebook.md", "exec"), scope)
    assert os.path.exists(tmp_path / "demo" / "cos-curves.png")
    assert set(scope["runs"]["method"]) == {"NVLDB-UCB-ASYM", "Random"} and len(scope["runs"]) == 4


def test_a_sweeps_rows_keep_their_curves_and_load_and_plot_as_a_report_does(tmp_path, monkeypatch):
    from tests.helpers.script_loader import load_script

    out = str(tmp_path / "s.jsonl")
    argv = ["sweep.py", "--rounds", "130", "--seeds", "2", "--tasks", "cos", "--out", out]
    monkeypatch.setattr("sys.argv", [*argv, "--grid", '[{"learner": "CoLSTIM"}, {"learner": "RandomPair"}]'])
    load_script("sweep").main()
    rows = [json.loads(line) for line in open(out)]
    for r in rows:  # every round to 100, then every 10th, and T; the last one is the row's R(T)/T
        assert r["curve"]["rounds"] == [*range(1, 101), 110, 120, 130]
        assert [v / 130 for v in r["curve"]["cum_avg_regret"][-1]] == pytest.approx(r["per_seed"], rel=1e-5)
    table, curves = frames.sweep(out), frames.sweep_curves(out)
    assert len(table) == 4 and len(curves) == 2 * 2 * 103
    name = json.dumps({"learner": "RandomPair"})
    assert frames.summary(table).set_index("method").loc[name, "mean"] == pytest.approx(np.mean(rows[1]["per_seed"]))
    assert len(frames.plot(curves, "cos").get_lines()) == 2
    rows[0]["curve"]["cum_avg_regret"][5] = [1.0]  # one seed's value of two: refused naming the line
    with open(out, "w") as fh:
        fh.write("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(ValueError, match="line 1 is not a sweep run: curve.cum_avg_regret is not 103 lists of 2"):
        frames.sweep(out)


def test_the_pages_one_command_writes_every_run_under_a_folder_as_one_table(report, tmp_path, monkeypatch, capsys):
    """docs/notebook.md's bash command, run on a folder holding the report twice over (and on nothing: refused)."""
    from nvldb_pl.experiments.frames import main

    out, runs = report
    text = open(os.path.join(ROOT, "docs", "notebook.md")).read()
    (command,) = re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)
    argv = command.split()
    assert argv[:3] == ["python", "-m", "nvldb_pl.experiments.frames"] and argv[4:] == ["--csv", "runs.csv"]
    shutil.copytree(out, tmp_path / "lab" / "results" / "a" / "demo", ignore=shutil.ignore_patterns("runs"))
    shutil.copytree(out, tmp_path / "lab" / "results" / "b", ignore=shutil.ignore_patterns("runs"))
    monkeypatch.chdir(tmp_path)
    assert main(argv[3:]) == 0
    table = pd.read_csv("runs.csv", keep_default_na=False)
    assert sorted(set(table["folder"])) == ["lab/results/a/demo", "lab/results/b"] and len(table) == 2 * len(runs)
    mine = table[table["folder"] == "lab/results/b"].drop(columns="folder").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, runs, check_dtype=False)
    assert main(["nothing-here", "--csv", "x.csv"]) == 2 and not os.path.exists("x.csv")
    assert "nothing-here: no report folder (report.json) under it" in capsys.readouterr().err
