"""The extension points, each used from a module outside the package (tests/extensions) as a researcher would."""

import glob
import json
import os
import sys

import numpy as np
import pytest

from nvldb_pl.cli import run_cli
from nvldb_pl.environments.stream import RoundStream
from nvldb_pl.loop.data import BanditDataModule
from nvldb_pl.environments.tasks import make_task
from tests.helpers.runs import fit_args

ROOT = os.path.join(os.path.dirname(__file__), "..")
COS = os.path.join(ROOT, "configs", "cos.yaml")
SHORT = [
    "--data.rounds=12",
    "--data.num_seeds=2",
    "--model.network.width=8",
    "--model.grad_steps=2",
    "--trainer.enable_progress_bar=false",
]


def _summary(root):
    with open(os.path.join(root, "lightning_logs", "version_0", "summary.json")) as fh:
        return json.load(fh)


def _first_round(dm):
    return next(iter(RoundStream(dm.spec, 0, dm.dataset)))


def test_a_task_class_named_by_import_path_gives_the_utilities_it_computes(tmp_path):
    from tests.extensions.tasks import Sine

    dm = BanditDataModule(
        task={"class_path": "tests.extensions.tasks.Sine", "init_args": {"freq": 5.0}}, num_seeds=2, rounds=3
    )
    batch, stream = _first_round(dm), RoundStream(dm.spec, 0, dm.dataset)
    x = batch["contexts"].numpy().astype(np.float64)
    expected = Sine(5.0).utility(stream.thetas, batch["contexts"].double().numpy())
    assert np.allclose(batch["utilities"].numpy(), expected) and x.shape == (2, 5, 5)


def test_a_task_class_runs_from_the_cli_and_its_name_is_in_the_summary(tmp_path):
    root = tmp_path / "r"
    assert run_cli(fit_args(root, "--data.task=tests.extensions.tasks.Sine", *SHORT)) == 0
    assert _summary(root)["task"] == "tests.extensions.tasks.Sine"


@pytest.mark.parametrize(
    "task, message",
    [
        ("nope.Sine", "data.task: cannot import 'nope.Sine'"),
        ("tests.extensions.tasks.Nothing", "has no 'Nothing'"),
        ("numpy.ndarray", "is not a built-in task"),
    ],
)
def test_a_bad_task_path_is_refused_naming_the_field(task, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        BanditDataModule(task=task)


def test_a_built_in_task_refuses_init_args():
    with pytest.raises(ValueError, match="takes no init_args"):
        make_task("cos", {"freq": 2})


def _csv(path, header=True, classes=4, features=10, rows=120):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, features))
    y = np.argmax(X[:, :classes], 1)
    with open(path, "w") as fh:
        if header:
            fh.write(",".join([f"f{i}" for i in range(features)] + ["kind"]) + "\n")
        for r, label in zip(X, y):
            fh.write(",".join(f"{v:.6f}" for v in r) + f",c{label}\n")
    return X, y


@pytest.mark.parametrize("header", [True, False])
def test_a_table_of_ones_own_is_read_with_or_without_a_header(tmp_path, header):
    X, y = _csv(tmp_path / "t.csv", header=header)
    dm = BanditDataModule(task="table", data_file=str(tmp_path / "t.csv"), dim=40, arms=4, num_seeds=1, rounds=2)
    got_X, got_y = dm.dataset
    assert np.array_equal(got_y, y) and got_X.shape == (120, 10)
    assert np.allclose(got_X, (X - X.mean(0)) / X.std(0), atol=1e-5)  # standardized, as the UCI files are
    assert dm.table_shape["classes"] == ("c0", "c1", "c2", "c3")


def test_a_tables_columns_are_chosen_by_name(tmp_path):
    X, y = _csv(tmp_path / "t.csv")
    dm = BanditDataModule(
        task="table",
        data_file=str(tmp_path / "t.csv"),
        label_column="kind",
        feature_columns=["f0", "f3"],
        dim=8,
        arms=4,
        num_seeds=1,
        rounds=2,
    )
    assert np.allclose(dm.dataset[0], ((X - X.mean(0)) / X.std(0))[:, [0, 3]], atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dim": 12}, "data.dim: .* so dim must be 40, got 12"),
        ({"arms": 3}, "data.arms: .* has 4 classes, so arms must be 4"),
        ({"label_column": "kinds"}, "data.label_column: .* has no column 'kinds'"),
        ({"feature_columns": [99]}, "data.feature_columns: column 99 is out of range"),
        ({"data_file": None}, "data.data_file: data.task=table reads the CSV"),
    ],
)
def test_a_bad_table_setting_is_refused_naming_the_field(tmp_path, kwargs, message):
    _csv(tmp_path / "t.csv")
    args = {"task": "table", "data_file": str(tmp_path / "t.csv"), "dim": 40, "arms": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        BanditDataModule(**args)


def test_a_bad_cell_of_a_table_is_named_by_line_and_column(tmp_path):
    _csv(tmp_path / "t.csv")
    lines = (tmp_path / "t.csv").read_text().splitlines()
    lines[5] = "x," + lines[5].split(",", 1)[1]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"t\.csv, line 6, column 1: non-numeric value 'x'"):
        BanditDataModule(task="table", data_file=str(tmp_path / "t.csv"), dim=40, arms=4)


