"""A damaged file is never taken for whole (issue "No run under another's name", family 4): summary.json,
report.json and curves.csv cut short or corrupted are refused in one line naming the file."""

import os

import pytest

from nvldb_pl.experiments.grid import find_run
from nvldb_pl.machinery.host import read_json
from nvldb_pl.experiments.report import load_curves

CURVES = "round,seed,cum_avg_regret,cum_weak_regret\n1,0,0.5,0.1\n1,1,0.4,0.1\n2,0,0.9,0.2\n2,1,0.7,0.2\n"


def test_a_json_file_cut_short_is_refused_naming_it(tmp_path):
    f = tmp_path / "report.json"
    f.write_text('{"cos/NVLDB-UCB-ASYM": {"base_seed": 0, "R_T_over_T_mean": 0.3')
    with pytest.raises(ValueError) as err:
        read_json(str(f))
    assert str(err.value).startswith(f"{f}: damaged, not read (not valid JSON") and "\n" not in str(err.value)
    f.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match="damaged, not read"):
        read_json(str(f))


def test_a_run_whose_summary_is_damaged_is_named_not_reused_or_skipped(tmp_path):
    run = tmp_path / "lightning_logs" / "version_0"
    run.mkdir(parents=True)
    (run / "curves.csv").write_text(CURVES)
    (run / "summary.json").write_text('{"rounds": 2, "num_seeds": 2, "base_se')
    with pytest.raises(ValueError, match=f"{run / 'summary.json'}: damaged"):
        find_run(str(tmp_path), 2, 2, 0)


@pytest.mark.parametrize(
    "text, message",
    [
        (CURVES[:-12], "round 2 lacks some of the seeds"),  # the last row lost
        (CURVES[:-6], "damaged or not a curves file"),  # the last row cut in the middle
        ("round,seed\n", "no rounds"),
        (CURVES.replace("0.9", "x"), "damaged or not a curves file"),
    ],
)
def test_a_curves_file_cut_short_is_refused_naming_it(tmp_path, text, message):
    (tmp_path / "curves.csv").write_text(text)
    with pytest.raises(ValueError) as err:
        load_curves(str(tmp_path))
    assert str(err.value).startswith(os.path.join(str(tmp_path), "curves.csv")) and message in str(err.value)


def test_a_whole_curves_file_reads(tmp_path):
    (tmp_path / "curves.csv").write_text(CURVES)
    rounds, seeds, R = load_curves(str(tmp_path))
    assert list(rounds) == [1, 2] and seeds == [0, 1] and R.tolist() == [[0.5, 0.4], [0.9, 0.7]]
