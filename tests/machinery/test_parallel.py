"""--trainer.strategy seed_parallel: 2 CPU processes (gloo) x 3 seeds equal 1 process x 6 seeds."""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN = os.path.join(ROOT, "scripts", "main.py")
T = 40
BASE = [
    "fit",
    "--config",
    os.path.join(ROOT, "configs", "cos.yaml"),
    f"--data.rounds={T}",
    "--model.network.width=8",
    "--model.grad_steps=2",
    "--model.strategy=ts_csym",
    "--checkpoint.every_n_rounds=10",
    "--trainer.enable_progress_bar=false",
    "--loop.log_every_n_rounds=5",
]
PARALLEL = ["--trainer.strategy=seed_parallel", "--trainer.devices=2", "--trainer.accelerator=cpu"]


def _cmd(root, *extra):
    return [sys.executable, MAIN, *BASE, f"--trainer.default_root_dir={root}", *extra]


def _made(root, *extra):
    """A one-process run whose output is not read, made in this process (no 4 s of imports)."""
    from nvldb_pl.cli import run_cli

    assert run_cli([*BASE, f"--trainer.default_root_dir={root}", *extra]) == 0


def _run(root, *extra):
    out = subprocess.run(_cmd(root, *extra), capture_output=True, text=True, timeout=600, cwd=ROOT)
    if out.returncode != 0:
        open(os.path.join(root, "stderr.txt"), "w").write(out.stderr)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _summary(root):
    with open(os.path.join(root, "lightning_logs", "version_0", "summary.json")) as fh:
        return json.load(fh)


def _curves(root):
    with open(os.path.join(root, "lightning_logs", "version_0", "curves.csv")) as fh:
        return fh.read()


@pytest.fixture(scope="module")
def six_seeds(tmp_path_factory):
    """The same 6-seed run in one process and in two (3 seeds each): the folders and the two-process run's stderr."""
    base = tmp_path_factory.mktemp("six")
    one, two = str(base / "one"), str(base / "two")
    _made(one, "--data.num_seeds=6")
    return one, two, _run(two, "--data.num_seeds=6", *PARALLEL)


def test_two_processes_equal_one_process_per_seed_and_rank0_logs_all_seeds(six_seeds):
    one, two, out = six_seeds
    import re  # no warning from either rank (Lightning's own deprecated calls are filtered, machinery/messages.QUIET)

    assert [line for line in out.stderr.splitlines() if re.search(r"Warning\b|warn|\.py:\d+: ", line, flags=re.I)] == []
    a, b = _summary(one), _summary(two)
    assert [s["seed"] for s in b["seeds"]] == list(range(6))
    assert a["seeds"] == b["seeds"]  # bit for bit
    assert _curves(one) == _curves(two)
    ckpts = sorted(os.listdir(os.path.join(two, "lightning_logs", "version_0", "checkpoints")))
    assert ckpts == ["last.ckpt", "last.ckpt.prev", "last.ckpt.rank1", "last.ckpt.rank1.prev"]  # every rank
    r0, r1 = (
        torch.load(
            os.path.join(two, "lightning_logs", "version_0", "checkpoints", f), weights_only=False, map_location="cpu"
        )["state_dict"]["hist_xt"]
        for f in ckpts[::2]
    )
    assert r0.shape[0] == r1.shape[0] == 3 and not torch.equal(r0, r1)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(os.path.join(two, "lightning_logs", "version_0"))
    acc.Reload()
    last = acc.Scalars("regret/cum_avg_mean")[-1]
    assert last.step == T
    assert abs(last.value - sum(s["cum_avg_regret"] for s in b["seeds"]) / 6) < 1e-4


@pytest.fixture(scope="module")
def six_seeds_longer(tmp_path_factory):
    """six_seeds' run made with 10 more rounds from the start, in one process."""
    longer = str(tmp_path_factory.mktemp("six_longer"))
    _made(longer, "--data.num_seeds=6", f"--data.rounds={T + 10}")
    return longer


