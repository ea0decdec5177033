"""The reproduction script end to end on a tiny grid."""

import glob
import json
import os
import re

import pytest

from nvldb_pl.learners.registry import DEFAULT_METHODS
from tests.helpers.script_loader import load_script as _script


def _main(argv):
    return _script("reproduce").main(argv)


def test_reproduce_tiny_grid_writes_table_png_curves_and_reuses_runs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = str(tmp_path / "rep")
    argv = [
        "--out",
        out,
        "--rounds",
        "12",
        "--seeds",
        "2",
        "--tasks",
        "cos",
        "--set",
        "network.width=4",
        "grad_steps=1",
    ]
    assert _main(argv) == 0
    report = open(os.path.join(out, "report.md")).read()
    rows = re.findall(r"^\| (\S+) \| ([0-9.]+) ± ([0-9.]+) \|", report, flags=re.M)
    assert sorted(r[0] for r in rows) == sorted(DEFAULT_METHODS)
    values = [float(r[1]) for r in rows]
    assert values == sorted(values) and all(v > 0 for v in values)
    assert "--rounds 12 --seeds 2" in report
    assert "| NVLDB rule | NLDB (same rule) | NDB-UCB | NDB-TS | CoLSTIM | VACDB |" in report
    paired = re.findall(r"^\| (NVLDB-\S+) \| ([+-][0-9.]+ ± [0-9.]+ \(\d/2\)|–) \|", report, flags=re.M)
    assert [m for m, _ in paired] == [m for m in DEFAULT_METHODS if m.startswith("NVLDB-")]
    assert [c == "–" for _, c in paired] == [m != "NVLDB-UCB-ASYM" for m, _ in paired]  # only NLDB-UCB-ASYM ran
    # what --set changed, per method: the network learners took it, CoLSTIM (no network) did not
    [changed] = [ln for ln in report.splitlines() if ln.startswith("Settings each run changed")]
    assert (
        "NVLDB-UCB-ASYM `grad_steps=1 network.width=4`" in changed
        and "NDB-TS `grad_steps=1 network.width=4`" in changed
    )
    assert "CoLSTIM none" in changed and "Random none" in changed
    table = json.load(open(os.path.join(out, "report.json")))
    assert (
        table["cos/NVLDB-TS-CSYM"]["settings"] == "grad_steps=1 network.width=4"
        and "settings" not in table["cos/CoLSTIM"]
    )
    # the software the runs were made with: every run the same, said once, and each in report.json
    import torch

    [made] = [ln for ln in report.splitlines() if ln.startswith("Made with")]
    assert made.startswith("Made with nvldb_pl ") and f", torch {torch.__version__}, " in made
    assert all(v["software"]["torch"] == torch.__version__ for v in table.values()) and len(table) == len(
        DEFAULT_METHODS
    )
    # a readable PNG: real image data of a sensible size
    from matplotlib.image import imread

    img = imread(os.path.join(out, "cos.png"))
    assert img.shape[0] > 300 and img.shape[1] > 400 and img.std() > 0.01
    import gzip

    with gzip.open(os.path.join(out, "curves_cos.csv.gz"), "rt") as fh:
        lines = fh.read().splitlines()
    assert lines[0] == "method,seed,round,cum_avg_regret" and len(lines) == 1 + len(DEFAULT_METHODS) * 2 * 12
    capsys.readouterr()
    first = open(os.path.join(out, "curves_cos.csv.gz"), "rb").read()
    assert _main(argv) == 0  # the second time every run is reused
    assert open(os.path.join(out, "curves_cos.csv.gz"), "rb").read() == first  # byte for byte
    log = capsys.readouterr().out
    assert log.count("[reuse]") == len(DEFAULT_METHODS) and "[run]" not in log


