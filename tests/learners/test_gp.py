"""The Gaussian-process preference baseline (BoTorch's PairwiseGP; the gp extra)."""

import pytest
import torch

pytest.importorskip("botorch", reason="the GP baseline needs the gp extra: pip install -e '.[gp]'")

from nvldb_pl.learners.gp import PairwiseGPLearner  # noqa: E402
from nvldb_pl.loop.run import run_experiment  # noqa: E402


def test_its_pair_is_the_posterior_mean_leader_and_the_widest_optimistic_challenger():
    """On a model fit to a few duels: a1 = argmax mu, a2 = argmax mu_k + sd(f_k - f_a1), from the posterior."""
    summary, learner = run_experiment(
        {"task": "square", "rounds": 25, "num_seeds": 2, "seed": 3}, {}, learner="PairwiseGPLearner"
    )
    x = torch.rand(2, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    a1, a2 = learner.select(x.float(), None, learner.t + 1)
    for s in range(2):
        with torch.no_grad():
            post = learner._models[s].posterior(x[s].float().double())
        mu, cov = post.mean.reshape(-1), post.distribution.covariance_matrix
        assert int(a1[s]) == int(torch.argmax(mu))
        sd = torch.tensor([float(cov[k, k] + cov[int(a1[s]), int(a1[s])] - 2 * cov[k, int(a1[s])]) for k in range(5)])
        assert int(a2[s]) == int(torch.argmax(mu + sd.clamp(min=0).sqrt()))


def test_a_seed_runs_the_same_alone_or_beside_another_across_a_hyperparameter_refit():
    data = {"task": "cos", "rounds": 24, "seed": 5}
    both, _ = run_experiment({**data, "num_seeds": 2}, {"refit_every": 10}, learner="PairwiseGPLearner")
    alone, _ = run_experiment(
        {**data, "num_seeds": 1, "first_seed_id": 1}, {"refit_every": 10}, learner="PairwiseGPLearner"
    )
    assert both["seeds"][1]["cum_avg_regret"] == pytest.approx(alone["seeds"][0]["cum_avg_regret"], rel=1e-9)


def test_a_horizon_beyond_where_it_is_affordable_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"data.rounds .*data.rounds=2000 is beyond model.max_rounds=1000"):
        PairwiseGPLearner(rounds=2000)


def test_a_hyperparameter_fit_that_fails_every_attempt_keeps_the_defaults_and_the_run_goes_on(monkeypatch):
    import botorch.fit
    from botorch.exceptions.errors import ModelFittingError

    def fails(*args, **kwargs):
        raise ModelFittingError("All attempts to fit the model have failed.")

    monkeypatch.setattr(botorch.fit, "fit_gpytorch_mll", fails)
    summary, learner = run_experiment(
        {"task": "square", "rounds": 12, "num_seeds": 2, "seed": 1}, {"refit_every": 5}, learner="PairwiseGPLearner"
    )
    assert learner.failed_fits >= 2 and summary["rounds"] == 12


def test_a_fits_random_restarts_come_from_the_seeds_own_stream(monkeypatch):
    """BoTorch retries a failed fit from initial values drawn from torch's global generator. Here a fit that
    draws from it moves the hyperparameters by its draw: seed 1 runs the same beside seed 0 (whose fits draw
    first) as alone, and whatever the global generator's state before the run."""
    import botorch.fit

    def draws(mll, *args, **kwargs):
        with torch.no_grad():
            for par in mll.model.parameters():
                par.add_(0.5 * torch.rand(par.shape, dtype=par.dtype))
        return mll

    monkeypatch.setattr(botorch.fit, "fit_gpytorch_mll", draws)
    data = {"task": "cos", "rounds": 24, "seed": 5}
    torch.manual_seed(123)
    both, _ = run_experiment({**data, "num_seeds": 2}, {"refit_every": 5}, learner="PairwiseGPLearner")
    torch.manual_seed(456)
    alone, _ = run_experiment(
        {**data, "num_seeds": 1, "first_seed_id": 1}, {"refit_every": 5}, learner="PairwiseGPLearner"
    )
    assert both["seeds"][1]["cum_avg_regret"] == alone["seeds"][0]["cum_avg_regret"]