@pytest.mark.parametrize(
    "saved_by,resumed_by,old",
    [
        pytest.param(1, 2, False, marks=pytest.mark.slow),  # the default suite keeps 2 -> 1 and 2 -> 2
        (2, 1, False),
        (2, 2, True),
        pytest.param(2, 1, True, marks=pytest.mark.slow),
    ],
)
def test_a_run_goes_on_exactly_with_another_number_of_processes(
    six_seeds, six_seeds_longer, tmp_path, saved_by, resumed_by, old
):
    """Each process saved only its own seeds; the ranks' files are merged and every new process takes its
    share, so a run saved by 1 process goes on in 2 and one saved by 2 goes on in 1, seed by seed the same.
    ``old``: checkpoints from before they recorded their process count (counted from the rank files)."""
    run = str(tmp_path / "run")
    shutil.copytree(six_seeds[saved_by - 1], run)
    if old:
        for path in glob.glob(os.path.join(run, "lightning_logs", "version_0", "checkpoints", "last.ckpt*")):
            ckpt = torch.load(path, weights_only=False, map_location="cpu")
            del ckpt["processes"], ckpt["precision"]
            torch.save(ckpt, path)
    resume = [] if resumed_by == 1 else PARALLEL
    out = _run(run, "--data.num_seeds=6", f"--data.rounds={T + 10}", "--ckpt_path=last", *resume)
    assert "Traceback" not in out.stderr
    assert _summary(run)["seeds"] == _summary(six_seeds_longer)["seeds"]  # bit for bit
    assert _curves(run) == _curves(six_seeds_longer)


def _fake_rank_file(ids, rounds=5):
    """A checkpoint of seeds ``ids`` as one rank saves it: per-seed tensors lead with the seed dimension."""
    n, v = len(ids), torch.tensor(ids, dtype=torch.float64)
    return {
        "state_dict": {
            "seed_id": torch.tensor(ids),
            "rounds_done": torch.tensor(rounds),
            "base_seed": torch.tensor(0),
            "hist_o": v.unsqueeze(1).repeat(1, 3),
            "regret.rounds": torch.tensor(rounds),
            "net.weights.0": v.view(n, 1, 1).repeat(1, 2, 2),
        },
        "optimizer_states": [
            {
                "state": {0: {"step": torch.tensor(3.0), "exp_avg": v.view(n, 1, 1).repeat(1, 2, 2)}},
                "param_groups": [{"lr": 1e-3}],
            }
        ],
        "callbacks": {
            "DuelingLoop": {
                "pending": [(4, v + 0.5, v + 0.25), (5, v + 1.5, v + 1.25)],
                "curves": [([1, 2], torch.zeros(2, 6), torch.zeros(2, 6))],
                "running_mean": 0.5,
            }
        },
        "loops": {"fit_loop": {"rounds": rounds}},
        "processes": 2,
    }


