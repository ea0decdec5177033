"""UCI tasks: readers (real files when present, generated files always), bad files, encoding, a run."""

import gzip
import importlib.util
import os

import numpy as np
import pytest
import torch

from nvldb_pl.environments import uci
from nvldb_pl.environments.stream import RoundStream
from nvldb_pl.loop.data import BanditDataModule
from nvldb_pl.loop.run import run_experiment

REAL = uci.default_data_dir()
real = pytest.mark.skipif(not os.path.isdir(REAL), reason=f"UCI data folder {REAL} absent")


@real
@pytest.mark.parametrize(
    "task,shape,counts",
    [
        ("statlog", (58000, 9), [45586, 50, 171, 8903, 3267, 10, 13]),
        ("magic", (19020, 10), [12332, 6688]),
        ("covertype", (20000, 54), [7310, 9687, 1293, 81, 303, 625, 701]),
    ],
)
def test_real_files_have_the_readme_shapes_and_class_counts(task, shape, counts):
    X, y = uci.load(task)
    assert X.shape == shape
    assert np.bincount(y, minlength=len(counts)).tolist() == counts
    np.testing.assert_allclose(X.mean(axis=0), 0, atol=1e-9)
    assert set(np.round(X.std(axis=0), 9)) <= {0.0, 1.0}