def test_reproduce_reuses_a_run_only_if_made_with_the_settings_asked(tmp_path, capsys):
    """Another --set or --dim runs anew beside the finished run (which was once reused silently); the
    report takes the run each call made or reused, with the other settings' runs on the same streams beside it, each
    then named by its settings (the defaults' by the method alone), and the same settings again reuse their run."""
    out = str(tmp_path / "rep")
    base = ["--out", out, "--rounds", "6", "--seeds", "1", "--tasks", "cos", "--methods", "NDB-UCB"]
    w4, w8 = "NDB-UCB{network.width=4}", "NDB-UCB{network.width=8}"
    calls = [  # (options, what it did, the run, its name in the report, every name there)
        (["--set", "network.width=4"], "[run]", "version_0", "NDB-UCB", ["NDB-UCB"]),
        (["--set", "network.width=8"], "[run]", "version_1", w8, [w4, w8]),
        (["--set", "network.width=4"], "[reuse]", "version_0", w4, [w4, w8]),
        (["--set", "network.width=4", "lr=0.001"], "[reuse]", "version_0", w4, [w4, w8]),
        (["--set", "network.width=4", "--dim", "7"], "[run]", "version_2", "NDB-UCB", ["NDB-UCB"]),  # other streams
        ([], "[run]", "version_3", "NDB-UCB", ["NDB-UCB", w4, w8]),
        (["--set", "network.width=32"], "[reuse]", "version_3", "NDB-UCB", ["NDB-UCB", w4, w8]),
    ]  # 32: the default, as given
    for extra, verb, version, name, names in calls:
        assert _main([*base, *extra]) == 0
        log = capsys.readouterr().out
        assert verb in log, (extra, log)
        folder = os.path.join(out, "runs", "cos", "NDB-UCB", "lightning_logs", version)
        assert (folder in log) == (verb == "[reuse]")
        made = json.load(open(os.path.join(folder, "summary.json")))["R_T_over_T_mean"]
        table = json.load(open(os.path.join(out, "report.json")))
        assert sorted(table) == sorted(f"cos/{n}" for n in names), extra
        reported = table[f"cos/{name}"]["R_T_over_T_mean"]
        assert reported == pytest.approx(made, abs=1e-6), (extra, version)  # the report shows that run
    means = {
        json.load(open(p))["R_T_over_T_mean"]
        for p in glob.glob(os.path.join(out, "runs", "*", "*", "*", "*", "summary.json"))
    }
    assert len(means) == 4  # four different runs, so the check above could tell them apart


def test_wall_cell_names_a_non_cpu_device(tmp_path, capsys):
    from nvldb_pl.experiments.report import wall_cell

    assert wall_cell({"wall_seconds": 12.4}) == "12"  # made before the device was recorded: CPU
    assert wall_cell({"wall_seconds": 12.6, "device": "cpu"}) == "13"
    assert wall_cell({"wall_seconds": 7.0, "device": "cuda: NVIDIA H100"}) == "7 (cuda: NVIDIA H100)"
    out = str(tmp_path / "rep")
    assert _main(["--out", out, "--rounds", "4", "--seeds", "1", "--tasks", "cos", "--methods", "Random"]) == 0
    import glob

    (path,) = glob.glob(os.path.join(out, "runs", "cos", "Random", "lightning_logs", "version_*", "summary.json"))
    assert json.load(open(path))["device"] == "cpu"


def test_paired_differences_match_a_seed_by_seed_loop():
    import math
    import numpy as np
    from nvldb_pl.experiments.curves import paired_lines

    T = 10
    rng = np.random.default_rng(0)
    rounds = np.arange(1, T + 1)

    def run(seeds):
        return rounds, list(seeds), np.cumsum(rng.random((T, len(seeds))), axis=0)

    curves = {
        "NVLDB-UCB-ASYM": run([0, 1, 2, 3]),
        "NLDB-UCB-ASYM": run([3, 2, 1, 0]),  # seeds in another order
        "NVLDB-TS-CSYM": run([0, 1, 2, 3]),
        "CoLSTIM": run([0, 1, 2, 3]),
        "VACDB": (rounds[:5], [0, 1, 2, 3], rng.random((5, 4))),
    }  # another T: not comparable
    lines = paired_lines(curves, T)
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header == ["NVLDB rule", "NLDB (same rule)", "CoLSTIM", "VACDB"]
    table = {r.split("|")[1].strip(): [c.strip() for c in r.strip("|").split("|")[1:]] for r in lines[4:] if r}
    assert list(table) == ["NVLDB-UCB-ASYM", "NVLDB-TS-CSYM"]  # the paper's order of rules
    for method, cells in table.items():
        for column, cell in zip(header[1:], cells):
            other = method.replace("NVLDB", "NLDB") if column.startswith("NLDB") else column
            if other not in curves or other == "VACDB":
                assert cell == "–"
                continue
            diffs = []
            for seed in (0, 1, 2, 3):
                mine = curves[method][2][-1, curves[method][1].index(seed)] / T
                theirs = curves[other][2][-1, curves[other][1].index(seed)] / T
                diffs.append(mine - theirs)
            mean = sum(diffs) / 4
            se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3) / 2
            wins = sum(d < 0 for d in diffs)
            assert cell == f"{mean:+.3f} ± {se:.3f} ({wins}/4)"
    assert (
        paired_lines({"CoLSTIM": curves["CoLSTIM"], "NVLDB-UCB-ASYM": curves["NVLDB-UCB-ASYM"]}, T)[2].count("|") == 4
    )
    assert paired_lines({"CoLSTIM": curves["CoLSTIM"], "Random": curves["NVLDB-TS-CSYM"]}, T) == []


