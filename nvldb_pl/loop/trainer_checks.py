"""Trainer settings a bandit run cannot take, refused by name before anything runs.

A run is one pass over the T rounds of the stream (one epoch, no validation), its seeds are
independent networks (never Lightning's DDP, which couples them), and each round's update is the
algorithm's own (n Adam steps, the theta refit): trainer settings and Lightning callbacks that
would repeat, cut or batch rounds, couple seeds, or change the weights outside the algorithm are
refused with the reason, naming the field.
"""

from __future__ import annotations

import os

from ..machinery.devices import check_accelerator, check_precision, device_count


# A run is one pass over the T rounds of the stream (one epoch); these trainer settings would
# repeat, cut or batch rounds, so they are refused by name before anything runs.
ONE_PASS = {
    "max_epochs": (1, None),
    "min_epochs": (None, 0, 1),
    "max_steps": (-1, None),
    "limit_train_batches": (None, 1, 1.0),
    "accumulate_grad_batches": (1, None),
    "overfit_batches": (0, 0.0, None),
    "fast_dev_run": (False, 0, None),
}
# A run has no validation loop (its regret is measured on the rounds it plays); these would ask for one
# (val_check_interval beyond the horizon was Lightning's refusal after the run's folder was made).
NO_VALIDATION = {
    "val_check_interval": (None,),
    "check_val_every_n_epoch": (1,),
    "limit_val_batches": (None, 0, 0.0),
    "num_sanity_val_steps": (None, 0),
}


def process_count(devices, num_nodes, accelerator) -> int:
    """How many processes Lightning would start for these trainer settings (``num_nodes`` 0 or less is refused,
    naming the field: it was Lightning's message without one)."""
    nodes = 1 if num_nodes is None else num_nodes
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(
            f"trainer.num_nodes={num_nodes!r}: the number of machines the run spreads its seeds over, at least 1"
        )
    return device_count(devices, accelerator) * nodes


# What a launcher sets that lets the nodes of a run find each other: by hand (MASTER_ADDR/MASTER_PORT), SLURM,
# torchrun, LSF, MPI. Without any, Lightning's rank 0 listens on a port of its own choosing that no other node knows.
LAUNCHER_VARIABLES = (
    "MASTER_PORT",
    "SLURM_NTASKS",
    "TORCHELASTIC_RUN_ID",
    "LOCAL_WORLD_SIZE",
    "LSB_JOBID",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
)


def check_nodes(num_nodes) -> None:
    """Refuse ``trainer.num_nodes`` > 1 where no launcher set the run up (it would wait for nodes that cannot come)."""
    if (num_nodes or 1) > 1 and not any(os.environ.get(k) for k in LAUNCHER_VARIABLES):
        raise ValueError(
            f"trainer.num_nodes={num_nodes}: nothing here tells the other machines where to find this "
            f"one (no SLURM, torchrun or MASTER_ADDR/MASTER_PORT/NODE_RANK variables), so it would wait "
            f"for them until the process group times out; launch through SLURM or torchrun, or set those on every machine "
            f"(docs/reproducibility.md, 'Over machines')"
        )


