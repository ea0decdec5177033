"""The vectorized Lightning loop against the plain per-seed, per-arm loop of nvldb_pl/reference.py."""

import pytest

from nvldb_pl.learners.settings import merged
from nvldb_pl.environments.stream import RoundStream, StreamSpec
from nvldb_pl.reference import run_seed
from nvldb_pl.loop.run import run_experiment


NETWORKS = {
    "ntk": {"network": {"parametrization": "ntk", "bias": False}},  # eq. (nn), the literal reading
    "standard": {"network": {"parametrization": "standard", "bias": False}},
}


@pytest.mark.parametrize("network", list(NETWORKS))
@pytest.mark.parametrize("distinct", [False, True])
@pytest.mark.parametrize("strategy", ["ucb_asym", "ucb_osym", "ucb_csym", "ts_asym", "ts_osym", "ts_csym"])
def test_vectorized_loop_makes_the_naive_loops_decisions(strategy, distinct, network):
    """Bit for bit, both networks, both second-arm choices. Biases are left out here: a bias gradient
    sums terms that nearly cancel, and Adam turns the rounding residue, which depends on the order of
    summation (autograd per seed here, the batched hand-written backward there), into a step of up to
    lr; tests/maths/test_parametrization.py checks the biases' gradient against autograd instead."""
    rounds, S = 12, 3
    model = {
        "network": {"width": 8},
        "grad_steps": 4,
        "strategy": strategy,
        "distinct_arms": distinct,
    }
    model = merged(model, NETWORKS[network])
    summary, module = run_experiment({"task": "cos", "rounds": rounds, "num_seeds": S, "seed": 11}, model)
    spec = StreamSpec(task="cos", rounds=rounds, num_seeds=S, base_seed=11)
    for s in range(S):
        pairs, cum = run_seed(spec, s, **model)
        x = module.history()[s]  # the contexts the vectorized loop chose
        ctx = [b["contexts"][s] for b in RoundStream(spec)]
        chosen = [(ctx[t][a1], ctx[t][a2]) for t, (a1, a2) in enumerate(pairs)]
        for t, (c1, c2) in enumerate(chosen):
            assert (x[t, 0] == c1).all() and (x[t, 1] == c2).all(), f"seed {s} round {t + 1}"
        assert summary["seeds"][s]["cum_avg_regret"] == pytest.approx(cum, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("test", ["deep_diag", "deep_full"])
@pytest.mark.parametrize("strategy", ["ucb_asym", "ts_osym", "ucb_csym"])
def test_the_self_duel_test_makes_the_naive_loops_decisions(strategy, test):
    """The deep self-duel test, where it fires (a_t = 0.3 on square: a self-duel in about a fifth of the
    rounds): the same pairs, self-duels included, as the naive loop's per-arm autograd gradients and
    inverted Gram."""
    rounds, S = 30, 3
    model = {
        "network": {"width": 8},
        "grad_steps": 4,
        "strategy": strategy,
        "beta": 0.3,
        "self_duel": {"test": test},
    }
    model = merged(model, NETWORKS["standard"])
    summary, module = run_experiment({"task": "square", "rounds": rounds, "num_seeds": S, "seed": 11}, model)
    assert sum(s["self_duel_fraction"] for s in summary["seeds"]) > 0  # the test fired
    naive = {**{k: v for k, v in model.items() if k != "self_duel"}, "self_duel_test": test}  # the reference's names
    _plays_the_naive_loops_pairs(
        summary, module, StreamSpec(task="square", rounds=rounds, num_seeds=S, base_seed=11), naive
    )


@pytest.mark.parametrize("activation", ["gelu", "silu"])
@pytest.mark.parametrize("strategy", ["ucb_asym", "ts_osym", "ucb_csym"])
def test_a_smooth_activation_with_a_prior_makes_the_naive_loops_decisions(strategy, activation):
    """GELU and SiLU with w_reg: the hand-written backward (the activation's derivative at the saved
    pre-activation, the prior's gradient) and the deep test's per-point gradients against the naive loop's
    autograd, pair for pair, on square where the deep test fires."""
    rounds, S = 30, 3
    model = {
        "network": {"width": 8, "activation": activation},
        "grad_steps": 4,
        "strategy": strategy,
        "beta": 0.3,
        "w_reg": 0.1,
    }
    model = merged(model, NETWORKS["standard"])
    summary, module = run_experiment({"task": "square", "rounds": rounds, "num_seeds": S, "seed": 11}, model)
    _plays_the_naive_loops_pairs(
        summary, module, StreamSpec(task="square", rounds=rounds, num_seeds=S, base_seed=11), model
    )


def _plays_the_naive_loops_pairs(summary, module, spec, model):
    """Every seed of the vectorized run played the naive loop's pair every round, and ends at its regret."""
    for s in range(spec.num_seeds):
        pairs, cum = run_seed(spec, s, **model)
        x = module.history()[s]
        ctx = [b["contexts"][s] for b in RoundStream(spec)]
        for t, (a1, a2) in enumerate(pairs):
            assert (x[t, 0] == ctx[t][a1]).all() and (x[t, 1] == ctx[t][a2]).all(), f"seed {s} round {t + 1}"
        assert summary["seeds"][s]["cum_avg_regret"] == pytest.approx(cum, rel=1e-9, abs=1e-9)
