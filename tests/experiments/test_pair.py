"""scripts/pair.py: runs paired by seed over folders, on their common seeds, at an earlier round, over runs of
different lengths; its files read whole, and what is wrong with them named."""

import json

import pytest


from tests.helpers.script_loader import load_script as _script


def _write_curves(path, rows):
    import csv
    import gzip

    with gzip.open(path, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["method", "seed", "round", "cum_avg_regret"])
        w.writerows(rows)


def test_pair_script_pairs_runs_over_folders_on_their_common_seeds_and_names_bad_input(tmp_path, capsys):
    import numpy as np

    pair = _script("pair")
    T, rng = 20, np.random.default_rng(3)
    final = {}  # (folder, seed) -> R(T)
    for name, seeds in (("a", range(2)), ("a2", range(2, 4)), ("b", range(2, 7))):  # a + a2: seeds 0-3
        (tmp_path / name).mkdir()
        rows = []
        for s in seeds:
            for r in range(1, T + 1):
                rows.append(["NVLDB-UCB-ASYM", s, r, float(rng.uniform(0, r))])
            final[name, s] = rows[-1][3]
            rows.append(["Random", s, T, 99.0])
        _write_curves(tmp_path / name / "curves_cos.csv.gz", rows)
    a, a2, b = (str(tmp_path / n) for n in ("a", "a2", "b"))
    argv = ["--task", "cos", "--rounds", str(T), "--first", "NVLDB-UCB-ASYM", a, a2, "--second", "NVLDB-UCB-ASYM", b]
    assert pair.main(argv) == 0
    out = capsys.readouterr().out
    d = [(final["a2", s] - final["b", s]) / T for s in (2, 3)]  # seeds in common: 2, 3 (from a2)
    se = abs(d[0] - d[1]) / 2  # std (ddof=1) of two values / sqrt(2)
    assert f"difference over 2 seeds (2-3): {np.mean(d):+.3f} ± {se:.3f} ({sum(x < 0 for x in d)}/2)" in out
    assert f"R(T)/T {np.mean([final['b', s] / T for s in (2, 3)]):.3f}" in out
    # one run over two folders, alone: all four seeds
    assert pair.main(["--task", "cos", "--rounds", str(T), "--first", "NVLDB-UCB-ASYM", a, a2]) == 0
    whole = [final["a", 0], final["a", 1], final["a2", 2], final["a2", 3]]
    assert f"R(T)/T {np.mean(whole) / T:.3f} ± {np.std(whole, ddof=1) / T:.3f} over 4 seeds" in capsys.readouterr().out
    # bad input: the file, the method, the seeds and the flag are named, and no result is printed
    bad = [
        (
            ["--first", "NDB-UCB", a, "--second", "Random", b],
            f"no run of 'NDB-UCB' with T={T}; runs there: NVLDB-UCB-ASYM (T={T}), Random (T={T})",
        ),  # what is there, with its T (was: the methods with this T)
        (["--first", "Random", a, "--second", "Random", b, "--task", "square"], "curves_square.csv.gz: no such file"),
        (["--first", "Random", a, a], "seeds 0-1 of 'Random' are also in an earlier folder"),
        (["--first", a], "--first: give a method and at least one folder"),
    ]
    for extra, message in bad:
        assert pair.main(["--task", "cos", "--rounds", str(T)] + extra) == 2
        captured = capsys.readouterr()
        assert message in captured.err and captured.out == ""
    _write_curves(tmp_path / "b" / "curves_cos.csv.gz", [["Random", 9, T, 1.0]])
    assert pair.main(["--task", "cos", "--rounds", str(T), "--first", "Random", a, "--second", "Random", b]) == 2
    assert "no seed in common" in capsys.readouterr().err
    # a seed id names a stream only with its base seed (report.json records it when not 0): seeds 0-1 of
    # base seed 10 are other streams than seeds 0-1 of base seed 0, so they join a run and never pair with one
    (tmp_path / "c").mkdir()
    _write_curves(tmp_path / "c" / "curves_cos.csv.gz", [["Random", i, T, 2.0 * T] for i in range(2)])
    (tmp_path / "c" / "report.json").write_text(json.dumps({"cos/Random": {"R_T_over_T_mean": 2.0, "base_seed": 10}}))
    c = str(tmp_path / "c")
    assert pair.main(["--task", "cos", "--rounds", str(T), "--first", "Random", a, c]) == 0
    assert "R(T)/T 3.475 ± 1.703 over 4 seeds (0-1; 0-1 of base seed 10)" in capsys.readouterr().out
    assert pair.main(["--task", "cos", "--rounds", str(T), "--first", "Random", c, "--second", "Random", a]) == 2
    assert "ran seeds 0-1 of base seed 10, Random ran 0-1" in capsys.readouterr().err