def test_merging_the_ranks_files_and_taking_shares_moves_every_per_seed_entry_and_nothing_else():
    from nvldb_pl.machinery import shards

    a, b = _fake_rank_file([0, 1, 2]), _fake_rank_file([3, 4, 5])
    merged = shards.merge([a, b])
    assert merged["state_dict"]["seed_id"].tolist() == list(range(6)) and merged["processes"] == 1
    assert merged["state_dict"]["hist_o"][:, 0].tolist() == list(range(6))
    assert merged["state_dict"]["net.weights.0"].shape == (6, 2, 2)
    for key in ("rounds_done", "base_seed", "regret.rounds"):  # shared: rank 0's
        assert merged["state_dict"][key] is a["state_dict"][key]
    opt = merged["optimizer_states"][0]
    assert opt["state"][0]["exp_avg"][:, 0, 0].tolist() == list(range(6)) and opt["state"][0]["step"] == 3.0
    assert opt["param_groups"] == a["optimizer_states"][0]["param_groups"]
    loop = merged["callbacks"]["DuelingLoop"]
    assert [r for r, _, _ in loop["pending"]] == [4, 5]
    assert loop["pending"][1][1].tolist() == [i + 1.5 for i in range(6)] and loop["pending"][0][2].tolist() == [
        i + 0.25 for i in range(6)
    ]
    assert loop["curves"] is a["callbacks"]["DuelingLoop"]["curves"] and merged["loops"] == a["loops"]
    thirds = [shards.take(merged, 2 * r, 2) for r in range(3)]  # the same seeds over 3 processes
    assert [t["state_dict"]["seed_id"].tolist() for t in thirds] == [[0, 1], [2, 3], [4, 5]]
    back = shards.take(merged, 3, 3)  # rank 1's share over 2 processes is b again
    assert all(torch.equal(back["state_dict"][k], b["state_dict"][k]) for k in b["state_dict"])
    assert torch.equal(
        back["optimizer_states"][0]["state"][0]["exp_avg"], b["optimizer_states"][0]["state"][0]["exp_avg"]
    )
    assert all(
        r1 == r2 and torch.equal(x1, x2) and torch.equal(y1, y2)
        for (r1, x1, y1), (r2, x2, y2) in zip(
            back["callbacks"]["DuelingLoop"]["pending"], b["callbacks"]["DuelingLoop"]["pending"]
        )
    )
    with pytest.raises(ValueError, match=r"different rounds \[5, 6\]"):
        shards.merge([a, _fake_rank_file([3, 4, 5], rounds=6)])


def test_a_rank_checkpoint_goes_on_live_as_its_seed_of_the_one_process_run(six_seeds):
    """``DuelingBandit.from_checkpoint`` of rank 1's file (seeds 3-5) gives seed 4 the state one process gave it."""
    from nvldb_pl.live import DuelingBandit

    one, two, _ = six_seeds
    folder = os.path.join("lightning_logs", "version_0", "checkpoints")
    a = DuelingBandit.from_checkpoint(os.path.join(one, folder, "last.ckpt"), seed_index=4)
    b = DuelingBandit.from_checkpoint(os.path.join(two, folder, "last.ckpt.rank1"), seed_index=1)
    assert a.learner.seed_ids == b.learner.seed_ids == [4] and a.num_observed == b.num_observed == T
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(0))
    assert (a.scores(x) == b.scores(x)).all()
    a.observe(x, 0, 1, 1), b.observe(x, 0, 1, 1)
    assert (a.scores(x) == b.scores(x)).all() and a.select(x) == b.select(x)


def test_uneven_split_is_refused_with_the_numbers(tmp_path):
    out = subprocess.run(
        _cmd(str(tmp_path), "--data.num_seeds=5", *PARALLEL), capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert out.returncode != 0
    assert "data.num_seeds=5 does not split evenly over 2 processes" in out.stderr
    assert out.stderr.count("does not split evenly") == 1  # before the processes start: said once
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("summary.json"))


@pytest.mark.parametrize("why", ["another config", "a spent time limit"])
def test_a_refusal_every_rank_makes_says_which_rank_each_line_is_from(six_seeds, tmp_path, why):
    """A resume each rank refuses, under seed_parallel: rank 0's line is the plain ``error: ...``, rank 1's
    is marked as Lightning marks its lines. Another config: each rank refuses its own checkpoint. A spent
    ``trainer.max_time``: only rank 0's file says so, and rank 0's clock decides for both (none waits)."""
    run = str(tmp_path / "two")
    shutil.copytree(six_seeds[1], run)
    extra, message = (
        ["--model.lr=0.5"],
        "error: the checkpoint was made with another config: model.lr: checkpoint 0.001, config 0.5",
    )
    if why == "a spent time limit":
        last = os.path.join(run, "lightning_logs", "version_0", "checkpoints", "last.ckpt")  # rank 0's
        ckpt = torch.load(last, map_location="cpu", weights_only=False)
        ckpt["callbacks"]["Timer"] = {"time_elapsed": {"train": 100.0}}  # as a run stopped by a 100 s limit saves it
        torch.save(ckpt, last)
        extra = ["--trainer.max_time=00:00:01:40", f"--data.rounds={T + 10}"]  # rounds left to play
        message = (
            f"error: trainer.max_time: the earlier parts of this run have used 0:01:40 of its 0:01:40 "
            f"(Lightning counts max_time over every part of a run), so no round would be played; to go on "
            f"from round {T}, give a larger one, or none"
        )
    out = subprocess.run(
        _cmd(run, "--data.num_seeds=6", *PARALLEL, *extra, "--ckpt_path=last"),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if "error: " in line]
    assert sorted(lines) == sorted([message, f"[rank: 1] {message}"]), out.stderr[-3000:]


