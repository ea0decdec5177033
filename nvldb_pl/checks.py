"""One validation style: a bad value raises ``ValueError("<field>: <what is wrong>")`` where it enters."""
from __future__ import annotations


def require(cond: bool, field: str, msg: str) -> None:
    """Raise ``ValueError(f"{field}: {msg}")`` unless ``cond``."""
    if not cond:
        raise ValueError(f"{field}: {msg}")


def refuse_other_config(saved: dict, current: dict, prefix: str) -> None:
    """Raise naming every field whose checkpointed value differs from the config's (resume)."""
    differ = [f"{prefix}{k}: checkpoint {saved[k]!r}, config {v!r}" for k, v in current.items()
              if k in saved and saved[k] != v]
    if differ:
        raise ValueError("the checkpoint was made with another config: " + "; ".join(differ))
