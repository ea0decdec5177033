"""The learner in front of real feedback (ask/tell, save/load), without Lightning: :class:`DuelingBandit` and
:func:`rank` (:mod:`.bandit`), built from what :mod:`.files` reads (a fit config, a live save, a fit checkpoint)."""

from .bandit import DuelingBandit, rank

__all__ = ["DuelingBandit", "rank"]
