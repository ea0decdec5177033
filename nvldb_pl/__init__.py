"""nvldb_pl: Neural Variance-aware Dueling Bandits with Deep Representation and Shallow Exploration (NVLDB,
AISTATS 2026) on PyTorch Lightning.

The parts by role, imports running one way: :mod:`.maths` → :mod:`.environments` → :mod:`.learners` →
:mod:`.machinery` (files, devices, checkpoints; it takes the history's pass and the learners' names) → :mod:`.loop`
→ :mod:`.cli` (and :mod:`.experiments`, :mod:`.live`, :mod:`.serve`): a learner imports no machinery
(docs/architecture.md). :mod:`.migrations`, the versioned table of what older versions wrote, imports
nothing of the package, and every layer reads it."""

from .maths import seedwise  # noqa: F401  first: sets MKL_CBWR before any BLAS call (per-seed results independent of S)
from .environments.stream import RoundStream, StreamSpec
from .learners.nvldb import NVLDB
from .maths.selection import STRATEGIES

__all__ = ["BanditDataModule", "RoundStream", "StreamSpec", "NVLDB", "STRATEGIES"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """``nvldb_pl.BanditDataModule``, imported when asked: the algorithms below the loop run without Lightning."""
    if name == "BanditDataModule":
        from .loop.data import BanditDataModule

        return BanditDataModule
    raise AttributeError(f"module 'nvldb_pl' has no attribute {name!r}")
