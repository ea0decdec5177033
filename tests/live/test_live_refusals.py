"""The live API refuses what the fit CLI refuses, with the same kind of one line, and contexts that would poison the
learner before any change (issue "No result without its reason")."""

import os
import re

import numpy as np
import pytest
import torch

from nvldb_pl.live import DuelingBandit


@pytest.fixture
def bandit():
    return DuelingBandit.create(dim=3, network={"width": 4}, grad_steps=2)


@pytest.mark.parametrize("scale", [1e39, 3e38])
def test_contexts_beyond_what_the_learner_computes_are_refused_and_it_stays_usable(bandit, scale):
    """1e39 is finite in float64 and inf in the learner's float32 (select raised a bare FloatingPointError and left
    the bandit unusable; scores returned NaN); 3e38 is finite in float32 and its estimate is not."""
    x = np.full((3, 3), scale) * np.array([[1.0], [0.5], [-1.0]])
    for call in (lambda: bandit.select(x), lambda: bandit.scores(x)):
        try:
            out = call()
        except ValueError as err:
            assert str(err).startswith("contexts: ") and "nothing changed" in str(err)
        else:
            assert np.all(np.isfinite(np.asarray(out, dtype=float)))
    good = np.random.default_rng(0).standard_normal((3, 3))
    i, j = bandit.select(good)
    bandit.observe(good, i, j, 1)
    assert bandit.num_observed == 1 and np.all(np.isfinite(bandit.scores(good)))


@pytest.mark.parametrize(
    "args,message",
    [
        ((np.eye(3), -1, 1), r"^i: must be an item index in \[0, 3\), got -1$"),
        ((np.eye(3), 0, 3), r"^j: must be an item index in \[0, 3\), got 3$"),
        (
            (np.eye(3), 1, 1),
            r"^i, j: both are item 1; a question compares two different items \(nothing was recorded\)$",
        ),
        ((np.full((3, 3), np.nan), 0, 1), r"^contexts: non-finite \(NaN or inf\) features in item\(s\) \[0, 1, 2\]$"),
        ((np.eye(3) * 1e20, 0, 1), r"^contexts: this pending question would leave the learner non-finite"),
    ],
)
def test_a_pending_question_is_checked_as_an_answer_is_and_refused_changes_nothing(args, message):
    """pending took any index (-1, an item against itself) and contexts of 1e20, after which the learner was unusable
    (and saved so): each is refused in one line, the learner as it was."""
    live = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "live.yaml")
    bandit = DuelingBandit.from_config(live, dim=3, seed=0)  # NVLDB: it takes pending questions
    x = np.random.default_rng(0).standard_normal((3, 3))
    bandit.observe(x, 0, 1, 1)
    V = bandit.learner.V.clone()
    with pytest.raises(ValueError, match=message):
        bandit.pending(*args)
    assert torch.equal(bandit.learner.V, V) and bandit.num_observed == 1
    bandit.pending(x, 0, 2)  # a good one is taken
    assert not torch.equal(bandit.learner.V, V) and np.all(np.isfinite(bandit.scores(x)))
    i, j = bandit.select(x)
    bandit.observe(x, i, j, 0)
    assert bandit.num_observed == 3  # (the copy's history holds its pending question)


def test_an_outcome_of_two_values_is_refused_naming_it(bandit):
    x = np.eye(3)
    with pytest.raises(ValueError, match=r"outcome: one answer, 1 or 0; got a tensor of shape \[2\]"):
        bandit.observe(x, 0, 1, torch.tensor([1, 0]))
    assert bandit.num_observed == 0


def test_a_seed_numpy_cannot_take_is_refused_naming_it():
    with pytest.raises(
        ValueError, match=r"seed: must be an integer between 0 and 4294967295 \(the seeds numpy takes\)"
    ):
        DuelingBandit.create(dim=3, seed=2**64)