def test_methods_run_one_per_call_add_up_to_one_report(tmp_path, capsys):
    """A second call with another method keeps the first call's rows; --report-only picks a subset."""
    out = str(tmp_path / "rep")
    base = ["--out", out, "--rounds", "6", "--seeds", "2", "--tasks", "cos"]

    def rows():
        text = open(os.path.join(out, "report.md")).read()
        return sorted(re.findall(r"^\| (\S+) \| [0-9.]+ ± [0-9.]+ \|", text, flags=re.M)), text

    assert _main(base + ["--methods", "Random"]) == 0
    assert rows()[0] == ["Random"]
    assert _main(base + ["--methods", "NVLDB-UCB-ASYM", "--set", "network.width=4", "grad_steps=1"]) == 0
    names, text = rows()
    assert names == ["NVLDB-UCB-ASYM", "Random"]
    assert "plus the runs of earlier calls in this folder: `Random`" in text
    assert (
        _main(base + ["--methods", "NLDB-UCB-ASYM", "--set", "network.width=4", "grad_steps=1", "--rounds", "5"]) == 0
    )
    assert rows()[0] == ["NLDB-UCB-ASYM"]  # another T: the T=6 runs are not mixed in
    assert _main(base + ["--methods", "Random", "--report-only"]) == 0
    assert rows()[0] == ["Random"]


def test_distinct_floor_bounds_every_distinct_run_and_equals_the_per_round_gap():
    """distinct_floor is the mean over rounds and seeds of (best - second best) / 2; a run that never
    duels an arm with itself has at least that average regret, whatever its rule."""
    import numpy as np
    from nvldb_pl.environments.stream import RoundStream, StreamSpec
    from nvldb_pl.experiments.report import distinct_floor
    from nvldb_pl.loop.run import run_experiment

    floor = distinct_floor("square", 30, 3, base_seed=4)
    gaps = []
    for batch in RoundStream(StreamSpec(task="square", rounds=30, num_seeds=3, base_seed=4)):
        for u in batch["utilities"].double().numpy():
            top = sorted(u, reverse=True)
            gaps.append((top[0] - top[1]) / 2)
    assert floor == pytest.approx(float(np.mean(gaps)), rel=1e-12)
    for strategy in ("ucb_asym", "ts_osym", "ucb_csym"):
        summary, _ = run_experiment(
            {"task": "square", "rounds": 30, "num_seeds": 3, "seed": 4},
            {"network": {"width": 8}, "grad_steps": 2, "strategy": strategy, "distinct_arms": True},
        )
        assert summary["R_T_over_T_mean"] >= floor
    from nvldb_pl.environments.uci import default_data_dir

    if os.path.isdir(default_data_dir()):  # one arm has u = 1, the rest 0: every distinct pair costs 0.5
        assert distinct_floor("statlog", 30, 3) == pytest.approx(0.5)
    assert distinct_floor("tests.extensions.tasks.Sine", 30, 3, arms=3) > 0  # any task, from its stream


def test_reproduce_dim_sets_the_synthetic_context_dimension(tmp_path):
    out = str(tmp_path / "rep")
    assert (
        _main(
            [
                "--out",
                out,
                "--tasks",
                "cos",
                "--dim",
                "3",
                "--rounds",
                "4",
                "--seeds",
                "1",
                "--methods",
                "NVLDB-UCB-ASYM",
                "--set",
                "network.width=4",
                "grad_steps=1",
            ]
        )
        == 0
    )
    import glob

    [hparams] = glob.glob(os.path.join(out, "runs", "cos", "NVLDB-UCB-ASYM", "lightning_logs", "*", "hparams.yaml"))
    assert "dim: 3\n" in open(hparams).read()
    # the report names d, and its a2 != a1 floor is that of the d = 3 streams (not the default d = 5)
    from nvldb_pl.experiments.report import distinct_floor

    report = open(os.path.join(out, "report.md")).read()
    assert "## cos (T=4, 1 seeds, d=3)" in report
    floor = distinct_floor("cos", 4, 1, 0, dim=3)
    assert floor != distinct_floor("cos", 4, 1, 0) and f"below {floor:.3f} on these streams" in report


