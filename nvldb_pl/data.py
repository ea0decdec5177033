"""The environment side of the loop: a stream of rounds for S seeds at once.

Every random draw is a pure function of (base seed, seed id, round) (:mod:`nvldb_pl.streams`): the
task parameter of seed i from ``(base, i, TAG_TASK)``, and round t's contexts, Thompson-sampling
noise and feedback uniforms from ``(base, i, TAG_ROUNDS, (t-1) // CHUNK_ROUNDS)``. So a seed can be regenerated
alone, in any batch of seeds, on any process, and the stream can start at any round (resume).

One batch (one round t, 1-indexed) is a dict:

* ``round``:     t, a Python int
* ``contexts``:  [S, K, d] float32, the context set X_t (what the learner sees)
* ``utilities``: [S, K] float64, u(x_{t,k}) (used only for feedback and regret)
* ``noise``:     [S, K, K] float64 standard normals (Thompson sampling draws)
* ``uniform``:   [S] float64 U[0,1) (Bernoulli feedback o_t = 1{uniform < g(du)})
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Optional, Union

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from . import links, uci
from .checks import class_path_and_args, config_differences, refuse_other_config, require
from .host import check_memory
from .links import check_link
from .metrics import instant_regret
from .streams import CHUNK_ROUNDS, TAG_DISJOINT, TAG_ROUNDS, TAG_TASK, rng_for, resolve_base_seed, shard
from .tasks import TASKS, make_task

TABLE = "table"  # a user's own CSV (data.data_file, data.label_column, data.feature_columns, data.header)
ALL_TASKS = TASKS + uci.UCI_TASKS + (TABLE,)
SAMPLINGS = ("per_seed", "disjoint")
PREFERENCES = links.LINKS + ("deterministic",)


def dataset_digest(dataset: tuple[np.ndarray, np.ndarray]) -> str:
    """sha256 of a table task's rows (X as read and standardized, y), first 16 hex digits."""
    import hashlib

    X, y = dataset
    h = hashlib.sha256(np.ascontiguousarray(X, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(y, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def task_and_args(task) -> tuple[str, Optional[dict]]:
    """``data.task`` as (name or class path, init_args or None): a string, or ``{class_path, init_args}``."""
    return class_path_and_args(task, "data.task")


@dataclass
class StreamSpec:
    """What defines a stream; validated on construction so errors name the config field."""

    task: str = "cos"
    dim: int = 5
    arms: int = 5
    rounds: int = 2000
    num_seeds: int = 20
    first_seed_id: int = 0
    base_seed: int = 0
    sampling: str = "per_seed"
    task_args: Optional[dict] = None  # a Task class's init_args

    def __post_init__(self) -> None:
        require(
            isinstance(self.task, str) and (self.task in ALL_TASKS or "." in self.task),
            "data.task",
            f"{self.task!r} is not a known task; choose one of {list(ALL_TASKS)} or give the import path of a "
            f"nvldb_pl.tasks.Task subclass",
        )
        require(self.sampling in SAMPLINGS, "data.sampling", f"{self.sampling!r} is not one of {list(SAMPLINGS)}")
        for name, low in (("dim", 1), ("arms", 2), ("rounds", 1), ("num_seeds", 1)):
            value = getattr(self, name)
            require(
                isinstance(value, int) and not isinstance(value, bool) and value >= low,
                f"data.{name}",
                f"must be an integer >= {low}, got {value!r}",
            )
        require(self.first_seed_id >= 0, "data.first_seed_id", f"must be >= 0, got {self.first_seed_id}")

    @property
    def seed_ids(self) -> list[int]:
        return list(range(self.first_seed_id, self.first_seed_id + self.num_seeds))


class RoundStream(IterableDataset):
    """Streams rounds ``start_round+1 .. rounds`` of the task for all seeds.

    Synthetic tasks draw contexts from the seed's stream; UCI tasks (``dataset`` = (X, y)) take
    one instance per seed and round (see :meth:`_instances`) and encode it per arm.
    """

    def __init__(self, spec: StreamSpec, start_round: int = 0, dataset: Optional[tuple[np.ndarray, np.ndarray]] = None):
        self.spec = spec
        self.start_round = start_round
        self.dataset = dataset
        if dataset is None:
            self.task = make_task(spec.task, spec.task_args)
            self.thetas = np.stack(
                [self.task.draw_parameter(spec.dim, rng_for(spec.base_seed, i, TAG_TASK)) for i in spec.seed_ids]
            )

    def _instances(self, seed_id: int, rounds: np.ndarray) -> np.ndarray:
        """Row indices for 1-indexed ``rounds`` of one seed.

        ``per_seed``: the seed's own shuffles of all n rows, one after another (without
        replacement until the data is exhausted, then a fresh shuffle). ``disjoint``: one
        shuffle from the base seed, seed i taking positions i*T .. (i+1)*T - 1 (no row is used by
        two seeds; needs n >= (last seed id + 1) * T, checked by the data module).
        """
        sp, n = self.spec, len(self.dataset[1])
        if sp.sampling == "disjoint":
            order = np.random.default_rng([sp.base_seed, TAG_DISJOINT]).permutation(n)
            return order[seed_id * sp.rounds + rounds - 1]
        out = np.empty(len(rounds), dtype=np.int64)
        epochs = (rounds - 1) // n
        for e in np.unique(epochs):
            perm = rng_for(sp.base_seed, seed_id, TAG_TASK, int(e)).permutation(n)
            out[epochs == e] = perm[(rounds[epochs == e] - 1) % n]
        return out

    def __len__(self) -> int:
        # The whole horizon, also when resuming at start_round: Lightning restores its batch
        # counter from the checkpoint (start_round batches done) and stops at this length.
        return self.spec.rounds

    def _chunk(self, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sp, n = self.spec, CHUNK_ROUNDS
        xs, zs, us = [], [], []
        for i in sp.seed_ids:
            rng = rng_for(sp.base_seed, i, TAG_ROUNDS, c)
            if self.dataset is None:
                xs.append(self.task.draw_contexts(n, sp.arms, sp.dim, rng))
            else:  # the row index, encoded in __iter__
                xs.append(self._instances(i, np.arange(c * n + 1, c * n + n + 1)))
            zs.append(rng.standard_normal((n, sp.arms, sp.arms)))
            us.append(rng.random(n))
        return np.stack(xs, 1), np.stack(zs, 1), np.stack(us, 1)  # [n, S, ...]

    def _round(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(contexts [S, K, d], utilities [S, K]) from one round's draw."""
        if self.dataset is None:
            return x, self.task.utility(self.thetas, x)
        X, y = self.dataset
        contexts = uci.block_contexts(X[x], self.spec.arms)
        return contexts, np.eye(self.spec.arms)[y[x]]  # u_k = 1 if k = y

    def __iter__(self) -> Iterator[dict]:
        sp = self.spec
        chunk_id, cache = -1, None
        for t in range(self.start_round + 1, sp.rounds + 1):
            c, j = divmod(t - 1, CHUNK_ROUNDS)
            if c != chunk_id:
                chunk_id, cache = c, self._chunk(c)
            x, z, u = (a[j] for a in cache)
            contexts, utilities = self._round(x)
            yield {
                "round": t,  # a Python int: stays on the host, so checking it costs no device sync
                "contexts": torch.from_numpy(contexts.astype(np.float32)),
                "utilities": torch.from_numpy(utilities),
                "noise": torch.from_numpy(z),
                "uniform": torch.from_numpy(u),
            }


class BanditDataModule(pl.LightningDataModule):
    """Owns the round stream of a dueling task (appendix protocol).

    Args:
        task: ``cos``, ``square``, ``quadratic`` (synthetic); ``statlog``, ``magic``,
            ``covertype`` (UCI, :mod:`nvldb_pl.uci`; then dim must be K * p and arms K); ``table``
            (the user's CSV ``data_file``, read as the UCI files are); or a :class:`nvldb_pl.tasks.Task`
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
    ):
        super().__init__()
        task, task_args = task_and_args(task)
        require(
            seed is None or (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= 2**32 - 1),
            "data.seed",
            f"must be an integer between 0 and {2**32 - 1} (the seeds numpy takes), or null for seed_everything's; "
            f"got {seed!r}",
        )
        table_args = {"label_column": label_column, "feature_columns": feature_columns, "header": header}
        given = [f"data.{k}" for k, v in table_args.items() if v is not None]
        require(task == TABLE or not given, given[0] if given else "data.task", f"applies to data.task={TABLE} only")
        self.link = check_link(link, "data.link")
        self.preference = preference or link
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
        if task in uci.UCI_TASKS or task == TABLE:  # read and check the files now, before any training starts
            if task == TABLE:
                require(
                    data_file is not None,
                    "data.data_file",
                    f"data.task={TABLE} reads the CSV named here; give its path",
                )
                X, y, classes = uci.read_user_table(data_file, label_column, feature_columns, header)
                self.dataset, K, p, name = (X, y), len(classes), X.shape[1], data_file
                self.table_shape = {"dim": K * p, "arms": K, "classes": classes}
            else:
                self.dataset = uci.load(task, data_dir, data_file)
                K, p, name = len(uci.SPECS[task].labels), uci.SPECS[task].features, task
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
        """The environment's answer to round ``batch``'s pair (a1, a2) [S]: ``o`` [S] (1: a1 preferred), drawn
        o_t = 1{U_t < P(a1 beats a2)} from the round's own uniform U_t; ``du`` = u_a1 - u_a2 [S]; ``regret`` =
        (r^a_t, r^w_t) [S] each (the Objective section)."""
        u = batch["utilities"]
        rows = torch.arange(u.shape[0], device=u.device)
        du = u[rows, a1] - u[rows, a2]
        o = (batch["uniform"] < self.preference_prob(du)).to(torch.float32)
        return {"o": o, "du": du, "regret": instant_regret(u, a1, a2)}

    def preference_prob(self, du: torch.Tensor) -> torch.Tensor:
        """P(o = 1) = P(a1 beats a2) given u_a1 - u_a2 under the environment's preference model."""
        if self.preference == "deterministic":
            return (du > 0).to(du.dtype) + 0.5 * (du == 0).to(du.dtype)
        return links.prob(self.preference, du)

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