@pytest.mark.slow  # a real kill of 2 processes; the rank agreement is covered by the next test
def test_killed_two_process_run_resumes_every_rank(tmp_path):
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    _run(full, "--data.num_seeds=4", *PARALLEL)
    proc = subprocess.Popen(
        _cmd(cut, "--data.num_seeds=4", *PARALLEL),
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpt = os.path.join(cut, "lightning_logs", "version_0", "checkpoints", "last.ckpt.rank1")
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if int(torch.load(ckpt, weights_only=False, map_location="cpu")["state_dict"]["rounds_done"]) >= 20:
                break
        except Exception:  # noqa: BLE001 (not there yet)
            pass
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # both ranks
    proc.wait()
    assert not os.path.exists(os.path.join(cut, "lightning_logs", "version_0", "summary.json"))
    _run(cut, "--data.num_seeds=4", *PARALLEL, "--ckpt_path=last")
    assert _summary(full)["seeds"] == _summary(cut)["seeds"]
    assert _curves(full) == _curves(cut)


def test_ranks_restart_together_when_a_kill_fell_between_their_saves(tmp_path):
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    _run(full, "--data.num_seeds=4", *PARALLEL)
    shutil.copytree(full, cut)  # the same finished run in another folder (nothing in it names its folder)
    folder = os.path.join(cut, "lightning_logs", "version_0")
    # as if killed after rank 0 saved round 40 but before rank 1 did: rank 1 holds only round 30
    os.replace(
        os.path.join(folder, "checkpoints", "last.ckpt.rank1.prev"),
        os.path.join(folder, "checkpoints", "last.ckpt.rank1"),
    )
    os.remove(os.path.join(folder, "summary.json"))
    _run(cut, "--data.num_seeds=4", *PARALLEL, "--ckpt_path=last")
    assert _summary(full)["seeds"] == _summary(cut)["seeds"]
    assert _curves(full) == _curves(cut)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_launch_equals_one_process_per_seed(tmp_path):
    """Started by torchrun (two processes on this host), as on a cluster: Lightning takes the ranks
    from torchrun's environment, and each seed gives what one process gives."""
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _made(one, "--data.num_seeds=4")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        *_cmd(two, "--data.num_seeds=4", *PARALLEL)[1:],
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert _summary(one)["seeds"] == _summary(two)["seeds"]  # bit for bit
    assert "last.ckpt.rank1" in os.listdir(os.path.join(two, "lightning_logs", "version_0", "checkpoints"))


def test_torchrun_starting_more_processes_than_the_config_runs_is_refused_by_each_rank_before_anything_runs(tmp_path):
    """torchrun --nproc-per-node 2 with the plain command (one process, no seed_parallel): each process played
    the whole run alone, the same seeds twice, in version_0 and version_1. Now each rank refuses, marked as its
    rank, naming what to add, and nothing is written."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        *_cmd(str(tmp_path), "--data.num_seeds=4")[1:],
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    message = (
        "error: trainer.devices=1, trainer.num_nodes=1: torchrun started 2 processes (2 a machine) and this "
        "config runs 1 (each process would play the whole run alone: the same seeds again, in a run folder of "
        "its own); to spread the seeds over them, add --trainer.strategy seed_parallel --trainer.devices 2"
    )
    lines = [line for line in out.stderr.splitlines() if "error: " in line]
    # torchrun stops the other process once one has failed: on a busy machine rank 1 may be stopped before it says so
    assert out.returncode != 0 and lines and set(lines) <= {message, f"[rank: 1] {message}"}, out.stderr[-3000:]
    assert not os.path.exists(os.path.join(tmp_path, "lightning_logs"))


@pytest.mark.parametrize(
    "env,config,message",
    [
        # torchrun --nnodes 2 --nproc-per-node 2: four processes, two a machine
        (
            {"TORCHELASTIC_RUN_ID": "none", "RANK": "0", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"},
            {"strategy": "seed_parallel", "devices": 2},
            "torchrun started 4 processes (2 a machine) and this config runs 2; "
            "to spread the seeds over them, add --trainer.strategy seed_parallel --trainer.devices 2 --trainer.num_nodes 2",
        ),
        # srun --ntasks 3 on one machine, the plain command
        (
            {
                "SLURM_NTASKS": "3",
                "SLURM_STEP_NUM_TASKS": "3",
                "SLURM_STEP_TASKS_PER_NODE": "3",
                "SLURM_JOB_NAME": "nvldb",
            },
            {},
            "srun started 3 processes (3 a machine) and this config runs 1 (each process would play the whole run alone",
        ),
        # srun, 2 machines with 2 tasks each, seed_parallel with 2 devices but one node
        (
            {
                "SLURM_NTASKS": "4",
                "SLURM_STEP_NUM_TASKS": "4",
                "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
                "SLURM_JOB_NAME": "nv",
            },
            {"strategy": "seed_parallel", "devices": 2},
            "add --trainer.strategy seed_parallel --trainer.devices 2 --trainer.num_nodes 2",
        ),
    ],
)
def test_a_config_whose_process_count_is_not_the_launchers_is_refused_naming_the_fix(monkeypatch, env, config, message):
    from nvldb_pl.loop.trainer_checks import check_trainer

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        check_trainer({"accelerator": "cpu", **config})


@pytest.mark.parametrize(
    "env",
    [
        {
            "SLURM_NTASKS": "3",
            "SLURM_STEP_NUM_TASKS": "3",
            "SLURM_JOB_NAME": "interactive",
        },  # Lightning: not a SLURM launch
        {"SLURM_NTASKS": "3"},  # the batch script itself (no srun step): one process
        {
            "TORCHELASTIC_RUN_ID": "none",
            "RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "WORLD_SIZE": "1",
        },  # torchrun, one process
        {"WORLD_SIZE": "2", "NODE_RANK": "1", "MASTER_PORT": "1"},  # node ranks by hand: the config's count decides
    ],
)
def test_the_plain_command_runs_where_no_launcher_started_more_than_one_process(monkeypatch, env):
    from nvldb_pl.loop.trainer_checks import check_trainer

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert check_trainer({"accelerator": "cpu"}) == 1


@pytest.mark.parametrize("launcher", [pytest.param("by_hand", marks=pytest.mark.slow), "torchrun"])
def test_two_nodes_equal_one_process_per_seed(tmp_path, launcher):
    """--trainer.num_nodes 2: two node ranks on this host, gloo over localhost, give per seed what one
    process gives; started by hand (MASTER_ADDR, MASTER_PORT, NODE_RANK set on each machine) and by
    torchrun as docs/reproducibility.md shows for a cluster (--nnodes 2 --node-rank R --master-addr
    --master-port on each machine)."""
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _made(one, "--data.num_seeds=4")
    port = str(_free_port())
    procs = []
    for node in (0, 1):
        cmd = _cmd(
            two,
            "--data.num_seeds=4",
            "--trainer.strategy=seed_parallel",
            "--trainer.num_nodes=2",
            "--trainer.devices=1",
            "--trainer.accelerator=cpu",
        )
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        if launcher == "by_hand":
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, NODE_RANK=str(node), WORLD_SIZE="2")
        else:
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--node-rank",
                str(node),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                port,
                *cmd[1:],
            ]
        procs.append(
            subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    a, b = _summary(one), _summary(two)
    assert [s["seed"] for s in b["seeds"]] == [0, 1, 2, 3]
    assert a["seeds"] == b["seeds"]  # bit for bit
    ckpts = sorted(os.listdir(os.path.join(two, "lightning_logs", "version_0", "checkpoints")))
    assert "last.ckpt" in ckpts and "last.ckpt.rank1" in ckpts  # node 1 saved its own shard


def test_slurms_requeue_signal_stops_every_task_at_the_same_round_and_the_job_goes_on_exactly(six_seeds, tmp_path):
    """Two SLURM tasks (srun's variables set by hand on this host), SLURM's requeue signal seen by task 1
    only, at round 17: both stop at the end of round 17, saved, task 0 requeues the job once (a stand-in
    ``scontrol`` records it), and the requeued job (the same command, ``--ckpt_path last``) ends, seed by
    seed, as one process running all six seeds in one go."""
    from tests.loop.test_stops import _signal_at

    one, job = six_seeds[0], str(tmp_path / "job")
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol.calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    (bin_dir / "scontrol").chmod(0o755)

    def srun(*extra):
        port, procs = str(_free_port()), []
        for task in (0, 1):
            env = {
                **os.environ,
                "SLURM_NTASKS": "2",
                "SLURM_NTASKS_PER_NODE": "2",
                "SLURM_STEP_NUM_TASKS": "2",
                "SLURM_STEP_TASKS_PER_NODE": "2",
                "SLURM_PROCID": str(task),
                "SLURM_LOCALID": str(task),
                "SLURM_NODEID": "0",
                "SLURM_JOB_ID": "4242",
                "SLURM_JOB_NAME": "nvldb",
                "SLURM_NODELIST": "localhost",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                "PYTHONPATH": ROOT,
                "OMP_NUM_THREADS": "1",
            }
            procs.append(
                subprocess.Popen(
                    _cmd(job, "--data.num_seeds=6", *PARALLEL, "--ckpt_path=last", *extra),
                    env=env,
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        return [(p, p.communicate(timeout=600)[1]) for p in procs]

    for p, err in srun(_signal_at(17, 1, signal.SIGUSR1, rank=1)):
        assert p.returncode == 128 + signal.SIGUSR1, err[-3000:]
    folder = os.path.join(job, "lightning_logs", "version_0", "checkpoints")
    rounds = [
        int(torch.load(os.path.join(folder, f), map_location="cpu", weights_only=False)["state_dict"]["rounds_done"])
        for f in ("last.ckpt", "last.ckpt.rank1")
    ]
    assert rounds == [17, 17] and not list(tmp_path.rglob("hpc_ckpt_*"))
    assert calls.read_text() == "requeue 4242\n"  # by task 0, once
    for p, err in srun():  # the requeued job
        assert p.returncode == 0, err[-3000:]
    assert _summary(job)["seeds"] == _summary(one)["seeds"]  # bit for bit
    assert _curves(job) == _curves(one)


def test_the_cli_destroys_the_process_group_before_the_interpreter_ends(tmp_path, monkeypatch):
    """run_cli ends a run's process group itself (Lightning does so at exit for NCCL only; a gloo group
    left to the interpreter's finalization can abort the process), on success as on a refused config."""
    import torch.distributed as dist
    from nvldb_pl.cli import run_cli

    monkeypatch.setattr(sys, "argv", ["main.py"])  # the CLI's arguments are argv below, not pytest's
    for argv in (
        [
            *BASE[:3],
            "--data.rounds=2",
            "--data.num_seeds=1",
            "--model.network.width=4",
            "--model.grad_steps=1",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        [*BASE[:3], "--model.lr=-1", f"--trainer.default_root_dir={tmp_path}"],
    ):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
        code = run_cli(argv)
        assert code == (0 if "--model.lr=-1" not in argv else 2)
        assert not dist.is_initialized()