def test_paper_column_quotes_the_value_stated_for_the_runs_width_and_horizon_only(tmp_path, monkeypatch):
    from nvldb_pl.experiments.report import PAPER, paper_value

    # the appendix's width table: R(T)/T at T = 2000 and 10000 differ, and no T=300 value exists
    assert paper_value("square", "NVLDB-UCB-ASYM", 5, 500, 2000) == "1.66 ± 0.78"
    assert paper_value("square", "NVLDB-UCB-ASYM", 5, 500, 10000) == "0.54 ± 0.19"
    assert paper_value("square", "NVLDB-UCB-ASYM", 5, 500, 300) == ""
    assert paper_value("square", "NVLDB-UCB-ASYM", 5, 32, 2000) == ""
    assert paper_value("statlog", "NVLDB-UCB-OSYM", 63, 32, 500).startswith("0.017 at T=200")  # names its own T
    # in the report: quoted for the run's width and T only (a stand-in value for a short run)
    monkeypatch.setitem(PAPER, ("square", "NVLDB-UCB-ASYM", 5, 4), {3: "1.23 ± 0.45"})
    for width, rounds, expected in ((4, 3, "1.23 ± 0.45"), (4, 4, ""), (5, 3, "")):
        out = str(tmp_path / f"m{width}T{rounds}")
        assert (
            _main(
                [
                    "--out",
                    out,
                    "--tasks",
                    "square",
                    "--rounds",
                    str(rounds),
                    "--seeds",
                    "1",
                    "--methods",
                    "NVLDB-UCB-ASYM",
                    "--set",
                    f"network.width={width}",
                    "grad_steps=1",
                ]
            )
            == 0
        )
        [row] = [ln for ln in open(os.path.join(out, "report.md")) if ln.startswith("| NVLDB-UCB-ASYM |")]
        assert row.rstrip().rstrip("|").split("|")[-1].strip() == expected


def test_figures_put_one_rule_per_panel_against_every_baseline_with_fixed_colours():
    from nvldb_pl.learners.registry import LITERAL_SUFFIX
    from nvldb_pl.experiments.figures import figure_panels, method_style

    methods = [
        "NVLDB-UCB-ASYM",
        "NLDB-UCB-ASYM",
        "NVLDB-UCB-ASYM" + LITERAL_SUFFIX,
        "NVLDB-TS-OSYM",
        "NDB-UCB",
        "NDB-UCB" + LITERAL_SUFFIX,
        "CoLSTIM",
        "VACDB",
        "Random",
    ]
    panels = figure_panels(methods)
    assert [title for title, _ in panels] == ["UCB-ASYM", "TS-OSYM"]
    baselines = ["NDB-UCB", "NDB-UCB" + LITERAL_SUFFIX, "CoLSTIM", "VACDB", "Random"]
    assert panels[0][1] == ["NVLDB-UCB-ASYM", "NLDB-UCB-ASYM", "NVLDB-UCB-ASYM" + LITERAL_SUFFIX] + baselines
    assert panels[1][1] == ["NVLDB-TS-OSYM"] + baselines
    for _, ms in panels:  # within a panel no two methods look alike
        assert len({method_style(m) for m in ms}) == len(ms)
    # a method's look depends on its name only, whatever else is in the figure
    assert method_style("NDB-UCB") == ("tab:green", "--") and method_style("NVLDB-TS-OSYM") == ("tab:blue", "-")
    assert figure_panels(["CoLSTIM", "Random"]) == [("baselines", ["CoLSTIM", "Random"])]