def test_a_missing_cell_is_refused_naming_it_or_dropped_or_filled_with_its_columns_mean(tmp_path):
    """An empty cell was refused as non-numeric (''), missing values undocumented: now refused as missing with
    the two ways on (data.missing drop / mean), which do what they say."""
    from nvldb_pl.environments.uci import read_user_table

    path = tmp_path / "gaps.csv"
    path.write_text("a,b,label\n1,2,x\n3,,y\n5,NA,x\n7,8,y\n2,4,\n")  # a label is missing only where empty
    with pytest.raises(ValueError, match=r"gaps\.csv, line 3, column 2 \('b'\): missing value ''; give data\.missing"):
        BanditDataModule(task="table", data_file=str(path), dim=4, arms=2)
    X, y, classes = read_user_table(str(path), missing="drop")
    assert classes == ("x", "y") and list(y) == [0, 1]  # rows 2 and 5 (a, b, label all there) only
    X, y, classes = read_user_table(str(path), missing="mean")
    assert list(y) == [0, 1, 0, 1]  # the row without a label left out
    raw_b = np.array([2.0, (2 + 8) / 2, (2 + 8) / 2, 8.0])  # b's missing cells take the mean of 2 and 8
    np.testing.assert_allclose(X[:, 1], (raw_b - raw_b.mean()) / raw_b.std())
    with pytest.raises(ValueError, match=r"data\.missing: 'zero' is not one of \['refuse', 'drop', 'mean'\]"):
        BanditDataModule(task="table", data_file=str(path), dim=4, arms=2, missing="zero")
    with pytest.raises(ValueError, match=r"data\.missing: applies to data\.task=table only"):
        BanditDataModule(task="cos", missing="drop")
    dm = BanditDataModule(task="table", data_file=str(path), dim=4, arms=2, missing="mean")
    assert dm.settings["missing"] == "mean"  # recorded with the run


def test_a_table_runs_from_the_cli(tmp_path):
    _csv(tmp_path / "t.csv")
    root = tmp_path / "r"
    assert (
        run_cli(
            fit_args(
                root,
                "--data.task=table",
                f"--data.data_file={tmp_path / 't.csv'}",
                "--data.dim=40",
                "--data.arms=4",
                *SHORT,
            )
        )
        == 0
    )
    assert _summary(root)["task"] == "table"


def test_a_rule_of_ones_own_is_named_by_import_path_and_makes_the_choices(tmp_path):
    import torch

    from nvldb_pl.learners.nvldb import NVLDB

    learner = NVLDB(num_seeds=2, rounds=5, strategy="tests.extensions.rules.MostUncertainChallenger")
    assert learner.method == "NVLDB-MostUncertainChallenger"
    f = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]], dtype=torch.float64)
    norm = torch.tensor([[[0, 1, 5], [1, 0, 2], [5, 2, 0]]] * 2, dtype=torch.float64)
    a1, a2 = learner.selection_rule(f, norm, torch.zeros(2, 3, 3), 1)
    assert a1.tolist() == [1, 0] and a2.tolist() == [2, 2]  # argmax_k ||dphi_{a1,k}||, k != a1
    root = tmp_path / "r"
    assert run_cli(fit_args(root, "--model.strategy=tests.extensions.rules.MostUncertainChallenger", *SHORT)) == 0
    assert _summary(root)["method"] == "NVLDB-MostUncertainChallenger"


def test_a_rule_path_that_is_not_a_rule_is_refused_naming_the_field():
    from nvldb_pl.learners.nvldb import NVLDB

    with pytest.raises(
        ValueError,
        match="model.strategy: 'tests.extensions.tasks.Sine' is not a nvldb_pl.maths.selection.SelectionRule",
    ):
        NVLDB(num_seeds=1, rounds=5, strategy="tests.extensions.tasks.Sine")


