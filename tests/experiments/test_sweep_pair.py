"""scripts/sweep.py (paired hyperparameter sweeps: runs appended to a JSON-lines file, finished ones skipped,
bad input and damaged files named) and scripts/pair.py (runs paired by seed over folders)."""

import json
import os

import pytest

from nvldb_pl.environments.uci import default_data_dir

from tests.helpers.script_loader import load_script as _script


def test_sweep_appends_runs_skips_finished_ones_and_pairs_them(tmp_path, capsys):
    import sys

    sweep = _script("sweep")
    out = str(tmp_path / "s.jsonl")
    argv = [
        "sweep.py",
        "--rounds",
        "6",
        "--seeds",
        "2",
        "--tasks",
        "cos",
        "--out",
        out,
        "--grid",
        '[{"network": {"width": 4}, "grad_steps": 1}]',
        "--vary",
        "distinct_arms=false,true",
    ]
    old, sys.argv = sys.argv, argv
    try:
        sweep.main()
        sweep.main()  # everything finished: nothing runs again
        sys.argv = [*argv[:2], "8", *argv[3:]]
        sweep.main()  # another T is another run (it was once skipped as finished)
    finally:
        sys.argv = old
    rows = [json.loads(line) for line in open(out)]
    assert [(r["rounds"], r["config"]["distinct_arms"]) for r in rows] == [(6, False), (6, True), (8, False), (8, True)]
    assert all(len(r["per_seed"]) == 2 for r in rows) and rows[1]["self_duels"] == [0.0, 0.0]
    capsys.readouterr()
    sweep.summarize(out, {"distinct_arms": False})
    table = capsys.readouterr().out
    for a, b in ((rows[0], rows[1]), (rows[2], rows[3])):  # each paired with the baseline of its own T
        d = [y - x for x, y in zip(a["per_seed"], b["per_seed"])]
        assert f"{sum(d) / 2:+.3f}" in table


def _sweep_exit(sweep, monkeypatch, *argv):
    monkeypatch.setattr("sys.argv", ["sweep.py", *argv])
    with pytest.raises(SystemExit) as stop:
        sweep.main()
    return stop.value.code


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--grid", '[{"widht": 4}]'], "--grid/--vary: NVLDB takes no ['widht']"),
        (["--grid", '[{"learner": "NDB", "variance_aware": false}]'], "--grid/--vary: NDB takes no ['variance_aware']"),
        (["--grid", '[{"learner": "Oracle"}]'], "--grid: unknown learner 'Oracle'"),
        (["--grid", "{width: 4}"], "--grid: not JSON"),
        (["--grid", '{"network": {"width": 4}}'], "--grid: expected a JSON list"),
        (["--grid", "[]"], "--grid: an empty list runs nothing"),  # printed an empty table, exit 0
        (["--vary", "width"], "--vary: 'width' is not key=value"),
        (["--vary", "widht=4,8"], "--grid/--vary: NVLDB takes no ['widht']"),
        (["--tasks", "cos", "sine"], "--tasks: unknown ['sine']"),
        (["--rounds", "0"], "--rounds: must be >= 1"),
        (["--threads", "-1"], "--threads: must be >= 0"),
        # a value no learner takes, in the second entry: the first entry's run came before it
        (
            ["--grid", '[{"network": {"width": 4}, "grad_steps": 1}, {"network": {"width": 0}}]'],
            '--grid/--vary {"network": {"width": 0}} on cos: model.network.width: must be an integer >= 1, got 0',
        ),
        (["--vary", "beta=1,-1"], '"beta": -1} on cos: model.beta: must be a finite number > 0, got -1'),
    ],
)
def test_sweep_refuses_bad_input_before_running_naming_the_flag(tmp_path, capsys, monkeypatch, extra, message):
    sweep = _script("sweep")
    out = tmp_path / "s.jsonl"
    assert (
        _sweep_exit(sweep, monkeypatch, "--rounds", "4", "--seeds", "1", "--tasks", "cos", "--out", str(out), *extra)
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not out.exists()


def test_a_sweep_file_that_is_a_folder_or_holds_a_line_that_is_no_run_is_named_with_the_line(
    tmp_path, capsys, monkeypatch
):
    sweep = _script("sweep")
    run = ["--rounds", "4", "--seeds", "1", "--tasks", "cos", "--grid", '[{"network": {"width": 4}}]']
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "cos", "config": {}, "rounds": 4, "per_seed": [1.0], "self_duels": [0.0]}\n{}\n')
    for argv, said in (
        ([*run, "--out", str(tmp_path)], f"--out: {tmp_path} is a folder; give a JSON-lines file"),
        (["--summarize", str(tmp_path)], f"--summarize: {tmp_path} is a folder"),
        ([*run, "--out", str(bad)], f"--out: {bad} line 2 is not a sweep run"),
        (["--summarize", str(bad)], f"--summarize: {bad} line 2 is not a sweep run"),
        (["--summarize", str(tmp_path / "none.jsonl")], f"--summarize: {tmp_path / 'none.jsonl'}: no such file"),
    ):
        assert _sweep_exit(sweep, monkeypatch, *argv) == 2
        got = capsys.readouterr()
        assert got.err.startswith(f"error: {said}") and "| cos |" not in got.out, got.err
    assert bad.read_text().endswith("\n{}\n")  # left as it was


