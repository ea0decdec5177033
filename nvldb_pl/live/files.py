"""What a live bandit is read from, checked, naming the field or the file: its arguments (an index, a seed), a fit
config (``configs/*.yaml``) and a checkpoint (a live save, or a fit run's ``last.ckpt``); :mod:`nvldb_pl.live` builds
the bandit from what these return."""

from __future__ import annotations

import os
import zipfile
from typing import Optional

import numpy as np
import torch

from ..environments.regret import split_state
from ..learners.registry import init_args, learner_class
from ..machinery.host import checkpoint_problem, open_text
from ..machinery.yaml_files import (
    read_yaml,
    refuse_duplicate_keys,
    refuse_linked_in_model,
    refuse_settings_beside_class_path,
)
from ..maths.checks import LINKED_FROM_DATA, refuse_other_state
from ..migrations import check_version, upgrade_settings

try:  # a fit config's data section is checked against the fit's data module (where Lightning is installed)
    from ..loop.data import BanditDataModule
except ImportError:
    BanditDataModule = None

# the sections of a fit config: configs/*.yaml, and the config.yaml a run writes
FIT_CONFIG_KEYS = {
    "data",
    "model",
    "trainer",
    "seed_everything",
    "loop",
    "checkpoint",
    "ckpt_path",
    "optimizer",
    "lr_scheduler",
    "weights_only",
    "threads",
}

FORMAT = "nvldb_pl.live/1"


def as_index(k) -> Optional[int]:
    """k as a Python int if it is an integer (int, numpy integer, or a one-element integer tensor
    such as ``argmax``'s), else None; bools are not indices."""
    if (
        torch.is_tensor(k)
        and k.numel() == 1
        and not k.is_floating_point()
        and not k.is_complex()
        and k.dtype != torch.bool
    ):
        return int(k.item())
    if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
        return int(k)
    return None


def check_counter(module, path: str) -> None:
    """A save's count of answers (``rounds_done``) against its history: within the history's rows, and no duel
    recorded past it (a counter edited or damaged lower went on from fewer answers than the file holds, and the next
    answer overwrote one; higher, from rows never played)."""
    t = module.t
    xt = getattr(module, "hist_xt", None)
    if xt is None:
        return
    rows = xt.shape[-1] // 2
    if not 0 <= t <= rows:
        raise ValueError(f"{path}: its count of answers, {t}, is outside its history's {rows} rows; not read")
    played = xt.abs().sum(dim=(0, 1)).view(-1, 2).sum(dim=1) > 0  # [rows]: a row holding a duel
    past = int(played[t:].sum())
    if past:
        raise ValueError(
            f"{path}: it counts {t} answers, but its history holds duels past them (the file was edited or damaged); "
            f"not read: load an earlier save"
        )
    held = int(played[:t].sum())
    if held < t:  # a duel's two contexts are never both all zeros: an empty row below the count was never played
        raise ValueError(
            f"{path}: it counts {t} answers, but its history holds {held} duels (the file was edited or damaged); "
            f"not read: load an earlier save"
        )


def check_seed(seed, field: str = "seed") -> None:
    if as_index(seed) is None or not 0 <= seed <= 2**32 - 1:
        raise ValueError(f"{field}: must be an integer between 0 and {2**32 - 1} (the seeds numpy takes), got {seed!r}")


def config_arguments(
    config,
    dim: Optional[int] = None,
    horizon: Optional[int] = None,
    seed: Optional[int] = None,
) -> tuple[dict, str]:
    """A YAML file (or its dict) in the format of ``configs/*.yaml``, read for
    :meth:`nvldb_pl.live.DuelingBandit.from_config`: (the arguments of ``create``: learner, dim, horizon, link, seed
    and the model's own, where it was read). Keyword arguments override the file."""
    if seed is not None:  # the argument's own error, not the file's
        check_seed(seed)
    where = "config"
    if not isinstance(config, dict):
        import yaml

        where = str(config)
        if not os.path.isfile(config):
            raise FileNotFoundError(f"{config}: no such config file")
        with open_text(config, "config") as fh:
            text = fh.read()
            refuse_duplicate_keys(text, where)  # as the fit CLI refuses it
            try:
                config = read_yaml(text) or {}
            except yaml.YAMLError as err:
                raise ValueError(f"{where}: not valid YAML ({err})") from None
        if not isinstance(config, dict):
            raise ValueError(f"{where}: expected a mapping with 'model' and 'data' sections")
    refuse_settings_beside_class_path(config, where)  # as the fit CLI refuses them
    refuse_linked_in_model(config, where)
    # a fit config's sections are welcome (what live use does not need is left out); a misspelt one is not
    unknown = sorted(set(config) - FIT_CONFIG_KEYS)
    if unknown:
        raise ValueError(f"{where}: no section(s) {unknown}; a config has {sorted(FIT_CONFIG_KEYS)}")
    data, model = dict(config.get("data") or {}), dict(config.get("model") or {})
    unknown = sorted(set(data) - init_args(BanditDataModule)) if BanditDataModule is not None else []
    if unknown:
        raise ValueError(f"{where}: data has no argument(s) {unknown}; it takes {sorted(init_args(BanditDataModule))}")
    name = "NVLDB"
    if "class_path" in model:  # the whole path: a learner of one's own is found by it
        name = str(model["class_path"])
        name = name.rsplit(".", 1)[-1] if name.startswith("nvldb_pl.") else name
        model = dict(model.get("init_args") or {})
    model = {k: v for k, v in model.items() if k not in LINKED_FROM_DATA}
    if seed is None:
        seed = config.get("seed_everything", 0) or 0  # false or null: the base seed 0, as a fit run's
        if seed is True:
            raise ValueError(
                f"{where}: seed_everything: true (a random seed, in a fit run) names no seed for a "
                f"live bandit; give an integer there or as seed="
            )
        try:
            check_seed(seed, "seed_everything")
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    given = {"dim": dim, "horizon": horizon}
    for field, value in (("dim", data.get("dim", 5)), ("horizon", data.get("rounds", 1000))):
        named = field if given[field] is not None else f"{where}: data.{'rounds' if field == 'horizon' else field}"
        value = given[field] if given[field] is not None else value
        if as_index(value) is None or value < 1:  # (5.7 was read as 5)
            raise ValueError(f"{named}: must be an integer >= 1, got {value!r}")
        given[field] = int(value)
    args = dict(dim=given["dim"], horizon=given["horizon"], link=data.get("link", "logistic"), seed=int(seed))
    return {"learner": name, **args, **model}, where


