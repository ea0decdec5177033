"""A researcher's learner: NVLDB with other defaults (named by class_path; nothing of NVLDB's may be inherited silently)."""
from nvldb_pl.module import NVLDB


class FastNVLDB(NVLDB):
    """NVLDB with a larger step, fewer steps and a narrower network by default."""

    def __init__(self, dim: int = 5, arms: int = 5, rounds: int = 2000, num_seeds: int = 20, link: str = "logistic",
                 lr: float = 0.01, grad_steps: int = 5, width: int = 16, strategy: str = "ucb_osym"):
        super().__init__(dim=dim, arms=arms, rounds=rounds, num_seeds=num_seeds, link=link, lr=lr,
                         grad_steps=grad_steps, width=width, strategy=strategy)