def launched_processes() -> tuple[str, int, int] | None:
    """(launcher, processes, processes per machine) where a launcher started this process as one of
    several it counts exactly: torchrun (WORLD_SIZE, LOCAL_WORLD_SIZE) or srun (SLURM_STEP_NUM_TASKS,
    SLURM_STEP_TASKS_PER_NODE, where Lightning takes the run for a SLURM one); else None (one process,
    or a launch whose count is the config's own: node ranks started by hand)."""
    env = os.environ
    if all(
        k in env for k in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    ):  # as Lightning detects torchrun
        return "torchrun", int(env["WORLD_SIZE"]), int(env["LOCAL_WORLD_SIZE"])
    if (
        "SLURM_NTASKS" in env
        and "SLURM_STEP_NUM_TASKS" in env
        and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")
    ):  # Lightning's test for a SLURM launch
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE", "").partition("(")[0]  # "2(x3)": 2 a machine, 3 machines
        n = int(env["SLURM_STEP_NUM_TASKS"])
        return "srun", n, int(per_node) if per_node.isdigit() else n
    return None


def check_launch(n: int, strategy: str, devices, num_nodes) -> None:
    """Refuse a config whose process count is not the launcher's: torchrun or srun started more processes than
    the config runs (each would play the whole run alone: the same seeds again, in a run folder of its own) or
    another number than it runs under seed_parallel (Lightning refused it in its own words, or the seeds were
    split over a count no launcher made)."""
    launch = launched_processes()
    if launch is None or launch[1] == n:
        return
    launcher, world, per_node = launch
    nodes = max(world // max(per_node, 1), 1)
    fix = f"--trainer.strategy seed_parallel --trainer.devices {per_node}" + (
        f" --trainer.num_nodes {nodes}" if nodes > 1 else ""
    )
    alone = (
        " (each process would play the whole run alone: the same seeds again, in a run folder of its own)"
        if n == 1 and strategy != "seed_parallel"
        else ""
    )
    raise ValueError(
        f"trainer.devices={devices!r}, trainer.num_nodes={num_nodes!r}: {launcher} started {world} "
        f"processes ({per_node} a machine) and this config runs {n}{alone}; to spread the seeds over "
        f"them, add {fix}"
    )


def check_trainer(cfg) -> int:
    """Refuse, naming the field, trainer settings under which the run would not be the bandit loop
    (or would not run at all here: an accelerator, device count or precision it cannot take; a callback
    that cannot do its job in a bandit run);
    return the number of processes the run will have."""
    for settings, why in (
        (
            ONE_PASS,
            "a run is one pass over the data.rounds rounds of the stream; set data.rounds for a longer or shorter run",
        ),
        (
            NO_VALIDATION,
            "a run has no validation loop (its regret is measured on the rounds it "
            "plays: regret/* in TensorBoard, curves.csv); leave it unset",
        ),
    ):
        for key, allowed in settings.items():
            value = cfg.get(key, allowed[0])
            if value not in allowed:
                raise ValueError(f"trainer.{key}={value!r}: {why}")
    clip = cfg.get("gradient_clip_val")
    if clip:  # Lightning's own refusal came after the run's folder and files were made
        raise ValueError(
            f"trainer.gradient_clip_val={clip!r}: each round's update is the learner's own "
            f"model.grad_steps Adam steps (Alg. 1 line 9), which Lightning does not clip, and clipping "
            f"is not part of the algorithm; leave it unset"
        )
    if cfg.get("barebones"):  # Lightning refuses each setting still on, one a try (this run's defaults: three)
        still_on = [
            f"--trainer.{key} {off}"
            for key, off, on in (
                ("enable_checkpointing", "false", cfg.get("enable_checkpointing") is not False),
                ("logger", "false", cfg.get("logger") is not False),  # unset: the run's own TensorBoard logger
                ("log_every_n_steps", "0", cfg.get("log_every_n_steps") not in (None, 0)),
                ("enable_progress_bar", "false", bool(cfg.get("enable_progress_bar"))),
                ("enable_model_summary", "false", bool(cfg.get("enable_model_summary"))),
                ("detect_anomaly", "false", bool(cfg.get("detect_anomaly"))),
                ("profiler", "null", cfg.get("profiler") is not None),
            )
            if on
        ]
        if still_on:
            raise ValueError(
                f"trainer.barebones=True: Lightning runs it only with logging, checkpoints, the progress "
                f"bar and the model summary off; add {' '.join(still_on)} (the run still writes "
                f"summary.json, curves.csv and config.yaml, into trainer.default_root_dir: no TensorBoard, "
                f"no last.ckpt)"
            )
    check_callbacks(cfg.get("callbacks"))
    accelerator = cfg.get("accelerator", "auto")
    check_accelerator(accelerator)
    check_precision(cfg.get("precision"))
    strategy = cfg.get("strategy", "auto")
    name = getattr(strategy, "strategy_name", strategy)
    check_trainer_strategy(str(name))
    n = process_count(cfg.get("devices", 1), cfg.get("num_nodes", 1), accelerator)
    check_launch(n, str(name), cfg.get("devices", 1), cfg.get("num_nodes", 1))
    if n > 1 and name == "seed_parallel":
        check_nodes(cfg.get("num_nodes", 1))
    if n > 1 and name != "seed_parallel":
        raise ValueError(
            f"trainer.devices={cfg.get('devices')!r}, trainer.num_nodes={cfg.get('num_nodes', 1)!r}: "
            f"{n} processes under trainer.strategy={name!r} would run Lightning's DDP, which averages "
            f"gradients and broadcasts weights across processes, coupling the seeds; add "
            f"--trainer.strategy seed_parallel to spread independent seeds over them"
        )
    return n


def check_trainer_strategy(name: str) -> None:
    """Refuse, by name, the strategies that shard one model (FSDP, DeepSpeed, model parallel) or run on
    TPUs (XLA): a run's seeds are independent networks on CPUs or CUDA GPUs."""
    if name.startswith(("fsdp", "deepspeed", "model_parallel")):
        why = (
            "shards one network's parameters over devices, and a run's seeds are independent networks, run "
            "together as a batch dimension"
        )
    elif "xla" in name or "tpu" in name:
        why = "a TPU (XLA) strategy, and this package runs on the CPU and on CUDA GPUs"
    else:
        return
    raise ValueError(
        f"trainer.strategy={name!r}: {why}; use auto (one process) or seed_parallel (the seeds spread "
        f"over processes, GPUs or machines)"
    )


# Lightning callbacks that cannot do what they are for in a bandit run, and why (the first base class
# a callback is an instance of names it).
NOT_FOR_A_BANDIT_RUN = {
    "BatchSizeFinder": "runs trial steps on batches before the run, and a batch is one round of the S seeds (there is "
    "no batch size to tune), whose rounds are played once",
    "LearningRateFinder": "runs trial steps over the stream before the run, and a run's rounds are played once; "
    "model.lr sets eta (scripts/sweep.py compares values paired by seed)",
    "GradientAccumulationScheduler": "accumulates gradients over rounds, and each round's update is its own "
    "model.grad_steps Adam steps (Alg. 1 line 9)",
    "WeightAveraging": "keeps an average of the weights over steps and puts it in place of the learner's, and the "
    "learner's weights are the algorithm's (Alg. 1 line 9)",
    "StochasticWeightAveraging": "averages the weights of the last epochs, and a run is one epoch (it did nothing)",
    "ModelPruning": "prunes the weights of nn.Linear-like modules, and a learner's weights are [S, ...] tensors, one "
    "network a seed (it stopped the run at its start); pruning is not part of the algorithm",
    "BaseFinetuning": "freezes and unfreezes modules from epoch to epoch, and a run is one epoch whose every layer "
    "trains (Alg. 1 line 9)",
    "EarlyStopping": "checks its metric at the end of an epoch or a validation, and a run is one epoch without "
    "validation: it could never stop a run early (and a metric it does not find ends the run, after "
    "every round, in a traceback); trainer.max_time or Ctrl-C stop a run that --ckpt_path last goes on from",
    "SpikeDetection": "watches the one loss a training step returns, and a round's update is n Adam steps on each "
    "seed's loss (a non-finite loss already stops the run, naming the seed and round)",
    "OnExceptionCheckpoint": "saves in the middle of a round when an exception is raised, where a round's state is "
    "not whole; the run's last.ckpt (every checkpoint.every_n_rounds rounds, and at Ctrl-C, "
    "SIGTERM and SLURM's requeue signal) is what --ckpt_path last goes on from",
}


def check_callbacks(callbacks) -> None:
    """Refuse, by class and reason, a Lightning callback in ``trainer.callbacks`` that cannot do what it is for
    in a bandit run (a tuner's trial steps, a change of the weights outside the algorithm, a per-epoch check)."""
    import lightning.pytorch.callbacks as lc
    from .callbacks import DuelingLoop
    from ..machinery.checkpoint import RoundCheckpoint

    own = {RoundCheckpoint: "checkpoint.every_n_rounds and checkpoint.dirpath", DuelingLoop: "loop.*"}
    for cb in callbacks if isinstance(callbacks, (list, tuple)) else [callbacks] if callbacks else []:
        for cls, fields in own.items():  # a second one: Lightning's "more than one stateful callback" at the first save
            if isinstance(cb, cls):
                raise ValueError(
                    f"trainer.callbacks: {cls.__name__} is the run's own callback, already there; set it "
                    f"through {fields}"
                )
        for base, why in NOT_FOR_A_BANDIT_RUN.items():
            if isinstance(cb, getattr(lc, base, ())):
                raise ValueError(f"trainer.callbacks: {type(cb).__name__} {why}")