def test_runs_of_another_d_in_one_out_are_never_one_table_nor_paired(tmp_path, capsys):
    """d=5 then d=10 into one --out: the d=10 call's report holds its own runs only (Random ran at d=5 is not the
    same streams), and pair.py refuses to pair a d=10 folder with a d=5 one (it paired them as the same streams)."""
    out, five = str(tmp_path / "rep"), str(tmp_path / "five")
    base = ["--rounds", "6", "--seeds", "2", "--tasks", "cos"]
    assert _main(["--out", out, *base, "--methods", "Random", "NVLDB-UCB-ASYM", "--set", "network.width=4"]) == 0
    assert _main(["--out", five, *base, "--methods", "Random"]) == 0
    assert _main(["--out", out, *base, "--methods", "NVLDB-UCB-ASYM", "--set", "network.width=4", "--dim", "10"]) == 0
    text = open(os.path.join(out, "report.md")).read()
    assert "## cos (T=6, 2 seeds, d=10)" in text and "| Random |" not in text
    assert json.load(open(os.path.join(out, "report.json")))["cos/NVLDB-UCB-ASYM"]["streams"]["dim"] == 10
    assert _main(["--out", out, *base, "--methods", "Random", "--report-only", "--dim", "10"]) == 2
    assert "--report-only: no finished runs" in capsys.readouterr().err
    pair = _script("pair").main
    capsys.readouterr()
    args = ["--task", "cos", "--rounds", "6", "--first", "NVLDB-UCB-ASYM", out, "--second", "Random", five]
    assert pair(args) == 2
    err = capsys.readouterr().err
    assert "--first and --second ran on other streams (dim 10 and 5)" in err and "not paired" in err
    assert pair(["--task", "cos", "--rounds", "6", "--first", "Random", five, "--second", "Random", five]) == 0


def test_report_json_records_a_nonzero_base_seed_so_runs_pair_only_on_their_own_streams(tmp_path):
    for base in (0, 3):
        out = str(tmp_path / f"b{base}")
        assert (
            _main(
                [
                    "--out",
                    out,
                    "--rounds",
                    "6",
                    "--seeds",
                    "2",
                    "--tasks",
                    "cos",
                    "--methods",
                    "Random",
                    "--base-seed",
                    str(base),
                ]
            )
            == 0
        )
        entry = json.load(open(os.path.join(out, "report.json")))["cos/Random"]
        assert entry.get("base_seed", 0) == base and ("base_seed" in entry) == (base != 0)


def test_run_settings_name_what_set_changed_and_nothing_a_method_or_the_data_sets_itself():
    from nvldb_pl.learners.nvldb import NVLDB
    from nvldb_pl.experiments.grid import run_settings
    from nvldb_pl.experiments.report import settings_lines

    # a default run's hparams on other data (linked fields) with its derived values (β, ε, init, bias)
    data = {"dim": 20, "arms": 7, "rounds": 300, "num_seeds": 3, "link": "probit"}
    base = dict(NVLDB(**data).hparams)
    assert base["epsilon"] is not None and base["network"]["init"] is not None  # derived, not None, in hparams
    assert run_settings("NVLDB-UCB-ASYM", base) == {}
    assert run_settings(
        "NVLDB-TS-OSYM",
        {
            **base,
            "strategy": "ts_osym",
            "network": {**base["network"], "width": 500},
            "episode": 10,
            "sampler": {"size": 256},
        },
    ) == {"network": {"width": 500}, "episode": 10, "sampler": {"size": 256}}  # a group: the fields it changed
    assert run_settings("NVLDB-UCB-ASYM", {**base, "epsilon": 0.5}) == {"epsilon": 0.5}  # a derived one, set
    assert (
        run_settings("NVLDB-UCB-ASYM", {**base, "epsilon": None, "network": {**base["network"], "init": None}}) == {}
    )  # recorded unresolved
    # the literal reading's own arguments (and what they derive) are the method, not a setting
    literal = dict(NVLDB(**data, network={"parametrization": "ntk", "bias": False}, distinct_arms=False).hparams)
    assert run_settings("NVLDB-UCB-ASYM-literal", literal) == {}
    assert run_settings("NLDB-UCB-ASYM", {**base, "variance_aware": False}) == {}
    assert run_settings("NVLDB-UCB-ASYM", {**base, "variance_aware": False}) == {"variance_aware": False}
    assert run_settings("no-such-method", {"network": {"width": 500}}) == {}
    # one line in the report: once when every run changed the same, nothing when none changed anything
    assert settings_lines({"A": "", "B": ""}) == []
    assert settings_lines({"A": "width=500", "B": "width=500"})[-1].endswith(": `width=500`.")
    assert settings_lines({"A": "width=500", "B": ""})[-1].endswith("A `width=500`; B none.")


