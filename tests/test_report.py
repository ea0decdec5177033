"""The reproduction script end to end on a tiny grid."""
import os
import re

import pytest

from nvldb_pl.report import DEFAULT_METHODS

REPRODUCE = os.path.join(os.path.dirname(__file__), "..", "scripts", "reproduce.py")


def _main(argv):
    import importlib.util
    spec = importlib.util.spec_from_file_location("reproduce", REPRODUCE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main(argv)


def test_reproduce_tiny_grid_writes_table_png_curves_and_reuses_runs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = str(tmp_path / "rep")
    argv = ["--out", out, "--rounds", "12", "--seeds", "2", "--tasks", "cos", "--set", "width=4", "grad_steps=1"]
    assert _main(argv) == 0
    report = open(os.path.join(out, "report.md")).read()
    rows = re.findall(r"^\| (\S+) \| ([0-9.]+) ± ([0-9.]+) \|", report, flags=re.M)
    assert sorted(r[0] for r in rows) == sorted(DEFAULT_METHODS)
    values = [float(r[1]) for r in rows]
    assert values == sorted(values) and all(v > 0 for v in values)
    assert "--rounds 12 --seeds 2" in report
    # a readable PNG: real image data of a sensible size
    from matplotlib.image import imread
    img = imread(os.path.join(out, "cos.png"))
    assert img.shape[0] > 300 and img.shape[1] > 400 and img.std() > 0.01
    import gzip
    with gzip.open(os.path.join(out, "curves_cos.csv.gz"), "rt") as fh:
        lines = fh.read().splitlines()
    assert lines[0] == "method,seed,round,cum_avg_regret" and len(lines) == 1 + len(DEFAULT_METHODS) * 2 * 12
    capsys.readouterr()
    assert _main(argv) == 0  # the second time every run is reused
    log = capsys.readouterr().out
    assert log.count("[reuse]") == len(DEFAULT_METHODS) and "[run]" not in log


def test_reproduce_rejects_unknown_method(tmp_path, capsys):
    assert _main(["--out", str(tmp_path), "--methods", "NVLDB-UCB-ASYM", "Oracle", "--rounds", "5", "--seeds", "1"]) == 2
    assert "--methods" in capsys.readouterr().err