@pytest.mark.parametrize(
    "field,value,said",
    [
        ("per_seed", "x", "per_seed is not a list of finite numbers"),
        ("per_seed", [1.0, "a"], "per_seed is not a list of finite numbers"),
        ("per_seed", [], "per_seed is not a list of finite numbers"),
        ("per_seed", [float("nan"), 1.0], "per_seed is not a list of finite numbers"),
        ("config", [1], "config is [1], not a mapping of settings"),
        ("task", 3, "task is 3, not a task's name"),
        ("self_duels", None, "self_duels is not a list of 2 numbers"),
        ("self_duels", [0.1], "self_duels is not a list of 2 numbers"),
        ("rounds", "x", "rounds is 'x', not a horizon T >= 1"),
        ("settings", 5, "settings is 5, not a mapping"),
    ],
)
def test_a_damaged_row_is_named_with_its_line_and_field_not_a_traceback(
    field, value, said, tmp_path, capsys, monkeypatch
):
    """--summarize on a hand-edited or damaged row stopped with a TypeError or ZeroDivisionError."""
    row = {"task": "cos", "config": {}, "rounds": 4, "per_seed": [1.0, 2.0], "self_duels": [0.0, 0.5]}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row) + "\n" + json.dumps({**row, field: value}) + "\n")
    assert _sweep_exit(_script("sweep"), monkeypatch, "--summarize", str(bad)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --summarize: {bad} line 2 is not a sweep run: {said}") and err.count("\n") == 1, err


def test_a_sweep_file_whose_last_line_was_cut_short_goes_on_without_it(tmp_path, capsys, monkeypatch):
    """A sweep killed (or a disk filled) while a run's line was written: that line holds no finished run. The
    summary leaves it out, saying so; the sweep run again removes it, saying so, and appends after the whole lines."""
    sweep = _script("sweep")
    out = tmp_path / "s.jsonl"
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
            str(out),
            "--grid",
            '[{"network": {"width": 4}, "grad_steps": 1}, {"network": {"width": 6}, "grad_steps": 1}]',
        ],
    )
    sweep.main()
    whole = out.read_text()
    first, second = whole.splitlines()
    out.write_text(first + "\n" + second[: len(second) // 2])  # the second run's line cut short
    capsys.readouterr()
    sweep.summarize(str(out), {})
    got = capsys.readouterr()
    assert "ends in a line cut short" in got.err and got.out.count("| cos |") == 1
    sweep.main()  # the second run again
    got = capsys.readouterr()
    assert f"--out: {out} ends in a line cut short" in got.err and got.out.count("| cos |") == 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["config"]["network"]["width"] for r in rows] == [4, 6]
    assert rows[0] == json.loads(first) and rows[1]["per_seed"] == json.loads(second)["per_seed"]  # the same run again


@pytest.mark.skipif(not os.path.isdir(default_data_dir()), reason="UCI data folder absent")
def test_sweep_runs_a_uci_task_in_its_shape(tmp_path, capsys, monkeypatch):
    """statlog's block-encoded contexts (d = 63, K = 7): the sweep ran it with the synthetic shape and
    stopped with data.arms' error."""
    sweep = _script("sweep")
    out = tmp_path / "s.jsonl"
    monkeypatch.setattr(
        "sys.argv",
        [
            "sweep.py",
            "--rounds",
            "4",
            "--seeds",
            "1",
            "--tasks",
            "statlog",
            "--out",
            str(out),
            "--grid",
            '[{"network": {"width": 4}, "grad_steps": 1}]',
        ],
    )
    sweep.main()
    [row] = [json.loads(line) for line in open(out)]
    assert row["task"] == "statlog" and len(row["per_seed"]) == 1


def test_the_scripts_take_a_tilde_after_an_equals_sign_as_the_home_folder(tmp_path, capsys, monkeypatch):
    """``--out=~/x`` reaches a script unexpanded (no shell expands ``~`` after ``=``): reproduce.py and sweep.py
    made a folder literally named ``~`` in the working folder, and sweep.py/pair.py did not find ``~/...``."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    reproduce, sweep, pair = _script("reproduce"), _script("sweep"), _script("pair")
    assert (
        reproduce.main(["--out=~/rep", "--rounds", "5", "--seeds", "2", "--tasks", "cos", "--methods", "Random"]) == 0
    )
    assert (home / "rep" / "curves_cos.csv.gz").is_file()
    assert pair.main(["--task", "cos", "--rounds", "5", "--first", "Random", "~/rep"]) == 0  # a quoted ~ in a folder
    assert "Random in " + str(home / "rep") + ": R(T)/T" in capsys.readouterr().out
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
            "--out=~/s.jsonl",
            "--grid",
            '[{"network": {"width": 4}, "grad_steps": 1}]',
        ],
    )
    sweep.main()
    assert len((home / "s.jsonl").read_text().splitlines()) == 1
    capsys.readouterr()
    monkeypatch.setattr("sys.argv", ["sweep.py", "--summarize=~/s.jsonl"])
    sweep.main()
    assert "cos" in capsys.readouterr().out
    assert os.listdir(work) == []  # no folder named ~ (nor anything else) in the working folder


def test_ctrl_c_in_a_sweep_says_which_run_was_cut_and_the_same_command_goes_on(tmp_path, capsys, monkeypatch):
    """Ctrl-C in a sweep's run exited 1 without a word (Lightning's sys.exit(1) inside fit, its notice an info
    line a quiet run does not show). Now: exit 130, the run cut short named, the finished ones kept."""
    import signal

    from tests.loop.test_stops import SignalAt

    from nvldb_pl.experiments import sweep as package_sweep

    sweep = _script("sweep")
    run, calls = package_sweep.run_experiment, []

    def second_run_interrupted(*args, **kwargs):
        calls.append(1)
        return run(*args, **kwargs, callbacks=(SignalAt(3),) if len(calls) == 2 else ())

    monkeypatch.setattr(package_sweep, "run_experiment", second_run_interrupted)
    out = tmp_path / "s.jsonl"
    argv = [
        "sweep.py",
        "--rounds",
        "6",
        "--seeds",
        "2",
        "--tasks",
        "cos",
        "--out",
        str(out),
        "--grid",
        '[{"network": {"width": 4}, "grad_steps": 1}]',
        "--vary",
        "distinct_arms=false,true",
    ]
    monkeypatch.setattr("sys.argv", argv)
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (pytest may ignore it)
    try:
        with pytest.raises(SystemExit) as stop:
            sweep.main()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Lightning's Ctrl-C left it ignored
    finally:
        signal.signal(signal.SIGINT, outside)
    assert stop.value.code == 130
    assert (
        f'stopped by Ctrl-C: cos {{"network": {{"width": 4}}, "grad_steps": 1, "distinct_arms": true}} was cut short and is not '
        f"written; the runs finished (1 in this call) are in {out}, and the same command goes on from this one"
        in capsys.readouterr().err
    )
    assert [json.loads(line)["config"]["distinct_arms"] for line in open(out)] == [False]
    sweep.main()  # the same command: the finished run skipped, the cut one run
    assert [json.loads(line)["config"]["distinct_arms"] for line in open(out)] == [False, True]


def test_sweep_runs_on_the_device_asked_records_it_and_the_software_and_refuses_a_missing_gpu_up_front(
    tmp_path, capsys, monkeypatch
):
    import torch

    sweep = _script("sweep")
    out = tmp_path / "s.jsonl"
    argv = [
        "--rounds",
        "4",
        "--seeds",
        "1",
        "--tasks",
        "cos",
        "--out",
        str(out),
        "--grid",
        '[{"network": {"width": 4}}]',
    ]
    monkeypatch.setattr("sys.argv", ["sweep.py", *argv, "--accelerator", "cpu"])
    sweep.main()
    row = json.loads(out.read_text())
    assert row["device"] == "cpu" and row["software"]["torch"] == torch.__version__
    if torch.cuda.is_available():
        return
    out.unlink()
    assert _sweep_exit(sweep, monkeypatch, *argv, "--accelerator", "gpu") == 2
    assert "error: --accelerator gpu: torch sees no CUDA GPU here" in capsys.readouterr().err and not out.exists()


def test_a_one_seed_sweep_says_one_seed_in_its_header(tmp_path, capsys, monkeypatch):
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
            "--grid",
            '[{"network": {"width": 4}, "grad_steps": 1}]',
        ],
    )
    sweep.main()
    out = capsys.readouterr().out
    assert "(T=4, one seed)" in out and "1 seeds" not in out


def test_a_sweep_run_again_says_which_runs_it_did_not_run_again_and_where_they_were_made(tmp_path, capsys, monkeypatch):
    """Runs already in --out were skipped without a word: a sweep asked for on a GPU after one on the CPU printed
    an empty table. It now says how many, and on which device they were made."""
    sweep = _script("sweep")
    out = tmp_path / "s.jsonl"
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
            str(out),
            "--grid",
            '[{"network": {"width": 4}, "grad_steps": 1}, {"network": {"width": 6}, "grad_steps": 1}]',
        ],
    )
    sweep.main()
    assert "were not run again" not in capsys.readouterr().err
    lines = out.read_text().splitlines()
    first = json.loads(lines[0])
    out.write_text(json.dumps({**first, "device": "cuda: NVIDIA H200"}) + "\n" + lines[1] + "\n")
    sweep.main()
    said = capsys.readouterr()
    assert (
        f"2 of the runs asked are already in {out} (1 on cpu, 1 on cuda: NVIDIA H200) and were not run again; "
        f"--summarize {out} shows them"
    ) in said.err
    assert len(out.read_text().splitlines()) == 2


def test_a_row_made_under_other_defaults_is_refused_not_skipped_and_not_paired(tmp_path, capsys, monkeypatch):
    """Rows are keyed by their config, and ``{}`` names the defaults of the code that ran it: after a default
    changed, a sweep run again skipped the old row as finished and paired it with new ones. Rows now record every
    setting as run; one that is not what this code makes of its config, or one made before rows recorded them, is
    refused before anything runs, naming the file, the line and the setting; the summary does not pair across them."""
    sweep = _script("sweep")
    out = tmp_path / "s.jsonl"
    grid = '[{"network": {"width": 4}, "grad_steps": 1}, {"network": {"width": 4}, "grad_steps": 1, "w_reg": 0.3}]'
    argv = ["--rounds", "4", "--seeds", "1", "--tasks", "cos", "--out", str(out), "--grid", grid]
    monkeypatch.setattr("sys.argv", ["sweep.py", *argv])
    sweep.main()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["settings"]["w_reg"] for r in rows] == [0.1, 0.3] and rows[0]["settings"]["self_duel"][
        "test"
    ] == "deep_diag"
    assert all(k not in rows[0]["settings"] for k in ("dim", "arms", "rounds", "num_seeds", "link"))
    sweep.main()  # the same code: skipped as finished
    assert len(out.read_text().splitlines()) == 2
    capsys.readouterr()

    moved = {**rows[0], "settings": {**rows[0]["settings"], "beta": 2.0}}  # as if beta's default had been 2
    for first, said in (
        (moved, "ran other settings than this code gives the same config (beta 2.0 -> 1.0, the row's -> this code's"),
        ({k: v for k, v in rows[0].items() if k != "settings"}, "before rows recorded their settings"),
    ):
        text = json.dumps(first) + "\n" + json.dumps(rows[1]) + "\n"
        out.write_text(text)
        assert _sweep_exit(sweep, monkeypatch, *argv) == 2
        err = capsys.readouterr().err
        assert (
            f"error: --out: {out} line 1 (cos {{\"network\": {{\"width\": 4}}, \"grad_steps\": 1}}, T=4, 1 seeds)"
            in err
            and said in err
        )
        assert out.read_text() == text  # nothing run, nothing written

    out.write_text(json.dumps(moved) + "\n" + json.dumps(rows[1]) + "\n")
    sweep.summarize(str(out), {"w_reg": None})
    table = capsys.readouterr().out
    assert "– (not paired with line 1: made under other defaults: beta 1.0 here, 2.0 there)" in table
    d = rows[1]["per_seed"][0] - rows[0]["per_seed"][0]
    both_moved = {**rows[1], "settings": {**rows[1]["settings"], "beta": 2.0}}
    for second in (rows[1], both_moved):  # the same code, or both rows under the same older default: a pair
        out.write_text(json.dumps(rows[0] if second is rows[1] else moved) + "\n" + json.dumps(second) + "\n")
        sweep.summarize(str(out), {"w_reg": None})
        table = capsys.readouterr().out
        assert f"{d:+.3f} ± " in table and "not paired" not in table


def test_a_sweep_out_that_cannot_be_written_is_refused_before_the_first_run(tmp_path, capsys, monkeypatch):
    """--out a read-only file failed with PermissionError after the run, its row lost: now refused before any run
    (the file opened as the sweep starts; the refusal as the system gives it, simulated here so root sees it too)."""
    import builtins

    sweep = _script("sweep")
    out = tmp_path / "ro.jsonl"
    out.write_text("")
    real_open = builtins.open

    def read_only(path, mode="r", *args, **kwargs):
        if str(path) == str(out) and any(c in mode for c in "aw+"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, mode, *args, **kwargs)

    def no_run(*args, **kwargs):
        raise AssertionError("a run started")

    import nvldb_pl.experiments.sweep as module

    monkeypatch.setattr(builtins, "open", read_only)
    monkeypatch.setattr(module, "run_experiment", no_run)
    code = _sweep_exit(sweep, monkeypatch, "--rounds", "4", "--seeds", "1", "--tasks", "cos", "--out", str(out))
    assert code == 2
    assert f"error: --out: {out} cannot be written (Permission denied); give a file this user can write" in (
        capsys.readouterr().err
    )


def test_a_second_sweep_on_one_out_is_refused_while_the_first_runs(tmp_path, capsys, monkeypatch):
    """Two sweeps on one --out each ran every config the file did not hold yet (a config run twice, its row twice):
    the sweep holds the file while it runs, and a second one is refused before any run."""
    from nvldb_pl.machinery.host import hold_existing

    sweep = _script("sweep")
    out = tmp_path / "s.jsonl"
    out.write_text("")
    held = hold_existing(str(out))  # another sweep's hold, as it runs
    try:
        code = _sweep_exit(sweep, monkeypatch, "--rounds", "4", "--seeds", "1", "--tasks", "cos", "--out", str(out))
    finally:
        os.close(held)
    assert code == 2 and out.read_text() == ""
    assert f"error: --out: {out} is being written by another sweep now" in capsys.readouterr().err
