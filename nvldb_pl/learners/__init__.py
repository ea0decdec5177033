"""The learners, plain torch algorithms (a fit drives them through :class:`nvldb_pl.loop.module.LearnerModule`, the
live API directly): what every dueling learner shares (:mod:`.base`: the history, the settings, the round's
observe and select), the network learner NVLDB and NDB share (:mod:`.neural`), NVLDB itself (:mod:`.nvldb`,
Algorithm 1), the baselines in the same loop (NDB, CoLSTIM, MaxInP, VACDB, the random pair, the GP preference
model) and the one registry of names (:mod:`.registry`).

Choose one on the command line with ``--model <Name>``, e.g.
``python scripts/main.py fit --config configs/cos.yaml --model CoLSTIM``.
"""

from .base import DuelingLearner
from .gp import PairwiseGPLearner
from .linear import CoLSTIM, LinearDueling, MaxInP
from .ndb import NDB
from .network_settings import NetworkOptions
from .neural import NeuralLearner
from .nvldb import NVLDB
from .random_pair import RandomPair
from .vacdb import VACDB

__all__ = [
    "CoLSTIM",
    "DuelingLearner",
    "LinearDueling",
    "MaxInP",
    "NDB",
    "NVLDB",
    "NetworkOptions",
    "NeuralLearner",
    "PairwiseGPLearner",
    "RandomPair",
    "VACDB",
]
