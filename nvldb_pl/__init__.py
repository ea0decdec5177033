"""nvldb_pl: Neural Variance-aware Dueling Bandits with Deep Representation and Shallow Exploration (NVLDB,
AISTATS 2026) on PyTorch Lightning."""

from . import seedwise  # noqa: F401  first: sets MKL_CBWR before any BLAS call (per-seed results independent of S)
from .data import BanditDataModule, RoundStream, StreamSpec
from .module import NVLDB
from .selection import STRATEGIES

__all__ = ["BanditDataModule", "RoundStream", "StreamSpec", "NVLDB", "STRATEGIES"]
__version__ = "0.1.0"
