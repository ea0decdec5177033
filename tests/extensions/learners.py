"""A researcher's learner: NVLDB with other defaults (named by class_path; nothing of NVLDB's may be inherited silently)."""

from nvldb_pl.learners import NVLDB, NetworkOptions


class FastNVLDB(NVLDB):
    """NVLDB with a larger step, fewer steps and a narrower network by default."""

    def __init__(
        self,
        dim: int = 5,
        arms: int = 5,
        rounds: int = 2000,
        num_seeds: int = 20,
        link: str = "logistic",
        lr: float = 0.01,
        grad_steps: int = 5,
        network: NetworkOptions = NetworkOptions(width=16),
        strategy: str = "ucb_osym",
    ):
        super().__init__(
            dim=dim,
            arms=arms,
            rounds=rounds,
            num_seeds=num_seeds,
            link=link,
            lr=lr,
            grad_steps=grad_steps,
            network=network,
            strategy=strategy,
        )


import torch  # noqa: E402

from nvldb_pl.learners.base import DuelingLearner  # noqa: E402


class OnlineLogistic(DuelingLearner):
    """A linear utility f(x) = w^T x, one logistic-loss SGD step per duel; a1 greedy, a2 the greedy arm of a
    perturbed score (Gaussian noise of scale c / sqrt(t), from the round's own normals)."""

    method = "OnlineLogistic"

    def __init__(
        self,
        dim: int = 5,
        arms: int = 5,
        rounds: int = 2000,
        num_seeds: int = 20,
        link: str = "logistic",
        lr: float = 0.5,
        c: float = 1.0,
    ):
        super().__init__(dim, arms, rounds, num_seeds, link)
        self.save_hyperparameters()
        self.register_buffer("w", torch.zeros(num_seeds, dim, dtype=torch.float64))

    def scores(self, contexts):
        return torch.einsum("skd,sd->sk", contexts.double(), self.w)

    @torch.no_grad()
    def select(self, contexts, noise, t):
        f = self.scores(contexts)
        a1 = torch.argmax(f, dim=1)
        perturbed = f + self.hparams.c / t**0.5 * noise[:, 1, :]
        return a1, torch.argmax(perturbed.scatter(1, a1.unsqueeze(1), -torch.inf), dim=1)

    @torch.no_grad()
    def update(self, duel):
        x = self.history()[:, -1].double()  # the newest duel: [S, 2, d]
        dx = x[:, 0] - x[:, 1]
        p = torch.sigmoid(torch.einsum("sd,sd->s", dx, self.w))
        self.w += self.hparams.lr * (duel["o"].double() - p).unsqueeze(1) * dx  # ascent on the log-likelihood


class WideNVLDB(NVLDB):
    """NVLDB with a wider network by default, every other argument passed on (``**kwargs``)."""

    def __init__(self, network: NetworkOptions = NetworkOptions(width=48), **kwargs):
        super().__init__(network=network, **kwargs)
