"""One validation style: a bad value raises ``ValueError("<field>: <what is wrong>")`` where it enters."""
from __future__ import annotations


def require(cond: bool, field: str, msg: str) -> None:
    """Raise ``ValueError(f"{field}: {msg}")`` unless ``cond``."""
    if not cond:
        raise ValueError(f"{field}: {msg}")


def config_differences(saved: dict, current: dict, prefix: str, skip=()) -> list[str]:
    """Every field (but ``skip``) whose checkpointed value differs from the config's (resume)."""
    return [f"{prefix}{k}: checkpoint {saved[k]!r}, config {v!r}" for k, v in current.items()
            if k in saved and k not in skip and saved[k] != v]


def refuse_other_state(held: dict, own: dict, what: str, legacy=()) -> None:
    """Raise unless the state dict ``held`` (a checkpoint's) has the keys and tensor shapes of ``own`` (the
    learner this code builds from the same config): a file saved by another version of the package, whose
    learner kept other buffers, would otherwise fail inside torch's ``load_state_dict`` with a traceback.
    ``legacy``: keys an older version saved that the learner drops on load."""
    missing, unexpected = sorted(set(own) - set(held)), sorted(set(held) - set(own) - set(legacy))
    shapes = [f"{k} {list(held[k].shape)} (here {list(v.shape)})" for k, v in own.items()
              if k in held and hasattr(held[k], "shape") and tuple(held[k].shape) != tuple(v.shape)]
    differ = ([f"it lacks {missing}"] if missing else []) + ([f"it holds {unexpected} besides"] if unexpected else []) \
        + ([f"other shapes: {'; '.join(shapes)}"] if shapes else [])
    if differ:
        raise ValueError(f"{what}'s state is not the one this code's learner keeps ({', '.join(differ)}): it was saved "
                         f"by another version of nvldb_pl; go on with that version, or start a new run")


def refuse_other_config(*differences: list[str]) -> None:
    """Raise naming every field of ``differences`` (lists from :func:`config_differences`), if any."""
    differ = [d for found in differences for d in found]
    if differ:
        raise ValueError("the checkpoint was made with another config: " + "; ".join(differ))
