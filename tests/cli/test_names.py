"""No run under another's name: a value given as text is parsed by its field's type, one way everywhere, and a
setting that defines a method cannot be changed under that method's name."""

import pytest

from tests.helpers.script_loader import load_script


def _reproduce(tmp_path, *args):
    return load_script("reproduce").main(["--out", str(tmp_path / "rep"), "--rounds", "4", "--seeds", "1", *args])


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--methods", "NVLDB-UCB-ASYM", "--set", "strategy=ts_csym"],
            "--set: strategy='ts_csym' changes what NVLDB-UCB-ASYM is",
        ),
        (
            ["--methods", "NLDB-UCB-ASYM", "--set", "variance_aware=true"],
            "--set: variance_aware=True changes what NLDB-UCB-ASYM is",
        ),
        (
            ["--methods", "NVLDB-UCB-ASYM-literal", "--set", "network.bias=true"],
            "changes what NVLDB-UCB-ASYM-literal is",
        ),
        (
            ["--methods", "NVLDB-UCB-ASYM", "--set", "variance_aware=Flase"],
            "--set: variance_aware='Flase' is not a bool",
        ),
        (["--methods", "NVLDB-UCB-ASYM", "--set", "network.width=8.5"], "--set: network.width=8.5 is not an integer"),
    ],
)
def test_reproduce_refuses_a_setting_that_would_run_under_another_name(tmp_path, capsys, args, message):
    assert _reproduce(tmp_path, *args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "rep" / "runs").exists()


def test_pythons_false_in_set_is_false_not_the_true_text_false(tmp_path):
    import yaml

    assert (
        _reproduce(
            tmp_path,
            "--tasks",
            "cos",
            "--methods",
            "NVLDB-UCB-ASYM",
            "--set",
            "variance_aware=False",
            "network.width=4",
        )
        == 0
    )
    [hparams] = (tmp_path / "rep" / "runs" / "cos" / "NVLDB-UCB-ASYM" / "lightning_logs").glob("*/hparams.yaml")
    assert yaml.safe_load(hparams.read_text())["variance_aware"] is False
    assert "variance_aware=False" in (tmp_path / "rep" / "report.md").read_text()  # named in the row's settings


def test_the_sweeps_grid_values_are_parsed_by_type(tmp_path, monkeypatch):
    sweep = load_script("sweep")
    grid = [{"variance_aware": "false", "network": {"width": "4"}}]
    sweep.check_grid(grid)
    assert grid == [{"variance_aware": False, "network": {"width": 4}}]
    with pytest.raises(ValueError, match="--grid/--vary: variance_aware='no' is not a bool"):
        sweep.check_grid([{"variance_aware": "no"}])


def test_the_live_apis_keyword_text_is_parsed_by_type():
    from nvldb_pl.live import DuelingBandit

    assert DuelingBandit.create(dim=3, variance_aware="false").learner.variance_mode == "none"
    with pytest.raises(ValueError, match="model: variance_aware='maybe' is not a bool"):
        DuelingBandit.create(dim=3, variance_aware="maybe")


def test_a_live_save_with_one_byte_flipped_is_refused_not_loaded(tmp_path):
    """A bandit's save damaged on disk: the archive's CRC check is run, and the file named in one line."""
    import numpy as np

    from nvldb_pl.live import DuelingBandit

    bandit = DuelingBandit.create(dim=3, grad_steps=2)
    x = np.eye(3)
    for _ in range(3):
        i, j = bandit.select(x)
        bandit.observe(x, i, j, 1)
    path = tmp_path / "b.pt"
    bandit.save(str(path))
    DuelingBandit.from_checkpoint(str(path))  # whole: loads
    data = bytearray(path.read_bytes())
    import zipfile

    with zipfile.ZipFile(path) as z:  # a byte inside the optimizer's stored data, not the zip's own structure
        info = max(z.infolist(), key=lambda i: i.file_size)
    at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + info.file_size // 2
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"b\.pt: damaged, not read \(member .* fails its CRC check\)"):
        DuelingBandit.from_checkpoint(str(path))


