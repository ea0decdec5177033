"""Exact resume after a real SIGKILL, from a damaged checkpoint, to a larger horizon; refusal of a checkpoint
from another config and of a new run into a run's folder."""

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import torch

from tests.helpers.gpu_saved import as_saved_by_a_graphed_cuda_run
from tests.helpers.runs import (
    LAYOUTS,
    SHORT,
    T,
    _cmd,
    _curve_rows,
    _events,
    _in_process,
    _made,
    _per_seed,
    _rounds_in,
    _run,
)


def test_killed_run_resumes_to_exactly_the_uninterrupted_result(tmp_path):
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    _run(full)
    proc = subprocess.Popen(_cmd(cut), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    from nvldb_pl.loop.callbacks import logged_rounds

    folder = os.path.join(cut, "lightning_logs", "version_0")

    def past_the_checkpoint():  # some rounds after the checkpoint are in TensorBoard
        k = _rounds_in(ckpt)
        return k >= 60 and logged_rounds(folder).get("regret/cum_avg_mean", 0) > k

    deadline = time.time() + 300
    while time.time() < deadline:
        if past_the_checkpoint():
            # frozen, what it wrote is what the kill leaves: checked again, since it may have saved the next checkpoint
            # between the look and the stop (a race this test lost on a loaded machine)
            os.kill(proc.pid, signal.SIGSTOP)
            if past_the_checkpoint():
                break
            os.kill(proc.pid, signal.SIGCONT)
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
    fa, fb = (
        torch.load(os.path.join(d, "checkpoints", "last.ckpt"), map_location="cpu", weights_only=False) for d in (a, b)
    )
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
    from nvldb_pl.loop.callbacks import logged_rounds

    logger = TensorBoardLogger(str(tmp_path), name="", version=0)
    for r in range(1, 5):
        logger.log_metrics({"regret/cum_avg_mean": float(r), "regret/avg_per_round_std": 0.1 * r}, step=r)
    logger.log_metrics({"regret/cum_avg_mean": 5.0}, step=5)
    logger.finalize("success")
    got = logged_rounds(logger.log_dir)
    assert got == {"regret/cum_avg_mean": 5, "regret/avg_per_round_std": 4}
    assert (
        logged_rounds(logger.log_dir).get("regret/cum_avg_mean", 0) == 5 and logged_rounds(str(tmp_path / "none")) == {}
    )


def test_a_checkpoint_from_before_the_parametrization_setting_is_read_as_eq_nn():
    """Checkpoints written before ``parametrization``, ``bias``, ``feature_dim`` and ``distinct_arms``
    were saved were made with eq. (nn) and self-duels allowed: resuming one under today's defaults
    is refused naming those fields; under the literal reading it is accepted."""
    from nvldb_pl.learners.nvldb import NVLDB
    from nvldb_pl.loop.module import LearnerModule
    from nvldb_pl.machinery.provenance import check_resume

    linked = {"dim": 5, "arms": 5, "rounds": 20, "num_seeds": 2, "link": "logistic"}
    old = {**linked, "width": 8}  # the flat layout of a checkpoint then
    made = LearnerModule(NVLDB(**linked, network={"width": 8, "parametrization": "ntk"}, distinct_arms=False))
    state = {**made.state_dict(), "rounds_done": torch.tensor(3)}
    ckpt = {"learner": "NVLDB", "hyper_parameters": dict(old), "state_dict": state}
    fresh = LearnerModule(NVLDB(**linked, network={"width": 8}))
    fresh.resume_check = lambda module, checkpoint: check_resume(module, checkpoint)  # as the loop hands it over
    with pytest.raises(ValueError, match="model.network.parametrization: checkpoint 'ntk', config 'standard'") as err:
        fresh.on_load_checkpoint(dict(ckpt))
    assert "model.distinct_arms" in str(err.value) and "model.network.bias" in str(err.value)
    literal = dict(network={"width": 8, "parametrization": "ntk"}, distinct_arms=False, w_reg=0.0)
    m = LearnerModule(NVLDB(**linked, **literal))  # the literal reading
    m.resume_check = lambda module, checkpoint: check_resume(module, checkpoint)
    read = dict(ckpt, hyper_parameters=dict(old))
    m.on_load_checkpoint(read)
    m.load_state_dict(read["state_dict"])
    assert m.t == m.learner.t == 3


@pytest.fixture(scope="module")
def ref16(tmp_path_factory):
    """Per seed at round 16 of a run never interrupted (the same for any logger or checkpoint folder)."""
    ref = str(tmp_path_factory.mktemp("ref16"))
    _made(ref, *SHORT, "--data.rounds=16")
    return _per_seed(ref)


# where RoundCheckpoint writes, by the logger and checkpoint settings a user may give


@pytest.mark.parametrize(
    "named,layout",
    [
        ("last", "tensorboard"),
        ("by path", "tensorboard"),
        ("last", "no logger"),
        ("last", "checkpoint.dirpath"),
        ("last", "csv logger"),
    ],
)
def test_a_damaged_last_checkpoint_falls_back_to_the_previous_one_and_says_so(tmp_path, named, layout, ref16, capsys):
    cut = str(tmp_path / "cut")
    flags, where = LAYOUTS[layout]
    flags = [f.format(root=cut) for f in flags]
    _made(cut, *SHORT, "--data.rounds=16", *flags)  # a run that stopped after round 16: last.ckpt (16), .prev (8)
    folder = os.path.join(cut, where)
    assert sorted(os.listdir(folder)) == ["last.ckpt", "last.ckpt.prev"]
    assert (_rounds_in(os.path.join(folder, "last.ckpt")), _rounds_in(os.path.join(folder, "last.ckpt.prev"))) == (
        16,
        8,
    )
    last = os.path.join(folder, "last.ckpt")
    data = open(last, "rb").read()
    open(last, "wb").write(data[: len(data) // 2])  # cut short (a full disk, an interrupted copy)
    out = _in_process(
        capsys, cut, *SHORT, "--data.rounds=16", *flags, "--ckpt_path=" + ("last" if named == "last" else last)
    )
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
    out = _in_process(
        capsys, cut, *SHORT, "--data.rounds=16", "--ckpt_path=last", "--trainer.enable_checkpointing=false"
    )
    assert out.returncode == 0 and "no checkpoint to go on from" not in out.stderr, out.stderr[-2000:]
    assert not [w for w in recwarn if "callbacks used to create the checkpoint" in str(w.message)]  # RoundCheckpoint's
    assert _per_seed(cut) == ref16  # went on from round 8 to 16
    folder = os.path.join(cut, "lightning_logs", "version_0", "checkpoints")
    assert os.listdir(folder) == ["last.ckpt"] and _rounds_in(os.path.join(folder, "last.ckpt")) == 8  # nothing saved


def test_a_file_of_lightnings_own_model_checkpoint_resumes_exactly_without_its_warning(
    tmp_path, ref16, capsys, recwarn
):
    """A user's ModelCheckpoint in trainer.callbacks (every_n_train_steps counts Adam steps: 2 a round here) warned
    that with manual optimization its file holds the state after the step: here that is a round's state, and the
    file goes on to the uninterrupted run."""
    cut, own = str(tmp_path / "cut"), str(tmp_path / "own")
    recwarn.clear()
    _made(
        cut,
        *SHORT,
        "--data.rounds=12",
        "--trainer.callbacks=lightning.pytorch.callbacks.ModelCheckpoint",
        "--trainer.callbacks.every_n_train_steps=16",
        f"--trainer.callbacks.dirpath={own}",
    )
    assert not [w for w in recwarn if "manual optimization" in str(w.message)]
    assert os.listdir(own) == ["epoch=0-step=16.ckpt"]  # round 8
    out = _in_process(
        capsys,
        str(tmp_path / "again"),
        *SHORT,
        "--data.rounds=16",
        f"--ckpt_path={os.path.join(own, 'epoch=0-step=16.ckpt')}",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert _per_seed(str(tmp_path / "again")) == ref16


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


def test_a_finished_run_goes_on_to_a_larger_horizon_exactly(tmp_path):
    ref, ext = str(tmp_path / "ref"), str(tmp_path / "ext")
    _made(ref, *SHORT)  # 24 rounds in one go
    _made(ext, *SHORT, "--data.rounds=16")  # 16 rounds, finished ...
    gpu = str(tmp_path / "gpu")  # the same 16 rounds as a graphed CUDA run would have saved them
    shutil.copytree(ext, gpu)
    last = os.path.join(gpu, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    as_saved_by_a_graphed_cuda_run(last, last)
    older = str(tmp_path / "older")  # the same 16 rounds, as if made with another torch at another commit
    shutil.copytree(ext, older)
    older_last = os.path.join(older, "lightning_logs", "version_0", "checkpoints", "last.ckpt")
    ckpt = torch.load(older_last, map_location="cpu", weights_only=False)
    now = dict(ckpt["software"])
    ckpt["software"].update(torch="2.0.0", commit="0" * 40)
    torch.save(ckpt, older_last)
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
    assert (
        "computed on" not in out.stderr and "were made with" not in out.stderr
    )  # same device, software: nothing to say
    from nvldb_pl.machinery.host import software_text

    went_on = _run(older, *SHORT, "--ckpt_path=last")
    assert (
        f"the checkpoint's rounds were made with nvldb_pl {now['nvldb_pl']} at commit 000000000000, torch 2.0.0, "
        f"lightning {now['lightning']}"
        in went_on.stderr
        and f"goes on with {software_text(now)}:" in went_on.stderr
    )
    assert _per_seed(older) == _per_seed(ref)  # (the arithmetic here is the same: only the record said otherwise)
    summary = json.load(open(os.path.join(older, "lightning_logs", "version_0", "summary.json")))
    assert summary["software"] == now and torch.load(older_last, weights_only=False)["software"] == now
    # a GPU run's checkpoint goes on on a machine without a GPU: the file loads, Adam is set as a CPU run sets it,
    # and the rounds after it are the CPU run's (here, where the rounds before it were the CPU's too)
    moved = _run(gpu, *SHORT, "--ckpt_path=last")
    assert "the checkpoint's rounds were computed on cuda, and this run goes on on cpu" in moved.stderr
    assert _per_seed(gpu) == _per_seed(ref)
    assert _curve_rows(gpu) == _curve_rows(ref)
    after = torch.load(last, map_location="cpu", weights_only=False)
    assert after["accelerator"] == "cpu"
    assert all(
        g["foreach"] and not g["fused"] and not g["capturable"] for g in after["optimizer_states"][0]["param_groups"]
    )


def test_a_run_made_in_parts_keeps_the_software_and_device_of_each_part(tmp_path):
    from nvldb_pl.machinery.host import software

    now = software()
    one, parts = str(tmp_path / "one"), str(tmp_path / "parts")
    _made(one, *SHORT)  # 24 rounds in one go: one part, and no earlier_parts in its summary
    folder = os.path.join(one, "lightning_logs", "version_0")
    assert torch.load(os.path.join(folder, "checkpoints", "last.ckpt"), weights_only=False)["parts"] == [
        {"rounds": [1, 24], "accelerator": "cpu", "software": now}
    ]
    assert "earlier_parts" not in json.load(open(os.path.join(folder, "summary.json")))
    _made(parts, "--data.rounds=8", "--checkpoint.every_n_rounds=8")  # rounds 1-8, as if with another torch ...
    folder = os.path.join(parts, "lightning_logs", "version_0")
    last = os.path.join(folder, "checkpoints", "last.ckpt")
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    older = {**now, "torch": "2.0.0"}
    ckpt["parts"][0]["software"] = ckpt["software"] = older
    torch.save(ckpt, last)
    _made(parts, "--data.rounds=16", "--checkpoint.every_n_rounds=8", "--ckpt_path=last")  # ... 9-16, then 17-24
    first, second = (
        {"rounds": [1, 8], "accelerator": "cpu", "software": older},
        {"rounds": [9, 16], "accelerator": "cpu", "software": now},
    )
    assert json.load(open(os.path.join(folder, "summary.json")))["earlier_parts"] == [first]
    _made(parts, *SHORT, "--ckpt_path=last")
    summary = json.load(open(os.path.join(folder, "summary.json")))
    assert summary["earlier_parts"] == [first, second] and summary["software"] == now
    assert torch.load(last, weights_only=False)["parts"] == [
        first,
        second,
        {"rounds": [17, 24], "accelerator": "cpu", "software": now},
    ]
    assert _per_seed(parts) == _per_seed(one)  # (only the record of the first part was changed)
    # a checkpoint saved before parts were kept: its rounds as one part, with what its last part recorded
    del ckpt["parts"]
    torch.save(ckpt, last)
    _made(parts, "--data.rounds=16", "--checkpoint.every_n_rounds=8", "--ckpt_path=last")
    assert json.load(open(os.path.join(folder, "summary.json")))["earlier_parts"] == [first]


def test_only_this_process_s_event_files_that_hold_nothing_are_dropped(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from nvldb_pl.machinery.resume import drop_empty_event_files, event_records

    empty, logged, other = tmp_path / "empty", tmp_path / "logged", tmp_path / "other"
    for folder in (empty, logged):
        writer = SummaryWriter(str(folder))
        if folder == logged:
            writer.add_scalar("regret/cum_avg_mean", 1.0, 1)
        writer.close()
    other.mkdir()  # another process's empty file (its pid in the name is not ours)
    (other / f"events.out.tfevents.1.{socket.gethostname()}.{os.getpid() + 1}.0").write_bytes(
        next(empty.iterdir()).read_bytes()
    )
    assert [event_records(str(next(f.iterdir()))) for f in (empty, logged, other)] == [1, 2, 1]
    for folder in (empty, logged, other):
        drop_empty_event_files(str(folder))
    assert [len(list(f.iterdir())) for f in (empty, logged, other)] == [0, 1, 1]


def test_a_tilde_in_a_path_field_is_the_home_folder(tmp_path, monkeypatch):
    """``~`` in trainer.default_root_dir, checkpoint.dirpath and ckpt_path (from YAML, or ``--field=~/x``, which no
    shell expands) is $HOME: every file of the run lands there, no folder named ``~`` is made in the working folder
    (Lightning's logger expanded it and the checkpoints did not: one run's files in two places), and the run goes on
    from a checkpoint named with ``~``."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    _made("~/runs", *SHORT, "--checkpoint.dirpath=~/ck")
    assert os.listdir(work) == []
    assert _rounds_in(home / "ck" / "last.ckpt") == 24
    summary = home / "runs" / "lightning_logs" / "version_0" / "summary.json"
    assert summary.is_file() and list(summary.parent.glob("events.out.tfevents.*"))
    (home / "more.yaml").write_text("data:\n  rounds: 32\n")  # --config=~/... too
    _made(
        "~/runs",
        "--config=~/more.yaml",
        "--checkpoint.every_n_rounds=8",
        "--checkpoint.dirpath=~/ck",
        "--ckpt_path=~/ck/last.ckpt",
    )
    assert os.listdir(work) == []
    assert _rounds_in(home / "ck" / "last.ckpt") == 32


def test_a_run_killed_after_its_last_round_before_its_summary_gets_it_from_the_checkpoint(
    tmp_path, capsys, monkeypatch
):
    """A kill after the last round's checkpoint and before summary.json (and curves.csv) could not be recovered:
    ``--ckpt_path last`` said "nothing was run and its results stay in .../summary.json", a file that was not there,
    and reproduce.py ran the run again from round 1. Both now write the summary and curves from the checkpoint: the
    per-seed results and curves those of the run, its wall time unknown (null, "–" in a report)."""
    from nvldb_pl.loop.summary import RunSummary

    root = tmp_path / "run"
    _made(str(root), *SHORT)
    folder = root / "lightning_logs" / "version_0"
    whole, curves = json.loads((folder / "summary.json").read_text()), (folder / "curves.csv").read_text()
    (folder / "summary.json").unlink()
    (folder / "curves.csv").unlink()
    ran = _in_process(capsys, str(root), *SHORT, "--ckpt_path=last")
    assert ran.returncode == 0, ran.stderr[-2000:]
    made = json.loads((folder / "summary.json").read_text())
    assert made["seeds"] == whole["seeds"] and made["R_T_over_T_mean"] == whole["R_T_over_T_mean"]
    assert made["wall_seconds"] is None and made["recovered_from"].endswith("last.ckpt")
    assert (folder / "curves.csv").read_text() == curves
    assert not (root / "lightning_logs" / "version_1").exists()

    # reproduce.py: a run whose summary was never written goes on from its checkpoint, not from round 1
    from tests.helpers.script_loader import load_script

    reproduce, out = load_script("reproduce"), tmp_path / "rep"
    args = ["--out", str(out), "--tasks", "cos", "--rounds", "6", "--seeds", "2", "--methods", "NVLDB-UCB-ASYM"]
    args += ["--set", "grad_steps=1"]
    killed = RunSummary.on_train_end

    def kill(self, trainer, module):
        raise KeyboardInterrupt  # as a kill there would leave it: every round checkpointed, no summary

    monkeypatch.setattr(RunSummary, "on_train_end", kill)
    assert reproduce.main(args) == 130
    monkeypatch.setattr(RunSummary, "on_train_end", killed)
    run = out / "runs" / "cos" / "NVLDB-UCB-ASYM" / "lightning_logs" / "version_0"
    assert not (run / "summary.json").exists()
    capsys.readouterr()
    assert reproduce.main(args) == 0
    said = capsys.readouterr().out
    assert "[go on]" in said and "from round 6" in said, said
    assert not (run.parent / "version_1").exists()
    assert json.loads((run / "summary.json").read_text())["wall_seconds"] is None
    assert "| NVLDB-UCB-ASYM |" in (out / "report.md").read_text()
    fresh = tmp_path / "fresh"
    assert reproduce.main([*args[:1], str(fresh), *args[2:]]) == 0
    assert (
        json.loads((run / "summary.json").read_text())["seeds"]
        == json.loads(next(fresh.glob("runs/cos/NVLDB-UCB-ASYM/lightning_logs/version_0/summary.json")).read_text())[
            "seeds"
        ]
    )