def _run_network(root, *extra):
    args = fit_args(
        root,
        "--model.network.module=tests.extensions.networks.LayerNormMLP",
        "--data.rounds=12",
        "--model.grad_steps=3",
        "--trainer.enable_progress_bar=false",
        *extra,
    )
    assert run_cli(args) == 0
    return _summary(root)


def test_a_network_of_ones_own_trains_every_parameter_by_autograd(tmp_path):
    import torch

    _run_network(tmp_path / "r", "--data.num_seeds=2")
    state = torch.load(
        tmp_path / "r" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False
    )["state_dict"]
    gain = state["net.params.2"]  # the LayerNorm's weight, initialised to ones
    assert gain.shape == (2, 16) and (gain - 1).abs().max() > 1e-4


def test_a_network_of_ones_own_gives_a_seed_the_same_result_alone_or_beside_another(tmp_path):
    both = _run_network(tmp_path / "both", "--data.num_seeds=2")
    alone = _run_network(tmp_path / "alone", "--data.num_seeds=1", "--data.first_seed_id=1")
    assert both["seeds"][1] == {**alone["seeds"][0]}


@pytest.mark.parametrize(
    "network, message",
    [
        ("tests.extensions.networks.WithBatchNorm", "has buffers"),
        ("tests.extensions.tasks.Sine", "is not a torch.nn.Module subclass"),
        ({"class_path": "tests.extensions.networks.LayerNormMLP", "init_args": {"features": 3}}, r"to \[3\] features"),
    ],
)
def test_a_bad_network_is_refused_naming_the_field(network, message):
    from nvldb_pl.learners.nvldb import NVLDB

    with pytest.raises(ValueError, match="model.network.module: .*" + message):
        NVLDB(num_seeds=1, rounds=5, network={"module": network})


def test_a_learner_of_ones_own_runs_from_the_cli(tmp_path):
    root = tmp_path / "r"
    assert (
        run_cli(
            fit_args(
                root,
                "--model=tests.extensions.learners.OnlineLogistic",
                "--data.rounds=200",
                "--data.num_seeds=3",
                "--trainer.enable_progress_bar=false",
            )
        )
        == 0
    )
    summary = _summary(root)
    assert summary["method"] == "OnlineLogistic"


def test_the_comparison_script_runs_ones_own_learner_rule_and_task_beside_nvldb_on_the_same_streams(tmp_path):
    from tests.helpers.script_loader import load_script

    out = tmp_path / "rep"
    mine = ["tests.extensions.learners.OnlineLogistic", "tests.extensions.rules.MostUncertainChallenger"]
    args = [
        "--out",
        str(out),
        "--tasks",
        "cos",
        "tests.extensions.tasks.Sine",
        "--rounds",
        "20",
        "--seeds",
        "2",
        "--arms",
        "3",
        "--set",
        "network.width=4",
        "grad_steps=1",
        "--methods",
        "NVLDB-UCB-ASYM",
        *mine,
    ]
    assert load_script("reproduce").main(args) == 0
    report = (out / "report.md").read_text()
    for method in ["NVLDB-UCB-ASYM", *mine]:
        assert f"| {method} |" in report
    assert "## tests.extensions.tasks.Sine (T=20, 2 seeds)" in report
    with open(out / "report.json") as fh:
        rows = json.load(fh)
    assert rows  # the machine-readable table holds the same methods
    import glob

    hparams = glob.glob(
        str(out / "runs" / "tests.extensions.tasks.Sine" / mine[0] / "lightning_logs" / "*" / "hparams.yaml")
    )
    assert hparams and "arms: 3\n" in open(hparams[0]).read()


def test_the_live_api_builds_saves_and_loads_a_learner_of_ones_own(tmp_path):
    from nvldb_pl.live import DuelingBandit

    bandit = DuelingBandit.create("tests.extensions.learners.OnlineLogistic", dim=3, lr=0.2)
    x = np.eye(3)[[0, 1, 2]] + 0.1
    for _ in range(5):
        i, j = bandit.select(x)
        bandit.observe(x, i, j, 1 if i < j else 0)
    bandit.save(str(tmp_path / "b.pt"))
    again = DuelingBandit.from_checkpoint(str(tmp_path / "b.pt"))
    assert type(again.learner).__name__ == "OnlineLogistic" and again.learner.hparams.lr == 0.2
    assert np.array_equal(again.scores(x), bandit.scores(x))