def test_a_second_process_going_on_with_a_run_another_is_running_is_refused(tmp_path, capsys):
    """Two `--ckpt_path last` of one run at once: the second is refused naming the holder, before it writes."""
    from nvldb_pl.cli import run_cli
    from nvldb_pl.machinery.host import hold_folder
    from tests.helpers.runs import ARGS

    root = tmp_path / "r"
    assert (
        run_cli([*ARGS, f"--trainer.default_root_dir={root}", "--data.rounds=16", "--checkpoint.every_n_rounds=8"]) == 0
    )
    folder = root / "lightning_logs" / "version_0"
    assert not (folder / ".lock").exists()  # let go of when the run ended
    other = hold_folder(str(folder))  # another process, going on with it now
    try:
        before = sorted(p.name for p in folder.iterdir())
        code = run_cli([*ARGS, f"--trainer.default_root_dir={root}", "--data.rounds=24", "--ckpt_path=last"])
        assert code == 2
        assert f"ckpt_path: {folder} is being run by another process now" in capsys.readouterr().err
        assert sorted(p.name for p in folder.iterdir()) == before  # nothing written
    finally:
        other.close()
    assert run_cli([*ARGS, f"--trainer.default_root_dir={root}", "--data.rounds=24", "--ckpt_path=last"]) == 0


def test_a_resume_on_other_data_under_the_same_settings_is_refused_naming_the_file(tmp_path, capsys):
    """The resume check compared the settings, not the data: another file of the same shape went on silently."""
    import os

    from nvldb_pl.cli import run_cli

    src = os.path.join(os.path.dirname(__file__), "..", "extensions", "flowers.csv")
    lines = open(src).read().splitlines()
    mine, other = tmp_path / "a.csv", tmp_path / "b.csv"
    mine.write_text("\n".join(lines) + "\n")
    other.write_text("\n".join(lines[:1] + lines[2:] + lines[1:2]) + "\n")  # the same rows, another order
    root = tmp_path / "r"
    common = [
        "fit",
        "--config",
        os.path.join(os.path.dirname(__file__), "..", "..", "configs", "cos.yaml"),
        "--data.task=table",
        "--data.dim=12",
        "--data.arms=3",
        "--data.num_seeds=2",
        "--model.network.width=4",
        "--model.grad_steps=1",
        "--trainer.enable_progress_bar=false",
        "--checkpoint.every_n_rounds=8",
        f"--trainer.default_root_dir={root}",
    ]
    assert run_cli([*common, f"--data.data_file={mine}", "--data.rounds=16"]) == 0
    capsys.readouterr()
    assert run_cli([*common, f"--data.data_file={other}", "--data.rounds=24", "--ckpt_path=last"]) == 2
    assert "data.data_file (its rows' sha256): checkpoint" in capsys.readouterr().err
    assert run_cli([*common, f"--data.data_file={mine}", "--data.rounds=24", "--ckpt_path=last"]) == 0


def test_the_live_api_refuses_an_answer_comparing_an_item_with_itself():
    import numpy as np

    from nvldb_pl.live import DuelingBandit

    bandit = DuelingBandit.create(dim=3)
    with pytest.raises(ValueError, match="i, j: both are item 2; an answer compares two different items"):
        bandit.observe(np.eye(3), 2, 2, 1)
    assert bandit.learner.t == 0  # not counted
    with pytest.raises(ValueError, match="model.distinct_arms: false lets the rule pick an item against itself"):
        DuelingBandit.create(dim=3, distinct_arms=False)


def test_a_text_value_that_is_a_choice_is_kept_as_text():
    """self_duel.test's "none" is a value, not Python's None (which takes the default, deep_diag), as ``--grid``
    and ``--set self_duel={test: none}`` give it."""
    from nvldb_pl.experiments.arguments import parse_overrides
    from nvldb_pl.maths.checks import typed_args
    from nvldb_pl.learners.nvldb import NVLDB

    given = typed_args(NVLDB, parse_overrides(["self_duel={test: none}", "beta=null"]), "--grid")
    assert given == {"self_duel": {"test": "none"}, "beta": None}
    assert NVLDB(num_seeds=1, rounds=5, **given).hparams.self_duel["test"] == "none"


@pytest.mark.parametrize(
    "contexts, message",
    [
        ([[1, 2, 3], [1, 2]], "contexts: not a \\[K, d\\] array of numbers"),
        ([[1 + 1j, 2, 3], [1, 2, 3]], "contexts: complex numbers; the features are real"),
    ],
)
def test_the_live_api_names_the_argument_of_ragged_or_complex_contexts(contexts, message):
    from nvldb_pl.live import DuelingBandit

    with pytest.raises(ValueError, match=message):
        DuelingBandit.create(dim=3).select(contexts)


