"""The data side of the loop: the LightningDataModule that owns a task's round stream for S seeds at once
(:class:`nvldb_pl.environments.stream.RoundStream`, whose batches it documents), its shard of seeds under several
processes, and the environment's answer to each round's pair."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Union

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader

from ..environments import uci
from ..environments.stream import (
    ALL_TASKS,
    PREFERENCES,
    TABLE,
    RoundStream,
    StreamSpec,
    answer,
    dataset_digest,
    preference_prob,
    task_and_args,
)
from ..environments.seeding import CHUNK_ROUNDS, TAG_ROUNDS, TAG_TASK, rng_for, resolve_base_seed, shard
from ..environments.tasks import make_task
from ..machinery.host import check_memory
from ..maths.checks import config_differences, refuse_other_config, require
from ..maths.links import check_link

__all__ = ["ALL_TASKS", "BanditDataModule", "RoundStream", "StreamSpec", "TABLE"]


class BanditDataModule(pl.LightningDataModule):
    """Owns the round stream of a dueling task (appendix protocol).

    Args:
        task: ``cos``, ``square``, ``quadratic`` (synthetic); ``statlog``, ``magic``,
            ``covertype`` (UCI, :mod:`nvldb_pl.environments.uci`; then dim must be K * p and arms K); ``table``
            (the user's CSV ``data_file``, read as the UCI files are); or a :class:`nvldb_pl.environments.tasks.Task`
            subclass by import path (a string, or ``{class_path, init_args}``).
        dim: context dimension d.
        arms: number of arms K per round (>= 2).
        rounds: horizon T (one epoch = T rounds).
        num_seeds: S, independent experiments run together as a batch dimension.
        first_seed_id: seed ids are ``first_seed_id .. first_seed_id + S - 1``.
        seed: base seed of every random draw; ``None`` takes ``seed_everything``'s value.
        link: link g, ``logistic`` (BTL) or ``probit``: the learner's model of the preferences,
            and the environment's too unless ``preference`` says otherwise.
        preference: the environment's preference model: ``logistic``, ``probit`` or
            ``deterministic`` (P(i beats j) = 1 if u_i > u_j, 0.5 on ties); ``None`` = ``link``.
        data_dir: folder of the UCI files (``None``: ``$NVLDB_UCI_DIR`` or ../shared/data/uci).
        data_file: one UCI file to read instead (e.g. the full ``covtype.data.gz``).
        sampling: UCI rows per seed: ``per_seed`` shuffles or ``disjoint`` (see RoundStream).
        label_column, feature_columns, header: ``table`` only: the label's column and the features'
            (0-based index, or name with a header; ``None``: the last column, and every other), and
            whether the first row is a header (``None``: found from the file).
        missing: ``table`` only: what a missing cell (empty, NA, NaN, ?, null) does: ``refuse`` (``None``: one line
            naming its line and column), ``drop`` (the rows with one are left out) or ``mean`` (a missing feature
            takes its column's mean over the other rows; a row with no label is left out).
        task_args: the init_args of a Task class named by ``task`` (the same as ``task: {class_path, init_args}``;
            the form a grid's ``--data task_args=...`` and summary.json's ``data`` take); refused for a built-in task.
    """

    def __init__(
        self,
        task: Union[str, dict] = "cos",
        dim: int = 5,
        arms: int = 5,
        rounds: int = 2000,
        num_seeds: int = 20,
        first_seed_id: int = 0,
        seed: Optional[int] = None,
        link: str = "logistic",
        preference: Optional[str] = None,
        data_dir: Optional[str] = None,
        data_file: Optional[str] = None,
        sampling: str = "per_seed",
        label_column: Optional[Union[int, str]] = None,
        feature_columns: Optional[list[Union[int, str]]] = None,
        header: Optional[bool] = None,
        missing: Optional[str] = None,
        task_args: Optional[dict] = None,
    ):
        super().__init__()
        task, init_args = task_and_args(task)
        require(
            task_args is None or isinstance(task_args, dict),
            "data.task_args",
            f"a mapping of the task class's init_args, got {task_args!r}",
        )
        require(
            init_args is None or not task_args,
            "data.task_args",
            "given twice: as data.task's init_args and as data.task_args; give one",
        )
        require(
            not task_args or task not in ALL_TASKS,
            "data.task_args",
            f"the built-in task {task!r} takes no init_args; they are for a Task class named by data.task",
        )
        task_args = init_args or (dict(task_args) if task_args else None)
        require(
            seed is None or (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= 2**32 - 1),
            "data.seed",
            f"must be an integer between 0 and {2**32 - 1} (the seeds numpy takes), or null for seed_everything's; "
            f"got {seed!r}",
        )
        table_args = {
            "label_column": label_column,
            "feature_columns": feature_columns,
            "header": header,
            "missing": missing,
        }
        given = [f"data.{k}" for k, v in table_args.items() if v is not None]
        require(task == TABLE or not given, given[0] if given else "data.task", f"applies to data.task={TABLE} only")
        read = ("data_dir", "data_file") if task in uci.UCI_TASKS else ("data_file",) if task == TABLE else ()
        unread = [k for k, v in (("data_dir", data_dir), ("data_file", data_file)) if v is not None and k not in read]
        require(
            not unread,
            f"data.{unread[0]}" if unread else "data.task",
            f"data.task={task} reads no "
            + ("folder (give the file as data.data_file)" if task == TABLE else "file: it makes its own contexts")
            + f"; it applies to the UCI tasks {list(uci.UCI_TASKS)}"
            + (f" and {TABLE}" if unread[:1] == ["data_file"] else ""),
        )
        self.link = check_link(link, "data.link")
        self.preference = preference or link
        # what the stream is made of beyond its spec, as given (summary.json's "data": a grid reuses a run by it)
        self.settings = {
            "task": task,
            **({"task_args": task_args} if task_args else {}),
            "dim": dim,
            "arms": arms,
            "link": self.link,
            "preference": self.preference,
            **{k: v for k, v in (("data_dir", data_dir), ("data_file", data_file)) if v is not None},
            "sampling": sampling,
            **{k: v for k, v in table_args.items() if v is not None},
        }
        require(self.preference in PREFERENCES, "data.preference", f"{preference!r} is not one of {list(PREFERENCES)}")
        self.spec = StreamSpec(
            task, dim, arms, rounds, num_seeds, first_seed_id, resolve_base_seed(seed), sampling, task_args
        )
        if task not in ALL_TASKS:  # a Task class: imported and built now, so that a bad path stops before the run
            make_task(task, task_args)
        # the K x K arrays of a round: the stream's Thompson normals (a block of CHUNK_ROUNDS rounds) and
        # the learner's pairwise norms and scores (a handful of [S, K, K] float64 temporaries)
        check_memory(
            (CHUNK_ROUNDS + 8) * num_seeds * arms * arms * 8,
            f"{CHUNK_ROUNDS + 8} arrays of num_seeds x arms x arms = {num_seeds} x {arms} x {arms} float64",
            "data.arms / data.num_seeds",
        )
        if task not in uci.UCI_TASKS and task != TABLE:
            self._refuse_a_task_every_policy_wins()
        self.start_round = 0  # set by DuelingLoop.on_load_checkpoint when resuming
        self.local_spec = self.spec  # this process's shard of seeds (see setup)
        self.dataset = None
        self.arm_labels = None  # a table's or UCI task's label of each arm (arm k is the k-th), recorded with the run
        if task in uci.UCI_TASKS or task == TABLE:  # read and check the files now, before any training starts
            if task == TABLE:
                require(
                    data_file is not None,
                    "data.data_file",
                    f"data.task={TABLE} reads the CSV named here; give its path",
                )
                X, y, classes = uci.read_user_table(
                    data_file, label_column, feature_columns, header, missing or "refuse"
                )
                self.dataset, K, p, name = (X, y), len(classes), X.shape[1], data_file
                self.table_shape = {"dim": K * p, "arms": K, "classes": classes}
            else:
                self.dataset = uci.load(task, data_dir, data_file)
                K, p, name = len(uci.SPECS[task].labels), uci.SPECS[task].features, task
                classes = list(uci.SPECS[task].labels)
            self.arm_labels = [str(c) for c in classes]
            require(arms == K, "data.arms", f"{name} has {K} classes, so arms must be {K}, got {arms}")
            require(
                dim == K * p,
                "data.dim",
                f"{name} contexts are the block encoding of {p} features "
                f"for {K} arms, so dim must be {K * p}, got {dim}",
            )
            n = len(self.dataset[1])
            if sampling == "disjoint":
                need = (first_seed_id + num_seeds) * rounds
                require(
                    n >= need,
                    "data.sampling",
                    f"disjoint rows need (first_seed_id + num_seeds) x rounds = {need} rows, but {task} has {n}",
                )
        elif sampling != "per_seed":
            raise ValueError(f"data.sampling: {sampling!r} applies to the UCI tasks only")

    def _refuse_a_task_every_policy_wins(self) -> None:
        """A synthetic stream whose arms all have the same utility in each of the first seed's first rounds (e.g.
        d=1: the paper's contexts are then +-1, and cos, square and quadratic give both the same value): every
        policy would end with R(T)/T = 0, as if learning were perfect. Refused naming data.dim."""
        sp = self.spec
        next(iter(RoundStream(sp)))  # round 1 of every seed: a task's shapes and values checked where they meet ours
        task = make_task(sp.task, sp.task_args)
        seed = sp.seed_ids[0]
        theta = task.draw_parameter(sp.dim, rng_for(sp.base_seed, seed, TAG_TASK))[None]
        x = task.draw_contexts(min(sp.rounds, 64), sp.arms, sp.dim, rng_for(sp.base_seed, seed, TAG_ROUNDS, 0))
        u = np.stack([task.utility(theta, x[r][None])[0] for r in range(len(x))])  # [rounds, K]
        spread = float((u.max(axis=-1) - u.min(axis=-1)).max())
        require(
            spread > 1e-12 * max(1.0, float(np.abs(u).max())),
            "data.dim",
            f"with dim={sp.dim} every arm of {sp.task} has the same utility in every round (a policy's regret is 0 "
            f"whatever it does); give a larger dim",
        )

    def state_dict(self) -> dict:
        spec = {k: v for k, v in vars(self.spec).items() if k != "task_args" or v is not None}  # as saved before it
        state = {"spec": spec, "link": self.link, "preference": self.preference}
        if self.dataset is not None:  # the rows themselves: a resume reads the same data, whatever the file is called
            state["data_digest"] = dataset_digest(self.dataset)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Refuse to resume a checkpoint whose stream differs from this config's (naming the fields)."""
        refuse_other_config(self.config_differences(state))

    def config_differences(self, state: dict) -> list[str]:
        """The ``data.`` fields in which the stream a checkpoint (its :meth:`state_dict`) was made
        with differs from this config's: a larger ``rounds`` is the same stream, run longer."""

        def flat(st: dict) -> dict:  # base_seed is what the config calls data.seed
            spec = {("seed" if k == "base_seed" else k): v for k, v in st.get("spec", {}).items()}
            digest = {"data_file (its rows' sha256)": st["data_digest"]} if "data_digest" in st else {}
            return {**spec, "link": st.get("link"), "preference": st.get("preference"), **digest}

        saved, current = flat(state), flat(self.state_dict())
        if (
            saved.get("rounds") is not None
            and saved["rounds"] < current["rounds"]
            and current["sampling"] != "disjoint"
        ):
            saved["rounds"] = current["rounds"]  # a longer run on the same stream: rounds 1..T_saved are the same
        return config_differences(saved, current, "data.")

    def answer(self, batch: dict, a1: torch.Tensor, a2: torch.Tensor) -> dict:
        """The environment's answer to round ``batch``'s pair (a1, a2) [S] (:func:`nvldb_pl.environments.stream.answer`):
        ``o`` [S], ``du`` = u_a1 - u_a2 [S], ``regret`` = (r^a_t, r^w_t) [S] each."""
        return answer(batch, a1, a2, self.preference)

    def preference_prob(self, du: torch.Tensor) -> torch.Tensor:
        """P(o = 1) = P(a1 beats a2) given u_a1 - u_a2 under the environment's preference model."""
        return preference_prob(self.preference, du)

    @property
    def seed_ids(self) -> list[int]:
        """The seed ids this process runs (all of them unless seeds are sharded over processes)."""
        return self.local_spec.seed_ids

    def setup(self, stage: str) -> None:
        """Under several processes (``seed_parallel``), keep this rank's shard of the seed ids."""
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            local, first = shard(self.spec.num_seeds, self.spec.first_seed_id, trainer.world_size, trainer.global_rank)
            self.local_spec = replace(self.spec, num_seeds=local, first_seed_id=first)

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        """The stream yields CPU tensors: on CPU there is nothing to move (skips Lightning's
        walk over the batch, a cost every round). On CUDA each
        tensor is copied into pinned memory first: a copy from pageable memory makes the host wait
        until the device has run everything queued before it (the graphed update of the last round),
        one wait a round; from pinned memory the copy is queued like a kernel (docs/performance.md)."""
        if device.type == "cpu":
            return batch
        if device.type == "cuda":
            batch = {k: v.pin_memory() if torch.is_tensor(v) else v for k, v in batch.items()}
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RoundStream(self.local_spec, self.start_round, self.dataset), batch_size=None, num_workers=0)