def test_first_seed_runs_the_same_streams_as_those_seeds_of_a_run_from_zero(tmp_path):
    """A run split in parts: --first-seed 1 --seeds 2 gives seeds 1 and 2 of a 3-seed run, curve for curve."""
    from nvldb_pl.experiments.grid import find_run
    from nvldb_pl.experiments.curves import load_curves

    common = [
        "--rounds",
        "10",
        "--tasks",
        "square",
        "--methods",
        "NVLDB-UCB-ASYM",
        "--set",
        "network.width=4",
        "grad_steps=2",
    ]
    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    assert _main(["--out", whole, "--seeds", "3"] + common) == 0
    assert _main(["--out", part, "--seeds", "2", "--first-seed", "1"] + common) == 0
    _, ids_w, R_w = load_curves(find_run(os.path.join(whole, "runs", "square", "NVLDB-UCB-ASYM"), 10, 3, 0))
    _, ids_p, R_p = load_curves(find_run(os.path.join(part, "runs", "square", "NVLDB-UCB-ASYM"), 10, 2, 0, 1))
    assert ids_w == [0, 1, 2] and ids_p == [1, 2]
    assert (R_p == R_w[:, 1:]).all() and R_w[-1, 1] != R_w[-1, 0]
    # the run of seeds 1-2 is not taken for a run of seeds 0-1, and a negative first seed is refused
    assert find_run(os.path.join(part, "runs", "square", "NVLDB-UCB-ASYM"), 10, 2, 0, 0) is None
    assert _main(["--out", part, "--seeds", "2", "--first-seed", "-1"] + common) == 2


def test_report_names_the_seeds_whose_features_died(tmp_path, capsys):
    """A seed with live_feature_units 0 in its run's summary.json is named under its task's table; none, no line."""
    out = str(tmp_path / "rep")
    argv = [
        "--out",
        out,
        "--rounds",
        "12",
        "--seeds",
        "2",
        "--tasks",
        "cos",
        "--methods",
        "NVLDB-UCB-ASYM",
        "CoLSTIM",
        "--set",
        "network.width=4",
        "grad_steps=1",
    ]
    assert _main(argv) == 0
    assert "Dead φ" not in open(os.path.join(out, "report.md")).read()
    path = os.path.join(out, "runs", "cos", "NVLDB-UCB-ASYM", "lightning_logs", "version_0", "summary.json")
    summary = json.load(open(path))
    assert all(0 < s["live_feature_units"] <= summary["feature_units"] == 5 for s in summary["seeds"])
    summary["seeds"][1]["live_feature_units"] = 0
    json.dump(summary, open(path, "w"))
    assert _main(argv) == 0  # the runs are reused, the report rewritten from their summaries
    report = open(os.path.join(out, "report.md")).read()
    assert (
        "Dead φ, NVLDB-UCB-ASYM: seed 1 ended with every unit of φ at 0" in report and "Dead φ, CoLSTIM" not in report
    )


def test_the_software_line_says_it_once_when_shared_else_per_method_and_names_runs_without_it():
    from nvldb_pl.experiments.report import software_lines

    one = {
        "nvldb_pl": "0.1.0",
        "commit": "a" * 40 + "+modified",
        "torch": "2.13.0",
        "lightning": "2.6.6",
        "numpy": "2.4.6",
        "python": "3.11.7",
    }
    other = {**one, "commit": "b" * 40, "torch": "2.14.0"}
    text = "nvldb_pl 0.1.0 at commit aaaaaaaaaaaa+modified, torch 2.13.0, lightning 2.6.6, numpy 2.4.6, Python 3.11.7"
    assert software_lines({"A": one, "B": dict(one)}) == ["", f"Made with {text}."]
    assert software_lines({"A": one, "B": other}) == [
        "",
        f"Made with: A: {text}; B: nvldb_pl 0.1.0 at commit "
        f"bbbbbbbbbbbb, torch 2.14.0, lightning 2.6.6, numpy 2.4.6, Python 3.11.7.",
    ]
    assert software_lines({"A": one, "B": None}) == [
        "",
        f"Made with: A: {text}. Not recorded (made before summary.json held it): B.",
    ]
    assert software_lines({"A": None}) == [] and software_lines({"A": {**one, "commit": None}})[1] == (
        "Made with nvldb_pl 0.1.0, torch 2.13.0, lightning 2.6.6, numpy 2.4.6, Python 3.11.7."
    )