def test_the_live_api_names_an_array_valued_outcome():
    import numpy as np

    from nvldb_pl.live import DuelingBandit

    with pytest.raises(ValueError, match=r"outcome: one answer, 1 or 0; got an array of shape \[2\]"):
        DuelingBandit.create(dim=3).observe(np.eye(3), 0, 1, np.array([1, 0]))


def test_an_epsilon_that_turns_the_variance_weighting_off_is_refused_or_said():
    """sigma_i <= 1/2, so epsilon >= 1/2 makes zeta_i = epsilon for every duel: NVLDB would run as NLDB."""
    import warnings

    from nvldb_pl.learners.nvldb import NVLDB

    with pytest.raises(ValueError, match=r"model.epsilon: 0.6 >= 0.5, .* variance_aware does nothing \(NLDB\)"):
        NVLDB(dim=5, arms=5, rounds=10, num_seeds=1, epsilon=0.6)
    with pytest.raises(ValueError, match="model.epsilon: it bounds zeta of the variance weights; with variance_aware"):
        NVLDB(dim=5, arms=5, rounds=10, num_seeds=1, epsilon=0.6, variance_aware=False)  # NLDB: it would change nothing
    NVLDB(dim=5, arms=5, rounds=10, num_seeds=1, variance_aware=False)  # NLDB with the default: nothing to say
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        NVLDB(dim=3, arms=5, rounds=10, num_seeds=1)  # the default 1/sqrt(3) = 0.577
        NVLDB(dim=5, arms=5, rounds=10, num_seeds=1)  # 1/sqrt(5) = 0.447: weighted
    assert [str(w.message) for w in said if "epsilon" in str(w.message)] == [
        "model.epsilon: 0.57735 >= 0.5, the largest sigma_i can be, so zeta_i = epsilon for every duel and "
        "variance_aware does nothing (the default 1/sqrt(d) at d=3); give model.epsilon < 0.5 to weight duels by "
        "their variance"
    ]


def test_ndb_at_a_width_whose_gram_cannot_fit_names_the_width_not_the_rounds():
    from nvldb_pl.learners.ndb import NDB

    with pytest.raises(
        ValueError,
        match=r"^model.network.width / model.network.depth \(p = 9036010 network parameters; model.gram diag",
    ):
        NDB(dim=5, arms=5, rounds=100, num_seeds=20, link="logistic", network={"width": 3000})


def test_a_run_takes_one_thread_where_a_second_buys_little_and_the_threads_given_otherwise(monkeypatch):
    from nvldb_pl.machinery.devices import ONE_THREAD_BELOW, cpu_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_threads(None, 5, 32, 300) == 1  # 5 seeds x 300 rounds x 32^2
    assert cpu_threads(None, 20, 32, 2000) is None and 20 * 2000 * 32**2 >= ONE_THREAD_BELOW  # cos.yaml: torch's
    assert cpu_threads(3, 20, 32, 2000) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cpu_threads(None, 5, 32, 300) is None  # the variable, where set, is kept
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="threads: must be an integer >= 1"):
            cpu_threads(bad, 20, 32)


def test_a_saved_learner_at_d_3_loads_with_its_default_epsilon(tmp_path):
    """The default 1/sqrt(3), as a save holds it, is not refused as an epsilon one gave (it is said, as at the start)."""
    import numpy as np

    from nvldb_pl.live import DuelingBandit

    b = DuelingBandit.create(dim=3)
    x = np.eye(3)
    b.observe(x, 0, 1, 1)
    b.save(str(tmp_path / "b.pt"))
    assert DuelingBandit.from_checkpoint(str(tmp_path / "b.pt")).num_observed == 1


def test_the_learner_measures_its_run_for_the_thread_choice():
    """The CLI and run_experiment read a run's size from its learner (problem_size), not from the model's config:
    S x T x m^2 for the built-in network, 32^2 for a network of one's own or a learner without one."""
    from nvldb_pl.learners.linear import CoLSTIM
    from nvldb_pl.learners.nvldb import NVLDB
    from nvldb_pl.machinery.devices import cpu_threads, threads_for

    assert NVLDB(rounds=300, num_seeds=5, network={"width": 8}).problem_size() == 5 * 300 * 8 * 8
    assert (
        NVLDB(rounds=300, num_seeds=5, network={"module": "tests.extensions.networks.LayerNormMLP"}).problem_size()
        == 5 * 300 * 32**2
    )
    assert CoLSTIM(rounds=300, num_seeds=5).problem_size() == 5 * 300 * 32**2
    assert threads_for(None, 5 * 300 * 32**2) == cpu_threads(None, 5, 32, 300)
