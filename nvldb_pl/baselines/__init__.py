"""Baselines in the same loop as NVLDB (same streams, seeds, CLI and summaries).

Choose one on the command line with ``--model <Name>``, e.g.
``python scripts/main.py fit --config configs/cos.yaml --model CoLSTIM``.
"""

from .gp import PairwiseGPLearner
from .linear import CoLSTIM, LinearDueling, MaxInP
from .ndb import NDB
from .random_pair import RandomPair
from .vacdb import VACDB

__all__ = ["CoLSTIM", "LinearDueling", "MaxInP", "NDB", "PairwiseGPLearner", "RandomPair", "VACDB"]
