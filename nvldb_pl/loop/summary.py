"""The run's summary (:class:`RunSummary`): ``summary.json`` in the log dir (per-seed regret, the settings that differ
from the learner's defaults, wall time and its split, the device, the software) and the HPARAMS tab's final metrics."""

from __future__ import annotations

import math
import os
import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn

from ..learners.base import learner_name
from ..machinery import provenance
from ..machinery.host import software, write_json_atomic
from ..maths.checks import LINKED_FROM_DATA
from .callbacks import DuelingLoop, ShareCores, _mean_std


def device_name(device: torch.device) -> str:
    """ "cpu", or the accelerator's model ("cuda: <the device's name>"): wall times depend on it."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return device.type


class RunSummary(pl.Callback):
    """At the end of training: ``summary.json`` in the log dir and the HPARAMS-tab final metrics.

    ``write=False`` keeps the summary in memory only (``self.summary``), for runs that must
    leave no files behind (:func:`nvldb_pl.loop.run.run_experiment` without a folder). ``announce``
    prints the result in one line when the run ends (the CLI's runs: with the progress bar off,
    nothing else says how the run ended or where its summary is).
    """

    def __init__(self, write: bool = True, announce: bool = False):
        self.write, self.announce = write, announce
        self._start = None
        self._software: dict = {}
        self._written: str | None = None
        self._finished_already = False  # a finished run resumed at its own horizon (nothing runs)
        self.summary: dict = {}

    def on_train_start(self, trainer, module):
        self._start = time.perf_counter()
        self._start_round = module.t
        self._software = software()  # read once a process, at its first run: the code it imported

    @staticmethod
    def _threads(trainer):
        """The CPU threads the run took: a number, or the counts in order where it shared the cores (ShareCores)."""
        shared = next((c for c in trainer.callbacks if isinstance(c, ShareCores) and c.used), None)
        if shared is None or len(set(shared.used)) == 1:
            return torch.get_num_threads() if shared is None else shared.used[0]
        return shared.used

    def on_train_end(self, trainer, module):
        folder = trainer.log_dir or trainer.default_root_dir  # a collective: every rank asks
        self._recovered = False
        if module.t == self._start_round > 0:  # a finished run resumed at its horizon: its summary stays
            if not self.write or os.path.exists(os.path.join(folder, "summary.json")):
                self._finished_already = True
                return
            self._recovered = True  # stopped after its last round's checkpoint, before its summary: written now
        wall = time.perf_counter() - self._start
        reg = module.regret.compute()
        T = int(reg["rounds"]) if int(reg["rounds"]) > 0 else module.t
        cum_avg, cum_weak = reg["cum_avg"].cpu().reshape(-1), reg["cum_weak"].cpu().reshape(-1)
        per_round = cum_avg / max(T, 1)
        mean, std = _mean_std(per_round)
        dm, hp = trainer.datamodule, module.hparams
        seed_rounds = (module.t - self._start_round) * len(cum_avg)
        learner = module.learner
        self_duels = learner.self_duels
        if trainer.world_size > 1:
            self_duels = module.all_gather(self_duels).reshape(-1)
        self_duels = self_duels.cpu().tolist()
        live = learner.live_feature_units()  # every rank: all_gather is a collective
        if live is not None and trainer.world_size > 1:
            live = module.all_gather(live).reshape(-1)
        live = None if live is None else live.cpu().tolist()
        self.summary = {
            "task": dm.spec.task,
            "method": learner.method,
            "learner": learner_name(type(learner)),
            "settings": changed_settings(learner),
            "hparams_sha256": provenance.hparams_digest(hp),  # hparams.yaml as written: a grid trusts no edit of it
            "strategy": hp.get("strategy"),
            "variance_aware": hp.get("variance_aware"),
            "rounds": T,
            "num_seeds": len(cum_avg),
            "base_seed": dm.spec.base_seed,
            **({"data": dm.settings} if hasattr(dm, "settings") else {}),
            **({"arm_labels": dm.arm_labels} if getattr(dm, "arm_labels", None) else {}),  # arm k is label k
            "seeds": [
                {
                    "seed": int(s),
                    "cum_avg_regret": float(a),
                    "cum_weak_regret": float(w),
                    "self_duel_fraction": n / max(module.t, 1),
                    **({} if live is None else {"live_feature_units": live[i]}),
                }
                for i, (s, a, w, n) in enumerate(zip(reg["seed_ids"].cpu().reshape(-1), cum_avg, cum_weak, self_duels))
            ],
            "R_T_over_T_mean": float(mean),
            "R_T_over_T_std": float(std),
            "wall_seconds": wall,  # of this process's part: rounds resumed_at_round + 1 .. T when it went on
            **({"resumed_at_round": self._start_round} if self._start_round else {}),
            "device": device_name(module.device),
            "cpu_threads": self._threads(trainer),
            "seed_rounds_per_second": seed_rounds / wall if wall > 0 else math.nan,
            "timings_seconds": dict(learner.timings),
            "software": self._software,  # of the process that ran rounds resumed_at_round + 1 .. T
            **({"earlier_parts": _earlier_parts(trainer)} if self._start_round else {}),  # rounds 1 .. resumed_at_round
        }
        if self._recovered:  # no round ran in this process: the parts' wall time is not known
            self.summary.update(wall_seconds=None, seed_rounds_per_second=None, recovered_from=str(trainer.ckpt_path))
        if live is not None:
            self.summary["feature_units"] = int(learner.net.theta.shape[1])
            dead = [d["seed"] for d in self.summary["seeds"] if d["live_feature_units"] == 0]
            if dead:
                rank_zero_warn(
                    f"seeds {dead}: all {self.summary['feature_units']} units of phi are 0 on every context played "
                    f"(dead ReLUs): the network scores every arm alike, so these seeds stopped learning at some round; "
                    f"their curves show where (docs/usage.md, 'live_feature_units')",
                    category=RuntimeWarning,
                )
        if trainer.is_global_zero and self.write:
            os.makedirs(folder, exist_ok=True)
            write_json_atomic(os.path.join(folder, "summary.json"), self.summary)
            self._written = os.path.join(folder, "summary.json")
            params = {
                "learner": self.summary["learner"],
                **{f"model/{k}": v for k, v in hp.items()},
                **{f"data/{k}": v for k, v in vars(dm.spec).items()},
            }
            final = {"final/R_T_over_T_mean": float(mean), "final/R_T_over_T_std": float(std)}
            for logger in trainer.loggers:
                if isinstance(logger, TensorBoardLogger):  # its HPARAMS tab: the config beside the final regret
                    logger.log_hyperparams(params, final)
                else:  # the Logger API every other logger (CSV, W&B, MLflow, ...) takes
                    logger.log_hyperparams(params)
                    logger.log_metrics(final, step=T)
                logger.save()

    def on_fit_end(self, trainer, module):
        """After the progress bar's last line: the run's result and where its summary is (a finished run resumed at
        its own horizon: that it ran nothing, and how to go on)."""
        if self.announce and self._finished_already and trainer.is_global_zero:
            folder = trainer.log_dir or trainer.default_root_dir
            print(
                f"ckpt_path: {trainer.ckpt_path}: that run finished at round {module.t} (data.rounds={module.t}); "
                f"nothing was run and its results stay in {os.path.join(folder, 'summary.json')}; give a larger "
                f"data.rounds to go on with it",
                flush=True,
            )
        if self.announce and self._written and trainer.is_global_zero:
            s = self.summary
            spread = (
                f" ± {s['R_T_over_T_std']:.3f} over {s['num_seeds']} seeds" if s["num_seeds"] > 1 else " for one seed"
            )  # (the std of one value says nothing)
            took = (
                f"{s['wall_seconds']:.1f} s"
                if s["wall_seconds"] is not None
                else f"its summary written from {s['recovered_from']} (the run stopped after its last round, before it)"
            )
            print(
                f"{s['method']} on {s['task']}: R(T)/T {s['R_T_over_T_mean']:.3f}{spread} (T={s['rounds']}), "
                f"{took}; {self._written}",
                flush=True,
            )


def _earlier_parts(trainer) -> list[dict]:
    """The parts of the run made before this process (the loop's, from the checkpoint it went on from)."""
    loop = next((c for c in trainer.callbacks if isinstance(c, DuelingLoop)), None)
    return getattr(loop, "earlier_parts", [])


def changed_settings(learner) -> dict:
    """The learner's settings that differ from its class's defaults (network, rule, test, ...): its hparams against
    those of the class built with only the fields linked from the data (on torch's meta device: nothing drawn)."""
    hp = dict(learner.hparams)
    linked = {k: hp[k] for k in LINKED_FROM_DATA if k in hp}
    try:
        with torch.device("meta"), torch.random.fork_rng():
            default = dict(type(learner)(**linked).hparams)
    except Exception:  # a class that cannot be built from its linked fields alone: every setting it holds
        default = {}
    missing = object()
    return {k: v for k, v in hp.items() if k not in LINKED_FROM_DATA and default.get(k, missing) != v}