def test_the_software_line_names_earlier_parts_of_a_resumed_run_made_with_other_software():
    from nvldb_pl.experiments.report import software_lines

    one = {
        "nvldb_pl": "0.1.0",
        "commit": "a" * 40,
        "torch": "2.13.0",
        "lightning": "2.6.6",
        "numpy": "2.4.6",
        "python": "3.11.7",
    }
    other = {**one, "torch": "2.14.0"}
    text = "nvldb_pl 0.1.0 at commit aaaaaaaaaaaa, torch 2.13.0, lightning 2.6.6, numpy 2.4.6, Python 3.11.7"
    parts = [
        {"rounds": [1, 8], "accelerator": "cpu", "software": other},
        {"rounds": [9, 16], "accelerator": "cpu", "software": one},
    ]
    assert software_lines({"A": one, "B": one}, {"A": parts, "B": []}) == [
        "",
        f"Made with {text}. Earlier parts of resumed runs made with other software: A: rounds 1-8 with "
        f"nvldb_pl 0.1.0 at commit aaaaaaaaaaaa, torch 2.14.0, lightning 2.6.6, numpy 2.4.6, Python 3.11.7.",
    ]
    assert software_lines({"A": one}, {"A": parts[1:]}) == ["", f"Made with {text}."]  # the same software: nothing