def test_from_config_refuses_a_key_given_twice_and_a_dimension_that_is_not_an_integer(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("model:\n  class_path: NDB\n  init_args:\n    lr: 0.1\n    lr: 0.2\n")
    with pytest.raises(ValueError, match=r"dup.yaml: the key 'lr' is given twice in one mapping \(lines 4 and 5\)"):
        DuelingBandit.from_config(str(dup), dim=5)
    with pytest.raises(ValueError, match=r"^dim: must be an integer >= 1, got 5.7$"):
        DuelingBandit.from_config("configs/live.yaml", dim=5.7)
    odd = tmp_path / "odd.yaml"
    odd.write_text("data:\n  dim: 5.7\n")
    with pytest.raises(ValueError, match=r"odd.yaml: data.dim: must be an integer >= 1, got 5.7"):
        DuelingBandit.from_config(str(odd))


def test_settings_beside_class_path_are_refused_by_the_live_reader_and_the_fit_cli_alike(tmp_path, capsys):
    """A model of class_path NDB with lr 0.1 beside it (not under init_args): the live reader built NDB at lr 0.001
    without a word, the fit CLI said "model.class_path: not an option"; both now say the same line."""
    from nvldb_pl.cli import run_cli

    path = tmp_path / "flat.yaml"
    path.write_text("data:\n  dim: 5\n  rounds: 50\nmodel:\n  class_path: NDB\n  lr: 0.1\n")
    said = "model: ['lr'] beside class_path: a class's settings go under init_args (class_path: NDB, then init_args"
    with pytest.raises(ValueError, match=re.escape(f"{path}: {said}")):
        DuelingBandit.from_config(str(path), dim=5)
    capsys.readouterr()
    assert run_cli(["fit", "--config", str(path), "--trainer.default_root_dir", str(tmp_path / "run")]) == 2
    assert f"error: --config: {path}: {said}" in capsys.readouterr().err
    path.write_text("data:\n  dim: 5\n  rounds: 50\nmodel:\n  class_path: NDB\n  init_args:\n    network: {width: 8}\n")
    assert DuelingBandit.from_config(str(path), dim=5).learner.hparams["network"]["width"] == 8


def test_a_data_field_given_under_model_is_refused_by_the_fit_cli_and_the_live_reader(tmp_path, capsys):
    """--model.dim 7 ran with data.dim's 5 (and the live reader dropped a model.dim): one line saying where it goes."""
    from nvldb_pl.cli import run_cli

    said = "model.dim: the learner takes it from data.dim (the data's value runs); give data.dim instead"
    for extra in (["--model.dim", "7"], ["--model.init_args.dim=7"]):
        capsys.readouterr()
        assert (
            run_cli(["fit", "--config", "configs/cos.yaml", *extra, "--trainer.default_root_dir", str(tmp_path)]) == 2
        )
        assert f"error: {said}" in capsys.readouterr().err
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  dim: 5\nmodel:\n  lr: 0.1\n  dim: 7\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: {said}")):
        DuelingBandit.from_config(str(path))
    capsys.readouterr()
    assert run_cli(["fit", "--config", str(path), "--trainer.default_root_dir", str(tmp_path / "run")]) == 2
    assert f"error: --config: {path}: {said}" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_save_whose_count_of_answers_disagrees_with_its_history_is_refused(tmp_path):
    """A live save's counter was not checked against its history: edited lower, the bandit went on from fewer
    answers than the file holds (the next answer written over one); beyond the history's rows, from rows never
    played. Each is refused naming the file; the save as written reads."""
    bandit = DuelingBandit.create(dim=3, network={"width": 4}, grad_steps=2)
    x = np.random.default_rng(0).standard_normal((3, 3))
    for _ in range(4):
        bandit.observe(x, *bandit.select(x), 1)
    path = str(tmp_path / "s.pt")
    bandit.save(path)
    assert DuelingBandit.from_checkpoint(path).num_observed == 4
    ckpt = torch.load(path, weights_only=False)
    raised = "it counts 6 answers, but its history holds 4 duels"  # raised within its rows: rows never played
    for counter, said in (
        (2, "it counts 2 answers, but its history holds duels past them"),
        (10**6, "outside"),
        (6, raised),
    ):
        ckpt["state_dict"]["rounds_done"] = torch.tensor(counter)
        torch.save(ckpt, path)
        with pytest.raises(ValueError, match=f"^{re.escape(path)}: .*{said}"):
            DuelingBandit.from_checkpoint(path)


@pytest.mark.parametrize(
    "version, message",
    [
        ("11", "format_version: '11' is not a version number"),
        (999, "format_version 999: written by a newer nvldb_pl"),
        (True, "format_version: True is not a version number"),
    ],
)
def test_a_saved_format_version_not_this_packages_is_refused_naming_the_file(tmp_path, version, message):
    """format_version "11" was a TypeError traceback; 999 (a newer package's file) loaded silently, its settings read
    by this version's rules. Both are refused in one line naming the file; the fit checkpoint's hook likewise."""
    from nvldb_pl.live import DuelingBandit

    path = str(tmp_path / "b.pt")
    DuelingBandit.create(dim=3, horizon=20).save(path)
    save = torch.load(path, weights_only=False)
    save["format_version"] = version
    torch.save(save, path)
    with pytest.raises(ValueError, match=f"^{path}: {re.escape(message)}"):
        DuelingBandit.from_checkpoint(path)


def test_numpy_scalars_are_taken_as_the_numbers_they_are():
    """create(width=np.int64(8)) was refused as 'not an integer' (a value from a numpy array, as a sweep in a notebook
    gives it); numpy integers and floats are taken as Python's, and a numpy bool is still not an integer."""
    bandit = DuelingBandit.create(
        dim=np.int64(3), horizon=np.int64(20), network={"width": np.int64(8)}, lr=np.float32(0.01)
    )
    assert bandit.learner.settings.network.width == 8 and type(bandit.learner.settings.network.width) is int
    assert isinstance(bandit.learner.settings.lr, float)
    with pytest.raises(ValueError, match="is not an integer"):
        DuelingBandit.create(dim=3, network={"width": np.bool_(True)})
