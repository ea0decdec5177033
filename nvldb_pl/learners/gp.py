"""A Gaussian-process preference model (BoTorch's ``PairwiseGP``): the peer a practitioner would pick.

Per seed, a GP prior on the utility f over contexts, the logit likelihood P(x beats x') = sigmoid(f(x) -
f(x')) (``PairwiseLogitLikelihood``) and its Laplace approximation (``PairwiseLaplaceMarginalLogLikelihood``
for the kernel's hyperparameters). Every played context is a datapoint (2t of them at round t) and every
answer a comparison. The pair:

    a1 = argmax_k mu(x_k);   a2 = argmax_k mu(x_k) + beta sd(f(x_k) - f(x_a1))   (a2 = a1 allowed: sd = 0)

from the posterior's joint mean and covariance over the round's K contexts. The hyperparameters are fit
from their defaults on the history every ``refit_every`` rounds (so they are a function of the history:
a resumed run rebuilds them exactly), the posterior mode after every answer. Cost grows as (2t)^3 a
round, so runs beyond ``max_rounds`` rounds are refused. A hyperparameter fit whose every attempt fails keeps
the default hyperparameters (``failed_fits`` counts them). Needs the ``gp`` extra: ``pip install -e '.[gp]'``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..environments.seeding import TAG_FIT, torch_seed
from ..maths.checks import check
from .base import DuelingLearner
from .settings import LinkedSettings, check_fields

MAX_ROUNDS = 1000  # 2000 datapoints: a Laplace solve of that size per round and seed


def _botorch():
    try:
        from botorch.exceptions.errors import ModelFittingError  # noqa: F401 (imported where used)
        from botorch.fit import fit_gpytorch_mll
        from botorch.models.likelihoods.pairwise import PairwiseLogitLikelihood
        from botorch.models.pairwise_gp import PairwiseGP, PairwiseLaplaceMarginalLogLikelihood
    except ImportError:
        raise ValueError(
            "model: PairwiseGPLearner needs BoTorch, which the package does not install by default; "
            "pip install -e '.[gp]'"
        ) from None
    return PairwiseGP, PairwiseLogitLikelihood, PairwiseLaplaceMarginalLogLikelihood, fit_gpytorch_mll


@dataclass(frozen=True)
class GPSettings(LinkedSettings):
    """The GP's settings, checked as they are made (each refusal naming its field): the logit link only, ``beta`` the
    width on sd(f(x_k) - f(x_a1)), the hyperparameters fit every ``refit_every`` rounds, T at most ``max_rounds``."""

    beta: float = 1.0
    refit_every: int = 20
    max_rounds: int = MAX_ROUNDS

    def checked(self):
        super().checked()
        check(self.link == "logistic", "link", f"the GP's likelihood here is the logit one; got {self.link!r}")
        check_fields(
            self,
            integers={"refit_every": 1, "max_rounds": 1},
            numbers={"beta": False},
            rules=lambda: [
                (
                    self.rounds <= self.max_rounds,
                    "rounds",
                    f"PairwiseGPLearner keeps all 2t contexts played and solves a Laplace approximation over them "
                    f"every round, (2t)^3 a round: data.rounds={self.rounds} is beyond model.max_rounds="
                    f"{self.max_rounds}, the horizon where that is affordable here (raise max_rounds to run it anyway)",
                )
            ],
        )
        return self


class PairwiseGPLearner(DuelingLearner):
    """BoTorch's PairwiseGP, one per seed (S of them), UCB on the posterior of f(x_k) - f(x_a1)."""

    method = "PairwiseGP"
    LIVE = False  # its hyperparameter refits walk the history in rounds; the live API's late answers are not that
    EXTENDABLE = False  # max_rounds bounds T

    def __init__(
        self,
        dim: int = 5,
        arms: int = 5,
        rounds: int = 300,
        num_seeds: int = 8,
        link: str = "logistic",
        beta: float = 1.0,
        refit_every: int = 20,
        max_rounds: int = MAX_ROUNDS,
    ):
        super().__init__(dim, arms, rounds, num_seeds, link)
        self.settings = GPSettings(dim, arms, rounds, num_seeds, link, beta, refit_every, max_rounds).checked()
        _botorch()
        self.save_hyperparameters()
        self._models: list | None = None  # rebuilt from the history where missing (a resumed run)
        self.failed_fits = 0  # hyperparameter fits where every attempt failed (the defaults kept)

    def after_load(self) -> None:
        self._models = None  # fit again from the loaded history

    def _data(self, s: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Seed s's first t duels as (datapoints [2n, d] float64, comparisons [n, 2]: winner, loser), the
        self-duels left out (one point against itself says nothing)."""
        pairs = self.history(t)[s].to(torch.float64)  # [t, 2, d]: x_{i,a1}, x_{i,a2}
        keep = (pairs[:, 0] != pairs[:, 1]).any(dim=1)
        pairs, won = pairs[keep], self.hist_o[s, :t][keep] > 0.5
        first = torch.arange(0, 2 * len(pairs), 2)
        comparisons = torch.stack([torch.where(won, first, first + 1), torch.where(won, first + 1, first)], dim=1)
        return pairs.reshape(2 * len(pairs), -1), comparisons

    def _model(self, s: int, t: int):
        """Seed s's GP at round t: hyperparameters fit from their defaults on the duels up to the last
        multiple of refit_every, posterior mode on all t duels."""
        PairwiseGP, Logit, LaplaceMLL, fit = _botorch()
        from botorch.exceptions.errors import ModelFittingError

        every = self.settings.refit_every
        fit_at = (t // every) * every
        x, c = self._data(s, fit_at if fit_at > 0 else t)
        if len(c) == 0:  # only self-duels so far: the prior
            return None
        model = PairwiseGP(x, c, likelihood=Logit())
        if fit_at > 0:
            start = {k: v.clone() for k, v in model.state_dict().items()}
            # a failed attempt is retried from random initial values drawn from torch's global generator:
            # drawn here from the seed's own stream, so that a seed's run does not depend on the others beside it
            draw = torch_seed(self._base_seed, self._seed_ids[s], TAG_FIT, fit_at)
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(draw)
                    fit(LaplaceMLL(model.likelihood, model))
            except ModelFittingError:  # every attempt failed: the default hyperparameters stay (a function of
                model.load_state_dict(start)  # the history still, so a resumed run rebuilds the same model)
                self.failed_fits += 1
            if fit_at != t:
                x, c = self._data(s, t)
                model.set_train_data(x, c, update_model=True)
        return model

    @torch.no_grad()
    def _posterior(self, s: int, contexts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean [K], covariance [K, K]) of f over seed s's K contexts; the prior before any duel."""
        model = self._models[s]
        x = contexts[s].to(torch.float64)
        if model is None:
            return torch.zeros(x.shape[0], dtype=torch.float64), torch.eye(x.shape[0], dtype=torch.float64)
        post = model.posterior(x)
        return post.mean.reshape(-1), post.distribution.covariance_matrix.reshape(x.shape[0], x.shape[0])

    def scores(self, contexts):
        self._ensure_models()
        return torch.stack([self._posterior(s, contexts)[0] for s in range(contexts.shape[0])])

    def _ensure_models(self) -> None:
        if self._models is None:
            t = self.t
            self._models = [self._model(s, t) if t > 0 else None for s in range(self.num_local)]

    @torch.no_grad()
    def select(self, contexts, noise, t):
        with self._timed("select"):
            self._ensure_models()
            a1s, a2s = [], []
            for s in range(contexts.shape[0]):
                mu, cov = self._posterior(s, contexts)
                a1 = int(torch.argmax(mu))
                var = (torch.diagonal(cov) + cov[a1, a1] - 2 * cov[:, a1]).clamp(min=0)  # Var f_k - f_a1
                a2 = int(torch.argmax(mu + self.settings.beta * var.sqrt()))
                a1s.append(a1)
                a2s.append(a2)
            device = contexts.device
            return torch.tensor(a1s, device=device), torch.tensor(a2s, device=device)

    def update(self, duel):
        t = self.t
        with self._timed("refit"):
            if t % self.settings.refit_every == 0 or self._models is None or any(m is None for m in self._models):
                self._models = [self._model(s, t) for s in range(self.num_local)]
            else:
                for s, model in enumerate(self._models):
                    x, c = self._data(s, t)
                    model.set_train_data(x, c, update_model=True)
        mu = torch.stack([self._posterior(s, duel["contexts"])[0] for s in range(self.num_local)])
        self._flag_bad(~torch.isfinite(mu).all(dim=1), t)
