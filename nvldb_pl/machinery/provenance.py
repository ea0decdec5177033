"""Where a run's rounds were computed, and what may go on from a checkpoint: the checks a resume passes before the
learner's state is loaded, and what every checkpoint records of the run that wrote it.

Refused, naming the fields: a checkpoint of another config (learner, its settings, the stream's), a module of
one's own imported from another file than the run's (by digest), fewer rounds than it holds, a longer horizon for
a learner that depends on T, another state layout, another spread of the seeds over processes, another precision.
Said, not refused: another device, another software version. The learner itself only upgrades a checkpoint to its
own terms (:meth:`nvldb_pl.learners.base.DuelingLearner.upgrade_checkpoint`); the loop
(:class:`nvldb_pl.loop.callbacks.DuelingLoop`) hands :func:`check_resume` to it and :func:`stamp` to Lightning.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Optional

from lightning.pytorch.utilities import rank_zero_info

from ..learners.base import learner_name
from ..maths.checks import LINKED_FROM_DATA, config_differences, refuse_other_config, refuse_other_state, require
from .host import run_parts, software, software_change


def refuse_coupled_processes(trainer) -> None:
    """Several processes under any strategy but ``seed_parallel`` would average gradients and broadcast weights
    across processes, coupling the seeds."""
    if trainer.world_size > 1 and getattr(trainer.strategy, "strategy_name", None) != "seed_parallel":
        raise ValueError(
            f"trainer.strategy: {trainer.world_size} processes under "
            f"{type(trainer.strategy).__name__} would average gradients and broadcast weights "
            f"across processes, coupling the seeds; use --trainer.strategy seed_parallel"
        )


def check_resume(module, checkpoint: dict, trainer=None) -> list[dict]:
    """Refuse a checkpoint of another config (naming every field that differs, the data ones as ``data.<field>``),
    state or run layout; a larger ``data.rounds`` than the checkpoint's goes on with the same run (its history
    padded to the new horizon) where the learner does not depend on T (``EXTENDABLE``). ``checkpoint`` is in the
    learner's terms (:meth:`~nvldb_pl.learners.base.DuelingLearner.upgrade_checkpoint`) and is padded in place.
    Returns the parts of the run made before this process (:func:`nvldb_pl.machinery.host.run_parts`)."""
    dm = getattr(trainer, "datamodule", None) if trainer is not None else None
    stream = checkpoint.get(type(dm).__qualname__) if hasattr(dm, "config_differences") else None
    data = dm.config_differences(stream) if stream is not None else []
    learner = module.learner
    name = learner_name(type(learner))
    saved_name = checkpoint.get("learner", name)
    if saved_name == type(learner).__name__:  # saved before checkpoints named a user's class by its import path
        saved_name = name
    saved = {"learner": saved_name, **checkpoint.get("hyper_parameters", {})}
    T_saved, T = saved.get("rounds"), module.hparams["rounds"]
    if T_saved is not None and T_saved != T and saved["learner"] == name:
        require(
            T > T_saved,
            "data.rounds",
            f"the checkpoint holds a run of {T_saved} rounds; resuming can go on to more rounds, not fewer ({T})",
        )
        require(
            learner.EXTENDABLE,
            "data.rounds",
            f"{name} depends on the horizon T, so its run of {T_saved} "
            f"rounds cannot go on exactly to {T}; start a new run",
        )
        saved["rounds"] = T
        learner._pad_history(checkpoint["state_dict"], T)
        # Lightning saved the loop as at the stream's last batch (T_saved was the end): it is not now
        progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress")
        if progress is not None:
            progress["is_last_batch"] = False
    linked = LINKED_FROM_DATA if stream is not None else ()  # named once, as data.<field>
    refuse_other_config(data, config_differences(saved, {"learner": name, **module.hparams}, "model.", linked))
    if hasattr(dm, "config_differences"):
        require(
            stream is not None,
            "ckpt_path",
            f"the checkpoint holds no state of the round stream "
            f"({type(dm).__qualname__}): it is not a fit run's checkpoint",
        )
    refuse_other_modules(checkpoint.get("own_modules"))  # before the state: other code may keep other shapes
    refuse_other_state(checkpoint["state_dict"], module.state_dict(), "the checkpoint")
    refuse_other_layout(module, checkpoint, trainer)
    say_other_device(checkpoint, trainer)
    moved = software_change(checkpoint.get("software"))  # another commit, torch, ...: said as for another device
    if moved:
        rank_zero_info(moved)
    done = int(checkpoint["state_dict"]["rounds_done"])
    if done >= module.hparams["rounds"]:
        rank_zero_info(
            f"data.rounds={done}: the checkpoint already holds every round of the run, so nothing "
            f"runs (a larger data.rounds goes on with it)"
        )
    return run_parts(checkpoint)


def say_other_device(checkpoint: dict, trainer) -> None:
    """A run may go on on another device (a GPU run on a CPU-only machine, or the reverse): the
    same algorithm, but not the run it would have been on one device. Say so."""
    saved = checkpoint.get("accelerator")
    now = trainer.strategy.root_device.type if trainer is not None else None
    if saved and now and saved != now:
        rank_zero_info(
            f"trainer.accelerator: the checkpoint's rounds were computed on {saved}, and this run goes "
            f"on on {now}: the same algorithm, but the two devices' kernels differ in the last bits, "
            f"which the Adam steps amplify, so each seed's rounds from here are not those of a run "
            f"made on either device alone"
        )


def refuse_other_layout(module, checkpoint: dict, trainer) -> None:
    """Refuse going on under another precision, or with the seeds spread over another number of
    processes (each process's checkpoint holds its own shard of the seeds)."""
    saved_ids = checkpoint["state_dict"].get("seed_id")
    if saved_ids is not None and saved_ids.tolist() != module.learner.seed_ids:
        runs = checkpoint.get("processes")
        here = trainer.world_size if trainer is not None else 1
        raise ValueError(
            f"trainer.devices x trainer.num_nodes: the checkpoint holds seeds {saved_ids.tolist()} "
            f"(saved by a run of {runs or 'another number of'} process(es)), where this run of {here} "
            f"gives this process seeds {module.learner.seed_ids}; resume with {runs or 'as many'} processes "
            f"(per-seed results do not depend on the count, but each process saved only its own seeds)"
        )
    saved, now = checkpoint.get("precision"), None if trainer is None else str(trainer.precision)
    require(
        saved is None or now is None or saved == now,
        "trainer.precision",
        f"the checkpoint's rounds were computed in {saved!r}; going on in {now!r} would give a run that "
        f"equals neither; resume with --trainer.precision {saved}",
    )


def stamp(module, checkpoint: dict, trainer, earlier_parts: Optional[list[dict]] = None) -> None:
    """What a checkpoint records of the run that wrote it, checked when it is resumed: processes, precision and
    device, the software, and the run's parts (rounds, device, software), this process's last."""
    earlier_parts = earlier_parts or []
    if trainer is not None:
        checkpoint["processes"] = trainer.world_size
        checkpoint["precision"] = str(trainer.precision)
        checkpoint["accelerator"] = trainer.strategy.root_device.type
    checkpoint["software"] = software()
    checkpoint["own_modules"] = own_modules()  # the code of one's own the run was made with, by digest
    first = earlier_parts[-1]["rounds"][1] + 1 if earlier_parts else 1  # this process's part
    checkpoint["parts"] = earlier_parts + (
        [{"rounds": [first, module.t], "accelerator": module.device.type, "software": checkpoint["software"]}]
        if module.t >= first
        else []
    )


def own_modules() -> dict[str, list[str]]:
    """{module name: [its file, sha256 of its bytes]} of every module this process imported from outside the Python
    installation and this package: a run's code of one's own (a network, learner, task or rule class)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    installed = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, package)}
    out = {}
    for name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if name in ("__main__", "__mp_main__") or not file or not file.endswith(".py") or not os.path.isfile(file):
            continue
        file = os.path.abspath(file)
        if any(file.startswith(root + os.sep) for root in installed) or "site-packages" in file:
            continue
        with open(file, "rb") as fh:
            out[name] = [file, hashlib.sha256(fh.read()).hexdigest()]
    return out


def refuse_other_modules(saved: Optional[dict]) -> None:
    """A resume whose process imports a module the run was made with from another file (another digest): refused
    naming the module, both files (two versions of one's own code would be mixed in one run)."""
    now = own_modules()
    for name, (file, digest) in sorted((saved or {}).items()):
        if name in now and now[name][1] != digest:
            where = "another file" if now[name][0] != file else "the same file, changed since"
            raise ValueError(
                f"ckpt_path: the run was made with {name} from {file} (sha256 {digest[:12]}); this process imports it "
                f"from {now[name][0]}, {where} (sha256 {now[name][1][:12]}): the run would go on with other code; "
                f"resume it where its code is, or start a new run"
            )


def hparams_digest(hparams: dict) -> str:
    """sha256 of a run's hyperparameters as JSON (keys sorted; what hparams.yaml holds, read back), 16 hex digits:
    summary.json's ``hparams_sha256``, against which a grid checks the hparams.yaml it reuses or reports."""
    text = json.dumps(json.loads(json.dumps(dict(hparams), default=str)), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
