"""The reproduction script's refusals, each before any run: an unknown method or task, a --set key or value no
method takes, a bad --out, a GPU not there, several processes."""

import os

import pytest

from tests.helpers.script_loader import load_script as _script


def _main(argv):
    return _script("reproduce").main(argv)


def test_reproduce_rejects_unknown_method(tmp_path, capsys):
    assert (
        _main(["--out", str(tmp_path), "--methods", "NVLDB-UCB-ASYM", "Oracle", "--rounds", "5", "--seeds", "1"]) == 2
    )
    assert "--methods" in capsys.readouterr().err


def test_reproduce_refuses_a_set_key_no_method_takes_before_running(tmp_path, capsys):
    assert (
        _main(
            [
                "--out",
                str(tmp_path),
                "--methods",
                "NVLDB-UCB-ASYM",
                "Random",
                "--rounds",
                "5",
                "--seeds",
                "1",
                "--tasks",
                "cos",
                "--set",
                "widht=8",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--set: ['widht'] is not an argument of any method run here" in err and "'network'" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--set", "network.width=0"], "NVLDB-UCB-ASYM on cos: model.network.width: must be an integer >= 1, got 0"),
        (["--set", "beta=.inf"], "--set: beta='.inf' is not a number"),
        (["--set", "grad_steps=1.5"], "--set: grad_steps=1.5 is not an integer"),
        (["--set", "layers=0", "--methods", "Random", "VACDB"], "VACDB on cos: model.layers: must be an integer >= 1"),
        (["--dim", "0"], "data.dim: must be an integer >= 1, got 0"),
        (["--tasks", "cos", "statlog"], "data.data_dir: "),
        # numpy's own refusal named no option: "expected non-negative integer"
        (["--base-seed", "-1"], "--base-seed: must be between 0 and 4294967295, got -1"),
        (["--base-seed", str(2**32)], "--base-seed: must be between 0 and 4294967295, got 4294967296"),
    ],
)
def test_reproduce_refuses_a_bad_value_or_missing_data_before_any_run(tmp_path, capsys, monkeypatch, extra, message):
    """A value no method can run with, or a UCI task without its files, was found only when its run came,
    after the runs before it (a Random run first here; hours at full size)."""
    monkeypatch.setenv("NVLDB_UCI_DIR", str(tmp_path / "no-uci"))
    argv = [
        "--out",
        str(tmp_path / "out"),
        "--methods",
        "Random",
        "NVLDB-UCB-ASYM",
        "--rounds",
        "5",
        "--seeds",
        "1",
        "--tasks",
        "cos",
    ]
    assert _main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not list((tmp_path / "out").rglob("summary.json"))


@pytest.mark.parametrize(
    "bad", ["--out a file", "--literal-from a missing folder", "--literal-from without its curves"]
)
def test_reproduce_refuses_a_bad_out_or_literal_from_before_running(tmp_path, capsys, bad):
    blocker = tmp_path / "afile"
    blocker.write_text("kept")
    out, extra = tmp_path / "report", []
    if bad == "--out a file":
        out, said = blocker / "report", f"--out: {blocker / 'report'} cannot be made: {blocker} is a file, not a folder"
    elif bad == "--literal-from a missing folder":
        extra, said = ["--literal-from", str(tmp_path / "nope")], f"--literal-from: {tmp_path / 'nope'} is not a folder"
    else:
        extra, said = (
            ["--literal-from", str(tmp_path)],
            f"--literal-from: no curves_<task>.csv.gz with T=5, 1 seeds in {tmp_path}",
        )
    assert (
        _main(["--out", str(out), "--methods", "Random", "--rounds", "5", "--seeds", "1", "--tasks", "cos", *extra])
        == 2
    )
    got = capsys.readouterr()
    assert f"error: {said}" in got.err and "[run]" not in got.out, got.err
    assert not (tmp_path / "report").exists() and blocker.read_text() == "kept"  # nothing run, nothing made


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA GPU is visible")
def test_reproduce_refuses_gpu_without_one_before_running(tmp_path, capsys):
    assert (
        _main(
            [
                "--out",
                str(tmp_path / "report"),
                "--methods",
                "Random",
                "--rounds",
                "5",
                "--seeds",
                "1",
                "--tasks",
                "cos",
                "--accelerator",
                "gpu",
            ]
        )
        == 2
    )
    assert "--accelerator gpu" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()  # --out was made before the refusal, and left empty


TORCHRUN_2 = {"TORCHELASTIC_RUN_ID": "none", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


def test_the_scripts_started_as_several_processes_are_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    """Under torchrun --nproc-per-node 2, each process of sweep.py ran every row and appended it (each row twice
    in --out); reproduce.py's and benchmark.py's runs alike. A script's runs each run in one process: refused."""
    import sys
    from nvldb_pl.loop.run import run_experiment

    for key, value in TORCHRUN_2.items():
        monkeypatch.setenv(key, value)
    said = "torchrun started 2 processes, and {} runs each of its runs in one process"
    assert (
        _main(
            [
                "--out",
                str(tmp_path / "report"),
                "--methods",
                "Random",
                "--rounds",
                "5",
                "--seeds",
                "1",
                "--tasks",
                "cos",
            ]
        )
        == 2
    )
    assert said.format(os.path.basename(sys.argv[0])) in capsys.readouterr().err
    sweep = _script("sweep")
    monkeypatch.setattr(
        "sys.argv",
        [
            "sweep.py",
            "--rounds",
            "4",
            "--seeds",
            "1",
            "--tasks",
            "cos",
            "--out",
            str(tmp_path / "s.jsonl"),
            "--grid",
            '[{"network": {"width": 4}}]',
        ],
    )
    with pytest.raises(SystemExit) as stop:
        sweep.main()
    assert stop.value.code == 2 and said.format("sweep.py") in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == []  # no report folder, no sweep file
    with pytest.raises(ValueError, match=said.format("sweep.py")):
        run_experiment({"task": "cos", "rounds": 2, "num_seeds": 1}, {})
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    s, _ = run_experiment({"task": "cos", "rounds": 2, "num_seeds": 1}, {})  # torchrun with one process: runs
    assert s["rounds"] == 2


def test_a_mapping_in_data_or_set_is_read_as_the_fit_reads_yaml():
    """task_args={freq: 1e-3} was the string '1e-3' in reproduce (YAML 1.1) but the number 0.001 in fit."""
    from nvldb_pl.experiments.arguments import parse_overrides

    assert parse_overrides(["task_args={freq: 1e-3, n: 2}"], "--data") == {"task_args": {"freq": 0.001, "n": 2}}
    assert parse_overrides(["feature_columns=[a, 1e-3]"], "--data") == {"feature_columns": ["a", 0.001]}