def test_the_curves_figure_draws_committed_runs_paired_by_seed(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from tests.helpers.script_loader import load_script

    fig = load_script("diagnostics/curves_figure")
    root = os.path.join(os.path.dirname(__file__), "..", "..", "lab", "results", "probe", "long10k")
    out = tmp_path / "f.png"
    runs = [
        "--run",
        "a",
        "NVLDB-UCB-ASYM",
        os.path.join(root, "m32"),
        "--run",
        "b",
        "NVLDB-UCB-ASYM",
        os.path.join(root, "m32-self"),
    ]
    assert fig.main(["--out", str(out), "--tasks", "square", "--rounds", "10000", *runs]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        fig.main(
            [
                "--out",
                str(out),
                "--tasks",
                "square",
                "--rounds",
                "10000",
                "--run",
                "c",
                "NDB-UCB",
                os.path.join(root, "m32"),
            ]
        )
        == 2
    )
    assert "has no run of 'NDB-UCB' to T=10000" in capsys.readouterr().err


def test_a_truncated_curves_file_is_named_in_one_line(tmp_path):
    from nvldb_pl.experiments.curves import committed_curves

    src = os.path.join(
        os.path.dirname(__file__), "..", "..", "lab", "results", "probe", "long10k", "m32", "curves_square.csv.gz"
    )
    data = open(src, "rb").read()
    (tmp_path / "curves_square.csv.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"curves_square\.csv\.gz: damaged or not a curves file \(EOFError"):
        committed_curves(str(tmp_path), "square", 10000, None)


def test_a_second_reproduce_call_of_another_task_or_horizon_keeps_the_first_report_beside_its_own(tmp_path, capsys):
    """A second call into one --out with another task (or T) replaced report.md and report.json without a word: the
    first's rows were gone. The earlier report is kept as report.N.*, with the curves and figure this call rewrites;
    a call that extends the report (another method, same task and T) replaces it, nothing kept aside."""
    from tests.helpers.script_loader import load_script

    out = str(tmp_path / "rep")
    reproduce = load_script("reproduce")
    quick = ["--out", out, "--rounds", "6", "--seeds", "2"]
    assert reproduce.main(quick + ["--tasks", "cos", "--methods", "Random"]) == 0
    assert reproduce.main(quick + ["--tasks", "cos", "--methods", "MaxInP"]) == 0
    assert not os.path.exists(os.path.join(out, "report.1.md"))  # extended: both rows in the one report
    first = open(os.path.join(out, "report.md")).read()
    assert "| Random |" in first and "| MaxInP |" in first
    capsys.readouterr()
    assert reproduce.main(quick + ["--tasks", "square", "--methods", "MaxInP"]) == 0
    assert "kept as report.1.md, report.1.json" in capsys.readouterr().out
    assert open(os.path.join(out, "report.1.md")).read() == first
    assert "## square" in open(os.path.join(out, "report.md")).read()
    curves = open(os.path.join(out, "curves_square.csv.gz"), "rb").read()
    assert (
        reproduce.main(["--out", out, "--rounds", "8", "--seeds", "2", "--tasks", "square", "--methods", "MaxInP"]) == 0
    )
    assert open(os.path.join(out, "curves_square.2.csv.gz"), "rb").read() == curves  # T=6's curves, kept
    assert "(T=8, 2 seeds)" in open(os.path.join(out, "report.md")).read()
    assert "(T=6, 2 seeds)" in open(os.path.join(out, "report.2.md")).read()


def test_a_run_with_a_network_of_ones_own_is_reported_under_the_name_it_ran_as(tmp_path):
    """reproduce.py --set network=... reported (and pair.py read) the run as plain NVLDB-UCB-ASYM: a result under a
    name it did not run. The report's row, report.json and the curves name it as its summary does."""
    import gzip

    from tests.helpers.script_loader import load_script

    out = str(tmp_path / "rep")
    args = ["--out", out, "--tasks", "cos", "--methods", "NVLDB-UCB-ASYM", "--rounds", "6", "--seeds", "2"]
    assert load_script("reproduce").main(args + ["--set", "network.module=tests.extensions.networks.LayerNormMLP"]) == 0
    name = "NVLDB-UCB-ASYM[LayerNormMLP]"
    assert f"| {name} |" in open(os.path.join(out, "report.md")).read()
    assert list(json.load(open(os.path.join(out, "report.json")))) == [f"cos/{name}"]
    with gzip.open(os.path.join(out, "curves_cos.csv.gz"), "rt") as fh:
        assert {line.split(",")[0] for line in list(fh)[1:]} == {name}


def test_a_nested_setting_given_in_part_reuses_only_the_run_it_fills_in_to(tmp_path, capsys):
    """``--set self_duel={test: escape}`` is the escape test at its default rate: a run made at another rate is not
    it, the run made with it is reused, and the default test given by name reuses the default run."""
    out = str(tmp_path / "rep")
    base = ["--out", out, "--rounds", "6", "--seeds", "1", "--tasks", "cos", "--methods", "NVLDB-UCB-ASYM"]
    tiny = ["network.width=4", "grad_steps=2"]
    calls = [
        (["--set", *tiny, "self_duel={test: escape, escape_rate: 2}"], "[run]", "version_0"),
        (["--set", *tiny, "self_duel={test: escape}"], "[run]", "version_1"),
        (["--set", *tiny, "self_duel={test: escape, escape_rate: 1.0}"], "[reuse]", "version_1"),
        (["--set", *tiny], "[run]", "version_2"),
        (["--set", *tiny, "self_duel={test: deep_diag}"], "[reuse]", "version_2"),
    ]
    for extra, verb, version in calls:
        assert _main([*base, *extra]) == 0
        log = capsys.readouterr().out
        assert verb in log, (extra, log)
        folder = os.path.join(out, "runs", "cos", "NVLDB-UCB-ASYM", "lightning_logs", version)
        assert (folder in log) == (verb == "[reuse]"), (extra, log)


def test_two_variants_of_one_method_sit_in_one_report_and_pair(tmp_path, capsys):
    """The defaults and another --set of one method in one --out: two rows, the other named by its settings, paired
    seed by seed by scripts/pair.py under those names (was: the newer run replaced the other's row)."""
    out = str(tmp_path / "rep")
    base = ["--out", out, "--rounds", "8", "--seeds", "2", "--tasks", "cos", "--methods", "NVLDB-UCB-ASYM"]
    assert _main([*base, "--set", "network.width=4"]) == 0
    assert _main([*base, "--set", "network.width=4", "lr=0.01"]) == 0
    capsys.readouterr()
    table = json.load(open(os.path.join(out, "report.json")))
    slow, fast = "NVLDB-UCB-ASYM{network.width=4}", "NVLDB-UCB-ASYM{lr=0.01;network.width=4}"
    assert sorted(table) == sorted([f"cos/{slow}", f"cos/{fast}"])
    rows = re.findall(r"^\| (\S+) \| ([0-9.]+) ± ", open(os.path.join(out, "report.md")).read(), flags=re.M)
    assert {name for name, _ in rows} == {slow, fast}
    pair = _script("pair")
    assert pair.main(["--task", "cos", "--rounds", "8", "--first", fast, out, "--second", slow, out]) == 0
    said = capsys.readouterr().out
    mean = table[f"cos/{fast}"]["R_T_over_T_mean"]
    assert f"{fast} in {out}: R(T)/T {mean:.3f}" in said and "difference over 2 seeds (0-1)" in said


def test_a_one_process_grid_says_its_progress_between_runs(tmp_path, capsys):
    out = str(tmp_path / "rep")
    argv = ["--out", out, "--rounds", "4", "--seeds", "1", "--tasks", "cos", "square", "--methods", "Random"]
    assert _main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[grid]")]
    assert [re.sub(r", \d+ s$", "", line) for line in lines] == ["[grid]  1 of 2 done, 1 left"]