def test_pair_script_reads_an_earlier_round_and_pairs_runs_of_different_lengths(tmp_path, capsys):
    import numpy as np

    pair = _script("pair")
    rng = np.random.default_rng(5)

    def kept(T):  # what reproduce.py commits
        return [r for r in range(1, T + 1) if r <= 100 or r % 10 == 0]

    R = {}  # (folder, seed, round) -> R(t)
    for name, T in (("long", 150), ("short", 40)):
        (tmp_path / name).mkdir()
        rows = []
        for s in range(3):
            for r in kept(T):
                R[name, s, r] = float(rng.uniform(0, r))
                rows.append(["NVLDB-UCB-ASYM", s, r, R[name, s, r]])
        _write_curves(tmp_path / name / "curves_square.csv.gz", rows)
    long, short = str(tmp_path / "long"), str(tmp_path / "short")
    # one run read at round 120: R(120)/120 over its seeds, by a plain loop
    assert pair.main(["--task", "square", "--rounds", "150", "--at", "120", "--first", "NVLDB-UCB-ASYM", long]) == 0
    v = [R["long", s, 120] / 120 for s in range(3)]
    assert f"R(120)/120 {np.mean(v):.3f} ± {np.std(v, ddof=1):.3f} over 3 seeds (0-2)" in capsys.readouterr().out
    # runs of different T: read at the shorter one's end unless --at says otherwise
    for extra, t in (([], 40), (["--at", "30"], 30)):
        argv = [
            "--task",
            "square",
            "--rounds",
            "150",
            "40",
            "--first",
            "NVLDB-UCB-ASYM",
            long,
            "--second",
            "NVLDB-UCB-ASYM",
            short,
        ] + extra
        assert pair.main(argv) == 0
        d = [(R["long", s, t] - R["short", s, t]) / t for s in range(3)]
        out = capsys.readouterr().out
        assert f"difference over 3 seeds (0-2): {np.mean(d):+.3f} ± {np.std(d, ddof=1) / np.sqrt(3):.3f}" in out
        assert f"R({t})/{t}" in out
    # bad input names the flag or the file and the round
    bad = [
        (["--rounds", "150", "--at", "105", "--first", "NVLDB-UCB-ASYM", long], "has no round 105"),
        (
            [
                "--rounds",
                "150",
                "40",
                "--at",
                "60",
                "--first",
                "NVLDB-UCB-ASYM",
                long,
                "--second",
                "NVLDB-UCB-ASYM",
                short,
            ],
            "--at: round 60 is past the end of a run",
        ),
        (["--rounds", "150", "40", "30", "--first", "NVLDB-UCB-ASYM", long], "--rounds: give one T, or two"),
        (["--rounds", "150", "40", "--first", "NVLDB-UCB-ASYM", long], "give --second, or one T"),
        (["--rounds", "150", "--at", "0", "--first", "NVLDB-UCB-ASYM", long], "--at"),
    ]
    for argv, message in bad:
        assert pair.main(["--task", "square"] + argv) == 2
        captured = capsys.readouterr()
        assert message in captured.err and captured.out == ""


@pytest.mark.parametrize(
    "rows, report, message",
    [
        (
            [["Random", 0, 2, 1.0], ["Random", 0, 2, 9.0]],
            None,
            "line 3: Random round 2 seed 0 is given twice",
        ),  # the later row won: the paired difference moved from +0.010 to -0.396
        (
            [["Random", 0, 2, 1.0], ["Random", 1, 2, float("nan")]],
            None,
            "line 3: Random round 2 seed 1: nan is not finite",
        ),
        (
            [["Random", 0, 1, 1.0], ["Random", 1, 1, 1.0], ["Random", 0, 2, 1.0]],
            None,
            "Random round 2 lacks or adds seed(s) [1] (the others have [0, 1])",
        ),  # a KeyError traceback
        ([["Random", 0, 2, 1.0]], "[1, 2]", "report.json: expected a JSON object of runs, got list"),
        ([["Random", 0, 2, 1.0]], "null", "report.json: expected a JSON object of runs, got NoneType"),
        ([["Random", 0, 2, 1.0]], '{"cos/Random": [1]}', "report.json: its entry cos/Random is not a run's record"),
    ],
)
def test_pair_reads_its_files_whole_and_names_what_is_wrong(tmp_path, capsys, rows, report, message):
    pair = _script("pair")
    _write_curves(tmp_path / "curves_cos.csv.gz", rows)
    if report is not None:
        (tmp_path / "report.json").write_text(report)
    assert pair.main(["--task", "cos", "--rounds", "2", "--first", "Random", str(tmp_path)]) == 2
    got = capsys.readouterr()
    assert message in got.err and got.out == "" and len(got.err.strip().splitlines()) == 1, got.err
