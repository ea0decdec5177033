"""Exact resume after a real SIGKILL, and refusal of a checkpoint from another config."""
import csv
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

import lightning.pytorch as pl
import pytest
import torch

from nvldb_pl.checkpoint import RoundCheckpoint
from tests.gpu_saved import as_saved_by_a_graphed_cuda_run

ROOT = os.path.join(os.path.dirname(__file__), "..")
MAIN = os.path.join(ROOT, "scripts", "main.py")
T = 300
ARGS = ["fit", "--config", os.path.join(ROOT, "configs", "cos.yaml"), f"--data.rounds={T}", "--data.num_seeds=3",
        "--model.width=8", "--model.grad_steps=2", "--model.strategy=ts_osym", "--checkpoint.every_n_rounds=20",
        "--loop.log_every_n_rounds=5",
        "--trainer.enable_progress_bar=false"]
SHORT = ["--data.rounds=24", "--checkpoint.every_n_rounds=8"]


def _cmd(root, *extra):
    return [sys.executable, MAIN, *ARGS, f"--trainer.default_root_dir={root}", *extra]


def _in_process(capsys, root, *extra):
    """A run in this process (no 4 s of imports): its exit status and what it printed on stderr (not Lightning's
    own lines, which its logging handler writes to the stream it found at import)."""
    from types import SimpleNamespace

    from nvldb_pl.cli import run_cli
    capsys.readouterr()
    code = run_cli([*ARGS, f"--trainer.default_root_dir={root}", *extra])
    return SimpleNamespace(returncode=code, stderr=capsys.readouterr().err)


def _made(root, *extra):
    """A run that must succeed and whose output is not read, made in this process (no 4 s of imports)."""
    from nvldb_pl.cli import run_cli
    assert run_cli([*ARGS, f"--trainer.default_root_dir={root}", *extra]) == 0


def _run(root, *extra):
    """A run in a process of its own: its stderr (Lightning's own lines included) is read."""
    out = subprocess.run(_cmd(root, *extra), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _rounds_in(path):
    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["state_dict"]["rounds_done"])
    except Exception:  # noqa: BLE001 (not written yet)
        return -1


