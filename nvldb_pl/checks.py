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


def refuse_other_config(*differences: list[str]) -> None:
    """Raise naming every field of ``differences`` (lists from :func:`config_differences`), if any."""
    differ = [d for found in differences for d in found]
    if differ:
        raise ValueError("the checkpoint was made with another config: " + "; ".join(differ))
