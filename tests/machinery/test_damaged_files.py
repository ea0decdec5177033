"""A damaged file is never taken for whole (issue "No run under another's name", family 4): summary.json,
report.json and curves.csv cut short or corrupted are refused in one line naming the file."""

import os

import pytest

from nvldb_pl.experiments.grid import find_run
from nvldb_pl.machinery.host import read_json
from nvldb_pl.experiments.curves import load_curves

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


GOOD_SUMMARY = '{"rounds": 2, "num_seeds": 2, "base_seed": 0, "seeds": [{"seed": 0, "cum_avg_regret": 0.9}, {"seed": 1, "cum_avg_regret": 0.7}]}'


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("summary.json", "[1, 2]", "summary.json: damaged: a run's summary is a JSON object, found list"),
        ("summary.json", "null", "summary.json: damaged: a run's summary is a JSON object, found NoneType"),
        ("summary.json", '{"rounds": 2, "num_seeds": 2, "base_seed": 0}', "summary.json: damaged: no 'seeds' list"),
        ("summary.json", GOOD_SUMMARY.replace('{"seed": 0, "cum_avg_regret": 0.9}', "[1]"), "seeds[0] is not a seed"),
        ("summary.json", GOOD_SUMMARY.replace('"seed": 1, ', ""), "seeds[1] is not a seed's record"),
        ("hparams.yaml", "{a: [", "hparams.yaml: damaged, not read (not valid YAML"),
        ("hparams.yaml", "- 1\n", "hparams.yaml: damaged: a run's hyperparameters are a mapping, found list"),
        ("curves.csv", CURVES + "2,1,0.7,0.2\n", "round 2 of seed 1 is given twice"),
        ("curves.csv", CURVES.replace("0.9", "nan"), "round 2 of seed 0 is nan"),
    ],
)
def test_a_run_folders_file_of_the_wrong_shape_is_refused_naming_it(tmp_path, name, text, message):
    """reproduce.py's reuse and --report-only and the report read a run's files whole: a summary that is a list or
    null, a seed entry that is a list or lacks its seed, an hparams.yaml invalid or a list, a curves file with a row
    given twice or a NaN each ended in AttributeError, KeyError, a YAML traceback, or was taken (the later row won)."""
    from nvldb_pl.experiments.grid import run_hparams

    run = tmp_path / "lightning_logs" / "version_0"
    run.mkdir(parents=True)
    (run / "curves.csv").write_text(CURVES)
    (run / "summary.json").write_text(GOOD_SUMMARY)
    (run / "hparams.yaml").write_text("width: 8\n")
    assert find_run(str(tmp_path), 2, 2, 0) == str(run) and load_curves(str(run))[1] == [0, 1]
    (run / name).write_text(text)
    with pytest.raises(ValueError) as err:
        {"curves.csv": load_curves, "hparams.yaml": run_hparams}.get(name, lambda f: find_run(str(tmp_path), 2, 2, 0))(
            str(run)
        )
    assert str(err.value).startswith(str(run / name)) and message in str(err.value) and "\n" not in str(err.value)