def _events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(folder)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_killed_run_resumes_to_exactly_the_uninterrupted_result(tmp_path):
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    _run(full)
    proc = subprocess.Popen(_cmd(cut), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    from nvldb_pl.callbacks import logged_rounds
    folder = os.path.join(cut, "lightning_logs", "version_0")
    deadline = time.time() + 300
    while time.time() < deadline:  # kill once some rounds after the checkpoint are in TensorBoard
        k = _rounds_in(ckpt)
        if k >= 60 and logged_rounds(folder).get("regret/cum_avg_mean", 0) > k:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = _rounds_in(ckpt)
    assert 60 <= killed_at < T, f"the run was not cut mid-way (checkpoint at round {killed_at})"
    assert not os.path.exists(os.path.join(cut, "lightning_logs", "version_0", "summary.json"))
    logged = logged_rounds(folder).get("regret/cum_avg_mean", 0)
    assert logged > killed_at, "the kill should fall after some rounds past the checkpoint were logged"
    out = _run(cut, "--ckpt_path=last")
    assert "not resumable" not in out.stderr  # Lightning's false "unreliable results" warning is not shown
    assert sorted(os.listdir(os.path.join(cut, "lightning_logs"))) == ["version_0"]  # same run folder
    a = os.path.join(full, "lightning_logs", "version_0")
    b = os.path.join(cut, "lightning_logs", "version_0")
    sa, sb = (json.load(open(os.path.join(d, "summary.json"))) for d in (a, b))
    assert sa["seeds"] == sb["seeds"]  # per-seed regret identical, bit for bit
    ca, cb = (list(csv.reader(open(os.path.join(d, "curves.csv")))) for d in (a, b))
    assert ca == cb and len(ca) == 1 + T * 3  # whole curves, every round of every seed
    fa, fb = (torch.load(os.path.join(d, "checkpoints", "last.ckpt"), map_location="cpu", weights_only=False)
              for d in (a, b))
    for key in ("hist_xt", "hist_o", "V", "net.theta", "net.weights.0"):
        assert torch.equal(fa["state_dict"][key], fb["state_dict"][key]), key  # same selections and state
    # TensorBoard: one curve per tag over rounds 1..T, each round once (the rounds logged after the
    # checkpoint and before the kill are not logged again)
    ea, eb = _events(a), _events(b)
    assert [v for _, v in eb["final/R_T_over_T_mean"]][-1] == [v for _, v in ea["final/R_T_over_T_mean"]][-1]
    for tag, points in eb.items():
        if tag.startswith("final/"):
            continue
        assert sorted(s for s, _ in points) == list(range(1, T + 1)), tag
        assert sorted(points) == sorted(ea[tag]), tag


@pytest.mark.parametrize("named", ["last", "by path"])
def test_checkpoint_of_another_config_is_refused_naming_the_fields(tmp_path, named, capsys):
    root = str(tmp_path)
    _made(root, *SHORT, "--data.rounds=16")
    ckpt = "last" if named == "last" else os.path.join(root, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    out = _in_process(capsys, root, *SHORT, f"--ckpt_path={ckpt}", "--data.num_seeds=4", "--model.lr=0.01")
    # by path too: the command line's lr is not silently replaced by the checkpoint's
    assert out.returncode == 2, out.stderr[-2000:]
    assert "another config" in out.stderr and "model.lr: checkpoint 0.001, config 0.01" in out.stderr
    # in the same line, the data field under the name the config gives it (it is linked into model.num_seeds)
    assert "data.num_seeds: checkpoint 3, config 4; model.lr" in out.stderr and "model.num_seeds" not in out.stderr


def test_logged_rounds_is_per_tag_so_a_half_written_flush_is_completed(tmp_path):
    # a SIGKILL in the middle of a flush can leave round 5 written for one tag only: resume must
    # re-log round 5 for the other tags (and only for them), so it reads the last round per tag
    from lightning.pytorch.loggers import TensorBoardLogger
    from nvldb_pl.callbacks import logged_rounds
    logger = TensorBoardLogger(str(tmp_path), name="", version=0)
    for r in range(1, 5):
        logger.log_metrics({"regret/cum_avg_mean": float(r), "regret/avg_per_round_std": 0.1 * r}, step=r)
    logger.log_metrics({"regret/cum_avg_mean": 5.0}, step=5)
    logger.finalize("success")
    got = logged_rounds(logger.log_dir)
    assert got == {"regret/cum_avg_mean": 5, "regret/avg_per_round_std": 4}
    assert logged_rounds(logger.log_dir).get("regret/cum_avg_mean", 0) == 5 and logged_rounds(str(tmp_path / "none")) == {}


def test_a_checkpoint_from_before_the_parametrization_setting_is_read_as_eq_nn():
    """Checkpoints written before ``parametrization``, ``bias``, ``feature_dim`` and ``distinct_arms``
    were saved were made with eq. (nn) and self-duels allowed: resuming one under today's defaults
    is refused naming those fields; under the literal reading it is accepted."""
    from nvldb_pl.module import NVLDB
    old = {"dim": 5, "arms": 5, "rounds": 20, "num_seeds": 2, "link": "logistic", "width": 8}
    ckpt = {"learner": "NVLDB", "hyper_parameters": dict(old), "state_dict": {"rounds_done": torch.tensor(3)}}
    with pytest.raises(ValueError, match="model.parametrization: checkpoint 'ntk', config 'standard'") as err:
        NVLDB(**old).on_load_checkpoint(dict(ckpt))
    assert "model.distinct_arms" in str(err.value) and "model.bias" in str(err.value)
    m = NVLDB(**old, parametrization="ntk", distinct_arms=False)
    m.on_load_checkpoint(dict(ckpt, hyper_parameters=dict(old)))
    assert m.t == 3


def _per_seed(root):
    """Per seed (id, R_T, weak R_T) from the newest summary.json under ``root`` (a resumed run that
    logs into a new folder writes its own)."""
    found = [os.path.join(d, "summary.json") for d, _, files in os.walk(root) if "summary.json" in files]
    with open(max(found, key=os.path.getmtime)) as fh:
        return [(x["seed"], x["cum_avg_regret"], x["cum_weak_regret"]) for x in json.load(fh)["seeds"]]


@pytest.fixture(scope="module")
def ref16(tmp_path_factory):
    """Per seed at round 16 of a run never interrupted (the same for any logger or checkpoint folder)."""
    ref = str(tmp_path_factory.mktemp("ref16"))
    _made(ref, *SHORT, "--data.rounds=16")
    return _per_seed(ref)


# where RoundCheckpoint writes, by the logger and checkpoint settings a user may give
LAYOUTS = {"tensorboard": ([], os.path.join("lightning_logs", "version_0", "checkpoints")),
           "no logger": (["--trainer.logger=false"], "checkpoints"),
           "checkpoint.dirpath": (["--checkpoint.dirpath={root}/ck"], "ck"),
           "csv logger": (["--trainer.logger=lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir={root}/csv"],
                          os.path.join("csv", "lightning_logs", "version_0", "checkpoints"))}


@pytest.mark.parametrize("named,layout", [("last", "tensorboard"), ("by path", "tensorboard"), ("last", "no logger"),
                                          ("last", "checkpoint.dirpath"), ("last", "csv logger")])
def test_a_damaged_last_checkpoint_falls_back_to_the_previous_one_and_says_so(tmp_path, named, layout, ref16, capsys):
    cut = str(tmp_path / "cut")
    flags, where = LAYOUTS[layout]
    flags = [f.format(root=cut) for f in flags]
    _made(cut, *SHORT, "--data.rounds=16", *flags)  # a run that stopped after round 16: last.ckpt (16), .prev (8)
    folder = os.path.join(cut, where)
    assert sorted(os.listdir(folder)) == ["last.ckpt", "last.ckpt.prev"]
    assert (_rounds_in(os.path.join(folder, "last.ckpt")), _rounds_in(os.path.join(folder, "last.ckpt.prev"))) == (16, 8)
    last = os.path.join(folder, "last.ckpt")
    data = open(last, "rb").read()
    open(last, "wb").write(data[: len(data) // 2])  # cut short (a full disk, an interrupted copy)
    out = _in_process(capsys, cut, *SHORT, "--data.rounds=16", *flags, "--ckpt_path=" + ("last" if named == "last" else last))
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{last} cannot be read" in out.stderr and f"resuming from the previous checkpoint {last}.prev" in out.stderr
    # it went on from round 8 and saved round 16 again (a logger with versions: into the new version's folder)
    assert _rounds_in(last if layout != "csv logger" else last.replace("version_0", "version_1")) == 16
    assert _per_seed(cut) == ref16  # rounds 9-16 replayed exactly: seed by seed the uninterrupted run


def test_going_on_without_checkpoints_finds_the_last_one_and_saves_nothing_more(tmp_path, ref16, capsys, recwarn):
    """``--ckpt_path last --trainer.enable_checkpointing false``: it said "no checkpoint to go on from ... starting a
    new run", then refused the new run for the folder that holds that checkpoint."""
    cut = str(tmp_path / "cut")
    _made(cut, *SHORT, "--data.rounds=8")
    recwarn.clear()
    out = _in_process(capsys, cut, *SHORT, "--data.rounds=16", "--ckpt_path=last", "--trainer.enable_checkpointing=false")
    assert out.returncode == 0 and "no checkpoint to go on from" not in out.stderr, out.stderr[-2000:]
    assert not [w for w in recwarn if "callbacks used to create the checkpoint" in str(w.message)]  # RoundCheckpoint's
    assert _per_seed(cut) == ref16  # went on from round 8 to 16
    folder = os.path.join(cut, "lightning_logs", "version_0", "checkpoints")
    assert os.listdir(folder) == ["last.ckpt"] and _rounds_in(os.path.join(folder, "last.ckpt")) == 8  # nothing saved


@pytest.mark.parametrize("named", ["last", "by path"])
def test_no_whole_checkpoint_is_an_error_naming_the_file(tmp_path, named, capsys):
    root = str(tmp_path / "run")
    _made(root, *SHORT)
    folder = os.path.join(root, "lightning_logs", "version_0", "checkpoints")
    for name in ("last.ckpt", "last.ckpt.prev"):
        open(os.path.join(folder, name), "wb").write(b"not a checkpoint")
    last = os.path.join(folder, "last.ckpt")
    out = _in_process(capsys, root, *SHORT, "--ckpt_path=" + ("last" if named == "last" else last))
    assert out.returncode == 2
    assert f"ckpt_path: {last} cannot be read (BadZipFile" in out.stderr
    assert "no whole previous checkpoint" in out.stderr and "Traceback" not in out.stderr


def _curve_rows(root):
    with open(os.path.join(root, "lightning_logs", "version_0", "curves.csv")) as fh:
        return fh.read()


def test_a_finished_run_goes_on_to_a_larger_horizon_exactly(tmp_path):
    ref, ext = str(tmp_path / "ref"), str(tmp_path / "ext")
    _made(ref, *SHORT)  # 24 rounds in one go
    _made(ext, *SHORT, "--data.rounds=16")  # 16 rounds, finished ...
    gpu = str(tmp_path / "gpu")  # the same 16 rounds as a graphed CUDA run would have saved them
    shutil.copytree(ext, gpu)
    last = os.path.join(gpu, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    as_saved_by_a_graphed_cuda_run(last, last)
    out = _run(ext, *SHORT, "--ckpt_path=last")  # ... then 8 more in the same run folder
    assert "not resumable" not in out.stderr  # the stream goes on exactly: no warning that says otherwise
    assert sorted(os.listdir(os.path.join(ext, "lightning_logs"))) == ["version_0"]
    assert _per_seed(ext) == _per_seed(ref)
    assert _curve_rows(ext) == _curve_rows(ref)  # every round 1..24, once
    events = _events(os.path.join(ext, "lightning_logs", "version_0"))
    assert [s for s, _ in events["regret/cum_avg_mean"]] == list(range(1, 25))  # every round once
    # config.yaml stays the config the run started with; the resume's own is written beside it
    import yaml
    folder = os.path.join(ext, "lightning_logs", "version_0")
    assert yaml.safe_load(open(os.path.join(folder, "config.yaml")))["data"]["rounds"] == 16
    resumed = yaml.safe_load(open(os.path.join(folder, "config.resumed_at_round_16.yaml")))
    assert resumed["data"]["rounds"] == 24 and resumed["ckpt_path"].endswith("last.ckpt")
    assert "computed on" not in out.stderr  # same device: nothing to say
    # a GPU run's checkpoint goes on on a machine without a GPU: the file loads, Adam is set as a CPU run sets it,
    # and the rounds after it are the CPU run's (here, where the rounds before it were the CPU's too)
    moved = _run(gpu, *SHORT, "--ckpt_path=last")
    assert "the checkpoint's rounds were computed on cuda, and this run goes on on cpu" in moved.stderr
    assert _per_seed(gpu) == _per_seed(ref)
    assert _curve_rows(gpu) == _curve_rows(ref)
    after = torch.load(last, map_location="cpu", weights_only=False)
    assert after["accelerator"] == "cpu"
    assert all(g["foreach"] and not g["fused"] and not g["capturable"] for g in after["optimizer_states"][0]["param_groups"])


def _files(root):
    """Every file under root, with its bytes. TensorBoard's event files included: Lightning's set-up
    opens one before a checkpoint can be checked, and a refused resume removes it again."""
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_only_this_process_s_event_files_that_hold_nothing_are_dropped(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from nvldb_pl.resume import drop_empty_event_files, event_records
    empty, logged, other = tmp_path / "empty", tmp_path / "logged", tmp_path / "other"
    for folder in (empty, logged):
        writer = SummaryWriter(str(folder))
        if folder == logged:
            writer.add_scalar("regret/cum_avg_mean", 1.0, 1)
        writer.close()
    other.mkdir()  # another process's empty file (its pid in the name is not ours)
    (other / f"events.out.tfevents.1.{socket.gethostname()}.{os.getpid() + 1}.0").write_bytes(
        next(empty.iterdir()).read_bytes())
    assert [event_records(str(next(f.iterdir()))) for f in (empty, logged, other)] == [1, 2, 1]
    for folder in (empty, logged, other):
        drop_empty_event_files(str(folder))
    assert [len(list(f.iterdir())) for f in (empty, logged, other)] == [0, 1, 1]


@pytest.mark.parametrize("extra,message", [
    (["--data.num_seeds=4"], "data.num_seeds: checkpoint 3, config 4"),
    (["--data.first_seed_id=3"], "data.first_seed_id: checkpoint 0, config 3"),  # was blamed on the process count
    (["--trainer.precision=bf16-mixed"], "trainer.precision: the checkpoint's rounds were computed in '32-true'; "
                                         "going on in 'bf16-mixed' would give a run that equals neither"),
])
def test_a_refused_resume_leaves_the_run_folder_as_it_was(tmp_path, extra, message, capsys):
    root = tmp_path / "run"
    _made(str(root), *SHORT, "--data.rounds=16")
    before = _files(root)
    out = _in_process(capsys, str(root), *SHORT, *extra, "--ckpt_path=last")
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
    assert _files(root) == before  # config.yaml included: it still says what the run was


def test_resuming_a_finished_run_at_its_horizon_runs_nothing_and_says_so(tmp_path):
    root = tmp_path / "run"
    _made(str(root), *SHORT)
    before = _files(root)
    out = _run(str(root), *SHORT, "--ckpt_path=last")
    assert "data.rounds=24: the checkpoint already holds every round of the run, so nothing runs" in out.stderr
    assert "Warning" not in out.stderr  # (torchmetrics warned of compute() before update())
    assert _files(root) == before


@pytest.mark.parametrize("layout,field", [("no logger", "trainer.default_root_dir"),
                                          ("checkpoint.dirpath", "checkpoint.dirpath")])
def test_a_new_run_into_a_folder_holding_a_run_is_refused_and_writes_nothing(tmp_path, layout, field, capsys):
    root = tmp_path / "run"
    flags = [f.format(root=root) for f in LAYOUTS[layout][0]]
    _made(str(root), *SHORT, "--data.rounds=8", *flags)
    before = _files(root)
    out = _in_process(capsys, str(root), *SHORT, *flags, "--model.lr=0.01")  # a new run, another config, same folders
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"error: {field}: " in out.stderr and "already holds another run's" in out.stderr
    assert "go on with that run with --ckpt_path last" in out.stderr
    assert _files(root) == before
    assert sorted(p.name for p in root.iterdir()) == sorted({p.relative_to(root).parts[0] for p in before})


@pytest.mark.parametrize("extra,message", [
    (["--data.rounds=8"], "data.rounds: the checkpoint holds a run of 16 rounds; resuming can go on to more rounds, not fewer"),
    (["--data.rounds=24", "--model=VACDB"], "data.rounds: VACDB depends on the horizon T"),
])
def test_a_horizon_that_cannot_go_on_exactly_is_refused(tmp_path, extra, message, capsys):
    root = str(tmp_path / "run")
    model = ["--model=VACDB"] if "--model=VACDB" in extra else []
    _made(root, *SHORT, "--data.rounds=16", *model)
    out = _in_process(capsys, root, *SHORT, *extra, "--ckpt_path=last")
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]


class _Clock:
    """time.monotonic for Lightning's Timer: one second per call (a call a round), so the stop is
    deterministic."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        self.now += 1.0
        return self.now


def test_a_run_stopped_by_max_time_saves_its_round_and_goes_on_exactly(tmp_path, monkeypatch, capsys, recwarn):
    from lightning.pytorch.callbacks import timer

    from nvldb_pl.cli import run_cli
    short = ["fit", *ARGS[1:], "--data.rounds=60", "--checkpoint.every_n_rounds=25"]
    ref, cut = str(tmp_path / "ref"), str(tmp_path / "cut")
    assert run_cli([*short, f"--trainer.default_root_dir={ref}"]) == 0
    monkeypatch.setattr(timer, "time", _Clock())
    assert run_cli([*short, f"--trainer.default_root_dir={cut}", "--trainer.max_time=00:00:00:40"]) == 0
    ckpt = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    stopped = _rounds_in(ckpt)
    assert 30 < stopped < 50 and stopped % 25 != 0  # saved at the round it stopped, not at the last multiple of 25
    assert f"stopped at round {stopped} of data.rounds=60; {ckpt} holds round {stopped}" in capsys.readouterr().err
    assert json.load(open(os.path.join(cut, "lightning_logs", "version_0", "summary.json")))["rounds"] == stopped
    # the same command again (a requeued job): its limit is spent, and Lightning would skip every round and exit 0
    before = _files(tmp_path / "cut")
    monkeypatch.setattr(timer, "time", _Clock())
    assert run_cli([*short, f"--trainer.default_root_dir={cut}", "--trainer.max_time=00:00:00:40", "--ckpt_path=last"]) == 2
    err = capsys.readouterr().err
    assert "error: trainer.max_time: the earlier parts of this run have used 0:00:4" in err, err[-2000:]
    assert f"of its 0:00:40 (Lightning counts max_time over every part of a run), so no round would be played; to go on " \
           f"from round {stopped}, give a larger one, or none" in err
    assert _files(tmp_path / "cut") == before
    monkeypatch.undo()
    recwarn.clear()
    assert run_cli([*short, f"--trainer.default_root_dir={cut}", "--ckpt_path=last"]) == 0  # no max_time now
    assert not [w for w in recwarn if "callbacks used to create the checkpoint" in str(w.message)]  # Timer's
    assert _per_seed(cut) == _per_seed(ref)
    assert _curve_rows(cut) == _curve_rows(ref)  # every round 1..60 once


def test_a_run_without_checkpoints_stopped_by_max_time_says_it_cannot_go_on(tmp_path, monkeypatch, capsys):
    from lightning.pytorch.callbacks import timer

    from nvldb_pl.cli import run_cli
    monkeypatch.setattr(timer, "time", _Clock())
    root = str(tmp_path / "run")
    assert run_cli(["fit", *ARGS[1:], "--data.rounds=60", f"--trainer.default_root_dir={root}",
                    "--trainer.max_time=00:00:00:40", "--trainer.enable_checkpointing=false"]) == 0
    [summary] = glob.glob(os.path.join(root, "lightning_logs", "version_0", "summary.json"))
    stopped = json.load(open(summary))["rounds"]
    assert 30 < stopped < 50
    assert (f"stopped at round {stopped} of data.rounds=60; this run saves no checkpoint (trainer.enable_checkpointing "
            f"false), so it cannot go on: its summary holds the {stopped} rounds played") in capsys.readouterr().err
    assert not glob.glob(os.path.join(root, "**", "*.ckpt"), recursive=True)


def test_a_time_limit_of_zero_is_refused_and_writes_nothing(tmp_path, capsys):
    out = _in_process(capsys, str(tmp_path / "run"), *SHORT, "--trainer.max_time=00:00:00:00")
    assert out.returncode == 2
    assert "error: trainer.max_time: 0:00:00 leaves no time to play a round; give a positive duration, or none" in out.stderr
    assert not (tmp_path / "run").exists() or not [p for p in (tmp_path / "run").rglob("*") if p.is_file()]


class SignalAt(pl.Callback):
    """The signal ``signum`` (Ctrl-C's SIGINT, a cluster's SIGTERM) sent ``times`` times at the start of
    round ``at`` (in the process of global rank ``rank`` only, if given)."""

    def __init__(self, at: int = 1, times: int = 1, signum: int = int(signal.SIGINT), rank: Optional[int] = None):
        self.at, self.times, self.signum, self.rank = at, times, signum, rank

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if int(batch["round"]) == self.at and self.rank in (None, trainer.global_rank):
            for _ in range(self.times):
                signal.raise_signal(self.signum)


def _signal_at(at, times, signum, rank=None):
    return "--trainer.callbacks+=" + json.dumps({"class_path": "tests.test_resume.SignalAt", "init_args": {
        "at": at, "times": times, "signum": int(signum), "rank": rank}})


@pytest.mark.parametrize("signum,name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_a_signal_stops_at_the_end_of_the_round_saves_it_and_goes_on_exactly(tmp_path, capsys, signum, name):
    from nvldb_pl.cli import run_cli
    short = ["fit", *ARGS[1:], "--data.rounds=60", "--checkpoint.every_n_rounds=25"]
    ref, cut = str(tmp_path / "ref"), str(tmp_path / "cut")
    assert run_cli([*short, f"--trainer.default_root_dir={ref}"]) == 0
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (not ignored)
    try:
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        assert run_cli([*short, f"--trainer.default_root_dir={cut}", _signal_at(37, 1, signum)]) == 128 + signum
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # put back
    finally:
        signal.signal(signal.SIGINT, outside)
    ckpt = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    assert _rounds_in(ckpt) == 37  # round 37 finished and saved, not the last multiple of 25
    err = capsys.readouterr().err
    assert f"{name}: stopping at the end of this round" in err
    assert f"stopped at round 37 of data.rounds=60; {ckpt} holds round 37: go on with --ckpt_path last\n" in err
    assert run_cli([*short, f"--trainer.default_root_dir={cut}", "--ckpt_path=last"]) == 0
    assert _per_seed(cut) == _per_seed(ref)
    assert _curve_rows(cut) == _curve_rows(ref)


def test_sigterm_in_a_run_without_checkpoints_says_it_cannot_go_on(tmp_path, capsys):
    """No RoundCheckpoint: Lightning's own SIGTERM handling stops the run (143); the line says there is nothing to
    go on from (it said "go on from the last checkpoint")."""
    from nvldb_pl.cli import run_cli
    root = tmp_path / "run"
    code = run_cli(["fit", *ARGS[1:], "--data.rounds=60", f"--trainer.default_root_dir={root}",
                    "--trainer.enable_checkpointing=false", _signal_at(20, 1, signal.SIGTERM)])
    assert code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert ("stopped by SIGTERM; this run saves no checkpoint (trainer.enable_checkpointing false), so it cannot go "
            "on") in err and "--ckpt_path last" not in err, err[-2000:]
    assert not list(root.rglob("*.ckpt"))


SLURM_JOB = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "nvldb", "SLURM_JOB_ID": "4242", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NODELIST": "localhost"}


def test_slurms_requeue_signal_stops_at_the_end_of_the_round_requeues_and_the_job_goes_on_exactly(
        tmp_path, capsys, monkeypatch):
    """Under SLURM (``#SBATCH --signal=USR1@120``) Lightning's auto-requeue would save hpc_ckpt_N.ckpt
    from inside the signal handler, mid-round, and the requeued job would go on from it without a word.
    Here: the round ends, is saved, the job is requeued (a stand-in ``scontrol`` records the call), and
    the requeued command (with ``--ckpt_path last``) ends as the uninterrupted run."""
    from nvldb_pl.cli import run_cli
    short = ["fit", *ARGS[1:], "--data.rounds=60", "--checkpoint.every_n_rounds=25"]
    ref, cut = str(tmp_path / "ref"), str(tmp_path / "cut")
    assert run_cli([*short, f"--trainer.default_root_dir={ref}"]) == 0
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol.calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for key, value in SLURM_JOB.items():
        monkeypatch.setenv(key, value)
    job = [*short, f"--trainer.default_root_dir={cut}", "--ckpt_path=last"]  # the batch script's command
    handler = signal.getsignal(signal.SIGUSR1)
    assert run_cli([*job, _signal_at(37, 1, signal.SIGUSR1)]) == 128 + signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) == handler  # put back
    ckpt = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    assert _rounds_in(ckpt) == 37 and not list(tmp_path.rglob("hpc_ckpt_*"))  # the round's end, not mid-round
    err = capsys.readouterr().err
    assert "SIGUSR1 (SLURM: the job's time is nearly up): stopping at the end of this round" in err
    assert "requeued SLURM job 4242" in err and calls.read_text() == "requeue 4242\n"
    assert run_cli(job) == 0  # the requeued job
    assert _per_seed(cut) == _per_seed(ref)
    assert _curve_rows(cut) == _curve_rows(ref)
    # an hpc_ckpt that Lightning's own auto-requeue wrote: a new run under SLURM is refused, not resumed from it
    shutil.copy(ckpt, os.path.join(cut, "hpc_ckpt_1.ckpt"))
    assert run_cli([*short, f"--trainer.default_root_dir={cut}"]) == 2
    assert "hpc_ckpt_1.ckpt is a checkpoint Lightning's SLURM auto-requeue wrote" in capsys.readouterr().err
    # without checkpoints, Lightning's auto-requeue is off too: no handler of its own for SLURM's signal in the run
    HandlerDuringRun.seen.clear()
    record = "--trainer.callbacks+=" + json.dumps({"class_path": "tests.test_resume.HandlerDuringRun"})
    for extra in ([], ["--trainer.enable_checkpointing=false"]):
        assert run_cli([*short, "--data.rounds=3", f"--trainer.default_root_dir={tmp_path / 'bare'}", *extra, record]) == 0
    assert HandlerDuringRun.seen[0] == RoundCheckpoint._on_signal and HandlerDuringRun.seen[1] == handler


class HandlerDuringRun(pl.Callback):
    """Records what takes SIGUSR1 (SLURM's requeue signal) while the run plays its first round."""
    seen: list = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if int(batch["round"]) == 1:
            h = signal.getsignal(signal.SIGUSR1)
            HandlerDuringRun.seen.append(getattr(h, "__func__", h))


def test_an_ignored_sigint_stays_ignored(tmp_path):
    """A background job's SIGINT is ignored by its shell: the run keeps it so and plays every round."""
    from nvldb_pl.cli import run_cli
    outside = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert run_cli(["fit", *ARGS[1:], "--data.rounds=40", "--checkpoint.every_n_rounds=25",
                        f"--trainer.default_root_dir={tmp_path}", _signal_at(30, 1, signal.SIGINT)]) == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, outside)
    assert _rounds_in(os.path.join(str(tmp_path), "lightning_logs", "version_0", "checkpoints", "last.ckpt")) == 40


# a second Ctrl-C raises KeyboardInterrupt at once (round 37 never ends: the checkpoint of round 25 stays); a
# second SIGTERM goes to Lightning's handler, which stops at the end of round 37, already saved by the first
@pytest.mark.parametrize("signum,code,saved", [(signal.SIGINT, 1, 25), (signal.SIGTERM, 143, 37)])
def test_a_second_signal_goes_to_the_handler_from_before_the_run(tmp_path, signum, code, saved):
    from nvldb_pl.cli import run_cli
    cut = str(tmp_path / "cut")
    # Python's own Ctrl-C handler before the run (a process started in the background, as CI may start
    # pytest, inherits SIGINT ignored: then the second Ctrl-C is ignored too, rightly)
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        assert run_cli(["fit", *ARGS[1:], "--data.rounds=60", "--checkpoint.every_n_rounds=25",
                        f"--trainer.default_root_dir={cut}", _signal_at(37, 2, signum)]) == code
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    finally:
        signal.signal(signal.SIGINT, outside)
    assert _rounds_in(os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")) == saved


def test_a_checkpoint_the_disk_cannot_hold_stops_the_run_in_one_line_and_keeps_the_last(tmp_path, monkeypatch, capsys):
    """A full disk (ENOSPC) at the round-16 save: one error line naming the file, the round and the round
    kept, exit 1; the part-written file removed, last.ckpt still round 8; once there is room the run goes
    on from it to the uninterrupted run's results."""
    import errno

    from nvldb_pl.cli import run_cli
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    _made(full, *SHORT)
    import builtins

    import nvldb_pl.checkpoint as checkpoint_module
    saves = []

    class FillingUp:  # a checkpoint file on a disk that fills up at the second save, part of it written
        def __init__(self, path, mode):
            self.fh = builtins.open(path, mode)

        def write(self, data):
            if len(saves) < 2:
                return self.fh.write(data)
            self.fh.write(bytes(data)[:1000])
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    def open_checkpoint(path, mode="r"):
        saves.append(path)
        return FillingUp(path, mode)

    monkeypatch.setattr(checkpoint_module, "open", open_checkpoint, raising=False)  # the module's own open()
    code = run_cli([*ARGS, f"--trainer.default_root_dir={cut}", *SHORT, "--trainer.enable_progress_bar=true"])
    err = capsys.readouterr().err
    last = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    assert code == 1 and "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if "error:" in line]
    assert lines == [f"error: checkpoint: {last} cannot be written at round 16 (No space left on device); the run "
                     f"stops there, and {last} still holds round 8: make room, then go on with --ckpt_path last"]
    assert sorted(os.listdir(os.path.dirname(last))) == ["last.ckpt"] and _rounds_in(last) == 8  # no .tmp left
    monkeypatch.delattr(checkpoint_module, "open")
    _made(cut, *SHORT, "--ckpt_path=last")
    assert _per_seed(cut) == _per_seed(full) and _curve_rows(cut) == _curve_rows(full)


def test_a_run_file_the_disk_cannot_hold_is_named_and_the_old_one_kept(tmp_path):
    import errno

    from nvldb_pl.host import CannotWrite, atomic_open
    path = tmp_path / "summary.json"
    path.write_text("{}")
    with pytest.raises(CannotWrite, match=f"^{path}: cannot be written \\(No space left on device\\); the file it "
                                          f"would replace is kept as it was$") as caught:
        with atomic_open(str(path)) as fh:
            fh.write("{\"seeds\": ")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, OSError)  # `except OSError` still takes it
    assert path.read_text() == "{}" and os.listdir(tmp_path) == ["summary.json"]


def test_a_write_the_kernel_refuses_at_a_checkpoint_stops_the_run_in_one_line(tmp_path):
    """A real write error, as a full disk gives: here a file may not grow past 4 kB (RLIMIT_FSIZE, EFBIG),
    and a checkpoint is 33 kB. torch's zip writer, writing to the file itself, turns that into a
    RuntimeError ("unexpected pos 64 vs 0", as at a full tmpfs): the checkpoint is serialized in memory
    and written by Python."""
    import resource

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4_000, 4_000))

    root = tmp_path / "run"
    out = subprocess.run(_cmd(str(root), *SHORT), capture_output=True, text=True, timeout=600, preexec_fn=small_files)
    folder = root / "lightning_logs" / "version_0" / "checkpoints"
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert (f"error: checkpoint: {folder / 'last.ckpt'} cannot be written at round 8 (File too large); the run stops "
            f"there, and no round was saved before it: once it can be written, go on with --ckpt_path last") in out.stderr
    assert list(folder.iterdir()) == []  # no part-written file


def test_a_checkpoint_is_written_in_place_not_through_the_system_s_temporary_folder(tmp_path, monkeypatch):
    """Lightning's own writer goes through $TMPDIR and moves the file: a second copy of every checkpoint,
    and a save that fails when that folder is full though the run's disk has room."""
    import tempfile
    tiny = tmp_path / "tmpdir"
    tiny.mkdir()
    monkeypatch.setenv("TMPDIR", str(tiny))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    files_made = []
    real_mkstemp = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda *a, **k: files_made.append(1) or real_mkstemp(*a, **k))
    from nvldb_pl.cli import run_cli
    assert run_cli([*ARGS, f"--trainer.default_root_dir={tmp_path / 'run'}", *SHORT]) == 0
    assert files_made == [] and _rounds_in(tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoints" /
                                           "last.ckpt") == 24


def test_a_checkpoint_folder_that_cannot_be_made_is_refused_before_anything_is_written(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    root = tmp_path / "run"
    out = _in_process(capsys, str(root), *SHORT, f"--checkpoint.dirpath={tmp_path / 'afile' / 'ckpts'}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"error: checkpoint.dirpath: {tmp_path / 'afile' / 'ckpts'} cannot be made: {tmp_path / 'afile'} is a " \
           f"file, not a folder" in out.stderr
    assert [p for p in root.rglob("*") if p.is_file()] == []  # (before, the run failed at its first save, rounds later)


def test_an_error_mid_run_starts_a_line_of_its_own_after_the_progress_bar():
    import io

    from tqdm import tqdm

    from nvldb_pl.cli import end_progress_line
    out = io.StringIO()
    bar = tqdm(total=10, file=out)
    bar.update(3)
    end_progress_line()
    assert out.getvalue().endswith("\n") and bar.disable  # closed: its line ended


def test_an_asynchronous_checkpoint_writer_is_refused_before_anything_is_written(tmp_path, capsys):
    """AsyncCheckpointIO returns before the file is written; the round's checkpoint was renamed at once
    (before: a raw 'No such file' for last.ckpt.tmp at the first save)."""
    root = tmp_path / "run"
    out = _in_process(capsys, str(root), *SHORT, "--trainer.plugins=lightning.pytorch.plugins.io.AsyncCheckpointIO")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "error: trainer.plugins: AsyncCheckpointIO writes a checkpoint in another thread" in out.stderr
    assert [p for p in root.rglob("*") if p.is_file()] == []