def read_checkpoint(path: str, seed_index: int = 0, objective: Optional[str] = None) -> tuple[dict, Optional[dict]]:
    """A live save (:meth:`nvldb_pl.live.DuelingBandit.save`) or a ``fit`` run's ``last.ckpt`` (seed ``seed_index`` of
    its S seeds), read for :meth:`nvldb_pl.live.DuelingBandit.from_checkpoint`: (the bandit's arguments: the learner
    with its state, seed, generator_state, optimizer_state, objective; the save's meta or None). ``objective``:
    ``None`` keeps the save's (``regret`` for a fit checkpoint)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such checkpoint")
    problem = checkpoint_problem(path) if zipfile.is_zipfile(path) else None  # torch reads no CRC itself
    if problem is not None:
        raise ValueError(f"{path}: damaged, not read ({problem}); load an earlier save")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # a truncated or foreign file
        raise ValueError(f"{path}: not a readable checkpoint ({type(err).__name__}: {err})") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise ValueError(f"{path}: not a nvldb_pl checkpoint (no state_dict)")
    live = ckpt.get("format") == FORMAT
    name = ckpt.get("learner", "NVLDB")
    try:
        learner_cls = learner_class(name, path)
    except ValueError as err:
        raise ValueError(f"{err} (the learner this file was saved from)") from None
    try:  # the migrations it needs no longer (nvldb_pl/migrations.py); a newer package's file refused
        since = check_version(ckpt.get("format_version"))
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    lineage = (name, *learner_cls.lineage()) if hasattr(learner_cls, "lineage") else name
    hp = upgrade_settings(ckpt["hparams"] if live else ckpt.get("hyper_parameters", {}), lineage, since)
    accepted = init_args(learner_cls)
    module = learner_cls(**{k: v for k, v in hp.items() if k in accepted})
    held = ckpt["state_dict"].get("seed_id")
    if held is not None and len(held) != module.num_local:  # one rank's shard of a seed_parallel run
        module.take_seeds(list(range(len(held))))
    if "hist_o" in ckpt["state_dict"]:
        module.grow_history(int(ckpt["state_dict"]["hist_o"].shape[-1]))  # a live history may have grown
    learned = split_state(ckpt["state_dict"])[0]  # a fit checkpoint's regret is the loop's, not the learner's
    state = module.upgraded_state(learned, since)  # a save an older version wrote, in this one's terms
    refuse_other_state(state, module.state_dict(), path)
    module.load_state_dict(state)
    check_counter(module, path)
    S = module.num_local
    index = as_index(seed_index)
    if index is None or not 0 <= index < S:
        raise ValueError(f"seed_index: {path} holds {S} seed(s) (indices 0 to {S - 1}), got {seed_index!r}")
    seed_index = index
    opt_state = ckpt["optimizer"] if live else (ckpt.get("optimizer_states") or [None])[0]
    if S > 1:
        module.take_seeds([seed_index])
        if opt_state is not None and "state" in opt_state:  # Adam's moments carry the seed dimension first
            opt_state = {
                **opt_state,
                "state": {
                    k: {
                        n: (v[seed_index : seed_index + 1].clone() if torch.is_tensor(v) and v.dim() > 0 else v)
                        for n, v in st.items()
                    }
                    for k, st in opt_state["state"].items()
                },
            }
    seed = ckpt.get("seed", int(hp.get("seed", 0)) if live else 0)
    if objective is None:
        objective = ckpt.get("objective", "regret") if live else "regret"
    args = dict(learner=module, seed=seed, generator_state=ckpt.get("generator") if live else None)
    meta = ckpt.get("meta") if live and isinstance(ckpt.get("meta"), dict) else None
    # the contexts' map (nvldb_pl/live/inputs.py): a save before it, and a fit's checkpoint, read contexts as given
    mapped = {"standardize": ckpt.get("standardize", False), "input_map": ckpt.get("input_map")} if live else {}
    return {**args, "optimizer_state": opt_state, "objective": objective, **mapped}, meta