def test_the_live_api_reads_a_config_naming_a_learner_of_ones_own_with_its_own_defaults(tmp_path):
    from nvldb_pl.live import DuelingBandit

    config = {"model": {"class_path": "tests.extensions.learners.FastNVLDB"}, "data": {"dim": 4}}
    bandit = DuelingBandit.from_config(config)
    assert type(bandit.learner).__name__ == "FastNVLDB"
    assert (bandit.learner.hparams.lr, bandit.learner.hparams.grad_steps, bandit.learner.hparams.dim) == (0.01, 5, 4)


DOC = os.path.join(ROOT, "docs", "extending.md")


def test_docs_extending_shows_the_tested_examples_as_they_are():
    import re

    text = open(DOC).read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 6
    sources = {
        name: open(os.path.join(ROOT, "tests", "extensions", name)).read()
        for name in ("tasks.py", "rules.py", "networks.py", "learners.py", "selfduel.py")
    }
    for block in blocks:
        first, _, rest = block.partition("\n")
        name = first[len("# tests/extensions/") :] if first.startswith("# tests/extensions/") else "learners.py"
        body = rest if first.startswith("# tests/extensions/") else block
        assert body in sources[name], f"docs/extending.md's block for {name} is not the file's text"


def test_a_self_duel_test_of_ones_own_runs_from_the_cli_with_its_state_saved_and_resumed(tmp_path):
    """model.self_duel.test by import path: the test is handed the round's gradients and each answered duel, its
    choice is played (the greedy arm's self-duel from the 11th round on: 20 of 30 rounds), its buffer is saved in
    the checkpoint, a run stopped at round 20 goes on to exactly the run in one go, and the summary records it."""
    import torch

    test = "tests.extensions.selfduel.SelfDuelAfterTen"
    args = ["fit", "--config", COS, f"--model.self_duel.test={test}", *SHORT]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert run_cli([*args, "--data.rounds=30", f"--trainer.default_root_dir={whole}"]) == 0
    summary = _summary(whole)
    assert [s["self_duel_fraction"] for s in summary["seeds"]] == [20 / 30, 20 / 30]
    assert summary["settings"]["self_duel"]["test"] == test
    ckpt = torch.load(whole / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["state_dict"]["self_duel.answered"].tolist() == [30, 30]
    assert run_cli([*args, "--data.rounds=20", f"--trainer.default_root_dir={part}"]) == 0
    assert run_cli([*args, "--data.rounds=30", f"--trainer.default_root_dir={part}", "--ckpt_path=last"]) == 0
    assert [s["cum_avg_regret"] for s in _summary(part)["seeds"]] == [s["cum_avg_regret"] for s in summary["seeds"]]


@pytest.mark.parametrize(
    "test, message",
    [
        (
            "tests.extensions.selfduel.ArmOutOfRange",
            "model.self_duel.test: tests.extensions.selfduel.ArmOutOfRange returned a2 = 5 (seed index 0); an arm is "
            "0 .. 4 (data.arms = 5)",
        ),
        (
            "tests.extensions.rules.MostUncertainChallenger",
            "model.self_duel.test: 'tests.extensions.rules.MostUncertainChallenger' is not a "
            "nvldb_pl.maths.selfduel.SelfDuelTest subclass",
        ),
        ("deep_half", "model.self_duel.test='deep_half' is not a known test; choose one of ['none', 'deep_diag'"),
    ],
)
def test_a_self_duel_test_of_ones_own_is_checked_where_it_meets_the_loop(tmp_path, capsys, test, message):
    root = tmp_path / "r"
    code = run_cli(fit_args(root, f"--model.self_duel.test={test}", *SHORT))
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err
    assert not list(root.rglob("summary.json"))


def test_ndb_and_the_deep_test_keep_one_gram_of_the_whole_networks_gradients():
    """NDB's V and the deep self-duel test's Z are one class (nvldb_pl.maths.gram.GradientGram), owned by NDB and by
    the test object; the same duels give them the same matrix."""
    import torch

    from nvldb_pl.learners.ndb import NDB
    from nvldb_pl.learners.nvldb import NVLDB
    from nvldb_pl.maths.gram import GradientGram

    for form, test in (("full", "deep_full"), ("diag", "deep_diag")):
        ndb = NDB(rounds=5, num_seeds=2, network={"width": 4}, gram=form)
        nvldb = NVLDB(rounds=5, num_seeds=2, network={"width": 4}, self_duel={"test": test})
        assert type(ndb.gradient_gram) is type(nvldb.self_duel.gram) is GradientGram
        z = torch.randn(2, sum(p[0].numel() for p in ndb.net.parameters()), dtype=torch.float64)
        ndb.gradient_gram.add_(z)
        nvldb.self_duel.remember(z)
        for name, buf in ndb.gradient_gram.named_buffers():
            assert torch.equal(buf, getattr(nvldb.self_duel.gram, name))


def test_a_task_class_init_args_reach_the_grid_scripts_and_runs_of_others_are_neither_reused_nor_reported(
    tmp_path, capsys, monkeypatch
):
    """A task's init_args could not reach reproduce.py or sweep.py: the comparison ran under the task's defaults
    without a word. ``--data task_args=...`` (reproduce) and ``data.task_args`` (sweep) now build the task with
    them; a run made with other init_args (or none) is not reused, the report names them, and an earlier report
    of other init_args is kept beside the new one."""
    from tests.helpers.script_loader import load_script

    reproduce, sweep = load_script("reproduce"), load_script("sweep")
    out = str(tmp_path / "rep")
    quick = ["--out", out, "--tasks", "tests.extensions.tasks.Sine", "--rounds", "6", "--seeds", "2"]
    quick += ["--methods", "Random"]
    assert reproduce.main(quick + ["--data", "task_args={freq: 5.0}"]) == 0
    assert "[run]" in capsys.readouterr().out
    assert reproduce.main(quick + ["--data", "task_args={freq: 5.0}"]) == 0
    assert "[reuse]" in capsys.readouterr().out
    report = open(os.path.join(out, "report.md")).read()
    assert '## tests.extensions.tasks.Sine {"freq": 5.0} (T=6, 2 seeds)' in report
    assert reproduce.main(quick) == 0  # the task's defaults: another stream, run anew
    said = capsys.readouterr().out
    assert "[run]" in said and "kept as report.1.md" in said
    assert "## tests.extensions.tasks.Sine (T=6, 2 seeds)" in open(os.path.join(out, "report.md")).read()
    assert open(os.path.join(out, "report.1.md")).read() == report
    assert os.path.exists(os.path.join(out, "curves_tests.extensions.tasks.Sine.1.csv.gz"))  # a dotted name whole
    summaries = sorted(glob.glob(os.path.join(out, "runs", "*", "Random", "lightning_logs", "*", "summary.json")))
    made = [json.load(open(p))["data"].get("task_args") for p in summaries]
    assert made == [{"freq": 5.0}, None]

    rows = str(tmp_path / "sweep.jsonl")
    grid = '[{"data.task_args": {"freq": 5.0}}, {"data.task_args": {"freq": 2.0}}, {}]'
    args = ["--rounds", "6", "--seeds", "2", "--tasks", "tests.extensions.tasks.Sine", "--out", rows, "--grid", grid]
    monkeypatch.setattr(sys, "argv", ["sweep.py", *args])
    sweep.main()
    per_seed = [json.loads(line)["per_seed"] for line in open(rows)]
    assert per_seed[1] == per_seed[2] != per_seed[0]  # freq 2.0 is Sine's default; 5.0 another task


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"task": "cos", "task_args": {"freq": 2.0}}, "data.task_args: the built-in task 'cos' takes no init_args"),
        ({"task": "tests.extensions.tasks.Sine", "task_args": 3}, "data.task_args: a mapping"),
        (
            {
                "task": {"class_path": "tests.extensions.tasks.Sine", "init_args": {"freq": 1.0}},
                "task_args": {"freq": 2},
            },
            "data.task_args: given twice",
        ),
        ({"task": "tests.extensions.tasks.Sine", "task_args": {"fq": 2}}, "does not take these init_args"),
        # a value of the wrong type: a numpy traceback at the first round
        ({"task": "tests.extensions.tasks.Sine", "task_args": {"freq": "abc"}}, "data.task_args: freq='abc' is not a"),
    ],
)
def test_task_args_are_refused_where_they_cannot_apply(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BanditDataModule(**kwargs)


def test_task_args_build_the_same_streams_as_the_class_path_mapping():
    a = BanditDataModule(task="tests.extensions.tasks.Sine", task_args={"freq": 5.0}, rounds=3, num_seeds=2)
    b = BanditDataModule(
        task={"class_path": "tests.extensions.tasks.Sine", "init_args": {"freq": 5.0}}, rounds=3, num_seeds=2
    )
    assert a.settings == b.settings and a.spec == b.spec