def _write(path, rows, sep=" ", gz=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = "\n".join(sep.join(str(c) for c in row) for row in rows) + "\n"
    if gz:
        with gzip.open(path + ".gz", "wt") as fh:
            fh.write(text)
    else:
        with open(path, "w") as fh:
            fh.write(text)


def _shuttle(root, n=40, seed=0, gz=False):
    rng = np.random.default_rng(seed)
    rows = [[*rng.integers(-50, 100, 9).tolist(), int(rng.integers(1, 8))] for _ in range(n)]
    _write(os.path.join(root, "shuttle", "shuttle.trn"), rows[: n // 2], " ", gz)
    _write(os.path.join(root, "shuttle", "shuttle.tst"), rows[n // 2 :], "\t", gz)
    return rows


def test_generated_files_are_read_with_both_separators_and_gzip(tmp_path):
    rows = _shuttle(str(tmp_path / "a"))
    X, y = uci.load("statlog", str(tmp_path / "a"))
    raw = np.array([r[:-1] for r in rows], dtype=float)
    np.testing.assert_allclose(X, (raw - raw.mean(0)) / raw.std(0))
    assert y.tolist() == [r[-1] - 1 for r in rows]
    _shuttle(str(tmp_path / "b"), gz=True)
    Xg, yg = uci.load("statlog", str(tmp_path / "b"))
    np.testing.assert_allclose(Xg, X) and np.testing.assert_array_equal(yg, y)
    magic = [[*np.linspace(0, 1, 10).round(3).tolist(), "g" if i % 3 else "h"] for i in range(9)]
    _write(str(tmp_path / "c" / "magic" / "magic04.data"), magic, ",")
    Xm, ym = uci.load("magic", str(tmp_path / "c"))
    assert Xm.shape == (9, 10) and ym.tolist() == [1 if i % 3 == 0 else 0 for i in range(9)]
    assert np.all(Xm == 0)  # constant columns stay 0 after standardization


@pytest.mark.parametrize(
    "case,match",
    [
        ("missing_dir", "data.data_dir: .* is not a folder"),
        ("missing_file", "no data file found; looked for .*shuttle.trn"),
        ("columns", r"shuttle.tst, line 3: expected 10 columns .* found 9"),
        ("non_numeric", r"shuttle.trn, line 2, column 4: non-numeric value 'abc'"),
        ("label", r"shuttle.trn, line 5: unknown label '9'"),
        ("truncated_gz", "cannot be read as a text table"),
        ("empty", "no data rows"),
    ],
)
def test_bad_files_get_a_message_naming_file_and_problem(tmp_path, case, match):
    root = str(tmp_path / "d")
    rows = _shuttle(root, gz=(case == "truncated_gz"))
    trn, tst = os.path.join(root, "shuttle", "shuttle.trn"), os.path.join(root, "shuttle", "shuttle.tst")
    if case == "missing_dir":
        root = str(tmp_path / "nope")
    elif case == "missing_file":
        os.remove(trn)
    elif case == "columns":
        bad = [r[:] for r in rows[20:]]
        bad[2] = bad[2][1:]
        _write(tst, bad, "\t")
    elif case == "non_numeric":
        bad = [r[:] for r in rows[:20]]
        bad[1][3] = "abc"
        _write(trn, bad)
    elif case == "label":
        bad = [r[:] for r in rows[:20]]
        bad[4][-1] = 9
        _write(trn, bad)
    elif case == "truncated_gz":
        data = open(trn + ".gz", "rb").read()
        open(trn + ".gz", "wb").write(data[: len(data) // 2])
    elif case == "empty":
        open(trn, "w").close()
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        BanditDataModule(task="statlog", dim=63, arms=7, rounds=5, num_seeds=1, data_dir=root)


def test_dim_arms_and_disjoint_row_budget_are_checked_up_front(tmp_path):
    root = str(tmp_path)
    _shuttle(root, n=40)
    with pytest.raises(ValueError, match="data.dim: .* must be 63, got 5"):
        BanditDataModule(task="statlog", dim=5, arms=7, data_dir=root)
    with pytest.raises(ValueError, match="data.arms: statlog has 7 classes"):
        BanditDataModule(task="statlog", dim=63, arms=5, data_dir=root)
    with pytest.raises(ValueError, match=r"data.sampling: .* 60 rows, but statlog has 40"):
        BanditDataModule(task="statlog", dim=63, arms=7, rounds=20, num_seeds=3, data_dir=root, sampling="disjoint")
    with pytest.raises(ValueError, match="data.preference"):
        BanditDataModule(task="cos", preference="coin")


def test_block_encoding_norm_and_utilities(tmp_path):
    root = str(tmp_path)
    _shuttle(root, n=40)
    dm = BanditDataModule(task="statlog", dim=63, arms=7, rounds=40, num_seeds=2, data_dir=root)
    X, y = dm.dataset
    stream = RoundStream(dm.spec, dataset=dm.dataset)
    rows = [stream._instances(i, np.arange(1, 41)) for i in dm.seed_ids]
    for s in range(2):
        assert sorted(rows[s].tolist()) == list(range(40))  # without replacement until exhausted
    assert rows[0].tolist() != rows[1].tolist()
    for t, batch in enumerate(stream):
        for s in range(2):
            x = X[rows[s][t]]
            ctx = batch["contexts"][s].double().numpy()
            for k in range(7):
                expect = np.zeros(63)
                expect[9 * k : 9 * k + 9] = x / np.linalg.norm(x)
                np.testing.assert_allclose(ctx[k], expect, atol=1e-6)
            assert batch["utilities"][s].tolist() == [1.0 if k == y[rows[s][t]] else 0.0 for k in range(7)]
    # past the end of the data, a fresh shuffle begins; a seed alone sees the same rows
    alone = RoundStream(
        BanditDataModule(task="statlog", dim=63, arms=7, rounds=40, num_seeds=1, first_seed_id=1, data_dir=root).spec,
        dataset=dm.dataset,
    )
    assert alone._instances(1, np.arange(1, 81)).tolist()[:40] == rows[1].tolist()
    disjoint = BanditDataModule(
        task="statlog", dim=63, arms=7, rounds=13, num_seeds=3, data_dir=root, sampling="disjoint"
    )
    st = RoundStream(disjoint.spec, dataset=disjoint.dataset)
    used = [set(st._instances(i, np.arange(1, 14)).tolist()) for i in range(3)]
    assert all(len(u) == 13 for u in used) and not (used[0] & used[1] or used[1] & used[2] or used[0] & used[2])


def test_deterministic_preference_and_a_short_statlog_run(tmp_path):
    dm = BanditDataModule(task="cos", preference="deterministic")
    assert dm.preference_prob(torch.tensor([-0.3, 0.0, 2.0])).tolist() == [0.0, 0.5, 1.0]
    root = str(tmp_path)
    _shuttle(root, n=60)
    data = {
        "task": "statlog",
        "dim": 63,
        "arms": 7,
        "rounds": 25,
        "num_seeds": 2,
        "preference": "deterministic",
        "data_dir": root,
    }
    summary, m = run_experiment(data, {"network": {"width": 8}, "grad_steps": 2})
    assert summary["rounds"] == 25 and len(summary["seeds"]) == 2
    # deterministic feedback: o = 1 exactly when the first arm is the true class and the second is not
    stream = RoundStream(BanditDataModule(**data).spec, dataset=BanditDataModule(**data).dataset)
    for t, batch in enumerate(stream):
        for s in range(2):
            x1, x2 = m.history()[s, t]
            u = batch["utilities"][s]
            k1 = int(torch.nonzero(x1.abs().view(7, 9).sum(1))[0])
            k2 = int(torch.nonzero(x2.abs().view(7, 9).sum(1))[0])
            expect = {1.0: 1.0, -1.0: 0.0}.get(float(u[k1] - u[k2]))
            if expect is not None:
                assert float(m.hist_o[s, t]) == expect
    regret = [s_["cum_avg_regret"] for s_ in summary["seeds"]]
    assert all(0 <= r <= 25 for r in regret)


def test_the_default_data_folder_is_beside_the_repository_whatever_the_modules_depth(monkeypatch):
    """``../shared/data/uci`` next to the repository (the layout by role moved uci.py one folder down, and the
    default then pointed inside the repository: every real-data test skipped as if the data were absent)."""
    monkeypatch.delenv("NVLDB_UCI_DIR", raising=False)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert uci.default_data_dir() == os.path.join(os.path.dirname(os.path.realpath(root)), "shared", "data", "uci")


@real
def test_statlog_read_by_arm_index_is_a_task_of_ones_own_whose_best_duel_is_the_last_arms_self_duel(tmp_path):
    """lab/diagnostics/statlog_index_reading.py: the appendix's "P(i > j) = 1 for i > j" read by index, through
    the Task extension point: Statlog's block contexts, u_k = k / (K - 1) whatever the row; its command runs."""
    import json
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "..", "lab", "diagnostics", "statlog_index_reading.py")
    spec = importlib.util.spec_from_file_location("statlog_index_reading", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    task = module.IndexStatlog()
    x = task.draw_contexts(5, 7, 63, np.random.default_rng(0))
    assert x.shape == (5, 7, 63) and np.allclose(np.linalg.norm(x, axis=-1), 1.0)
    for k in range(7):  # arm k's context is nonzero in block k only
        assert not np.any(np.delete(x[:, k].reshape(5, 7, 9), k, axis=1))
    u = task.utility(task.draw_parameter(63, None)[None], x)
    assert u.shape == (5, 7) and np.allclose(u, np.arange(7) / 6)
    out = tmp_path / "idx.jsonl"
    subprocess.run(
        [sys.executable, script, "--rounds", "6", "--seeds", "2", "--out", str(out)],
        check=True,
        capture_output=True,
        env={**os.environ, "NVLDB_UCI_DIR": REAL},
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["config"].get("variance_aware", True) for r in rows] == [True, False, True, False]
    assert all(len(r["per_seed"]) == 2 and all(0 <= v <= 1 for v in r["per_seed"]) for r in rows)


def test_a_table_column_that_overflows_when_standardized_is_refused_naming_the_file_column_and_row(tmp_path):
    """Two cells of 1e308 were standardized into inf/NaN with only numpy's RuntimeWarning: now one line naming the
    file, the column as the file counts it, and the row of its largest value; a column of ordinary values is as before."""
    import warnings

    from nvldb_pl.environments.uci import read_user_table, standardize

    path = tmp_path / "big.csv"
    path.write_text("label,a,b\nx,1,1e308\ny,2,1.5e308\nx,3,-1e308\ny,4,2\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way
        with pytest.raises(ValueError) as err:
            read_user_table(str(path), label_column="label")
    assert str(err.value) == (
        f"{path}, column 3: its values (up to 1.5e+308, data row 2) overflow float64 when standardized (mean 0, sd 1); "
        "rescale the column (e.g. to other units)"
    )
    X = np.array([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    assert np.allclose(standardize(X)[:, 0], (X[:, 0] - 2) / X[:, 0].std()) and (standardize(X)[:, 1] == 0).all()


def test_a_first_row_with_an_empty_cell_is_data_not_a_header(tmp_path):
    """A headerless table whose first row has an empty cell was taken as a header without a word: the documented
    missing-value refusal never came, and under missing mean the row was lost. A missing-value cell is not a name."""
    from nvldb_pl.environments.uci import read_user_table

    path = tmp_path / "t.csv"
    path.write_text("1.0,,a\n2.0,3.0,b\n4.0,5.0,a\n6.0,1.0,b\n")
    with pytest.raises(ValueError, match="line 1, column 2: missing value ''"):
        read_user_table(str(path))
    X, y, labels = read_user_table(str(path), missing="mean")
    assert len(y) == 4


def test_a_headerless_table_saved_with_a_byte_order_mark_keeps_its_first_row(tmp_path):
    """Excel's "CSV UTF-8" starts the file with a BOM: its first cell '\\ufeff1.0' was not a number, so the first data
    row was taken as a header and lost. Read as utf-8-sig, the row is data."""
    from nvldb_pl.environments.uci import read_user_table

    path = tmp_path / "t.csv"
    path.write_bytes("1.0,2.0,a\n2.0,3.0,b\n4.0,5.0,a\n".encode("utf-8-sig"))
    X, y, labels = read_user_table(str(path))
    assert len(y) == 3 and list(labels) == ["a", "b"]


def test_a_class_named_na_is_a_class_and_a_repeated_header_name_is_refused(tmp_path):
    """The label 'NA' (North America) was dropped as a missing value, its rows lost; two columns of one name were
    taken silently (a feature_columns name picked the first). A label is missing only where its cell is empty; a
    header that names two columns alike is refused naming it."""
    from nvldb_pl.environments.uci import read_user_table

    path = tmp_path / "t.csv"
    path.write_text("a,b,region\n1.0,2.0,NA\n2.0,3.0,EU\n4.0,5.0,NA\n6.0,1.0,EU\n")
    X, y, labels = read_user_table(str(path))
    assert len(y) == 4 and sorted(labels) == ["EU", "NA"]
    path.write_text("a,a,region\n1.0,2.0,x\n2.0,3.0,y\n")
    with pytest.raises(ValueError, match="header names the column 'a' twice"):
        read_user_table(str(path))


def test_an_infinite_cell_is_named_by_its_line_in_the_file_after_rows_were_dropped(tmp_path):
    """The row number of an inf cell was counted after the dropped rows (data row 2 for the file's line 4)."""
    from nvldb_pl.environments.uci import read_user_table

    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1.0,,x\n2.0,3.0,y\n4.0,inf,x\n6.0,1.0,y\n")
    with pytest.raises(ValueError, match=r"t.csv, line 4, column 2: a NaN or infinite feature"):
        read_user_table(str(path), missing="drop")
