"""A network of one's own for phi (model.network): its per-arm gradients (the deep self-duel test's), stochastic
modules (dropout), and the checks where it meets the package; each network from tests/extensions, as a user's."""

import json
import os

import pytest
import torch

from nvldb_pl.cli import run_cli
from nvldb_pl.experiments.arguments import check_learner
from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.maths.user_network import StackedNetwork
from tests.helpers.runs import fit_args

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
COS = os.path.join(ROOT, "configs", "cos.yaml")
DROPOUT = "tests.extensions.networks.DropoutGELU"
LAYERNORM = "tests.extensions.networks.LayerNormMLP"


def _stacked(path, seeds=3):
    net = StackedNetwork(path, seeds, 5)
    net.init_seeds([torch.Generator().manual_seed(10 + s) for s in range(seeds)])
    return net


@pytest.mark.parametrize("path", [LAYERNORM, DROPOUT])
@pytest.mark.parametrize("seeds", [1, 3])
def test_per_point_gradients_equal_autograd_point_by_point(path, seeds):
    net = _stacked(path, seeds)
    x = torch.randn(seeds, 4, 5)
    g = net.per_point_gradients(x)
    assert g.shape == (seeds, 4, sum(p[0].numel() for p in net.parameters()))
    for s in range(seeds):  # the slow reference: one seed's module with its parameters, one point at a time
        module = net.cls(**net.init_args).eval()
        with torch.no_grad():
            for w, v in zip(module.parameters(), net.params):
                w.copy_(v[s])
        theta = net.theta[s].detach().clone().requires_grad_(True)
        for k in range(4):
            f = module(x[s, k : k + 1])[0] @ theta
            grads = torch.autograd.grad(f, list(module.parameters()) + [theta])
            ref = torch.cat([gr.reshape(-1) for gr in grads])
            torch.testing.assert_close(g[s, k], ref, rtol=1e-5, atol=1e-6)


def test_a_stochastic_network_draws_noise_in_the_adam_steps_only():
    net = _stacked(DROPOUT, 2)
    assert net.stochastic and not _stacked(LAYERNORM, 2).stochastic
    x = torch.randn(2, 50, 5)
    torch.testing.assert_close(net.features(x), net.features(x))  # eval mode: deterministic
    with net.training_pass():
        a, b = net.features(x), net.features(x)
    assert not torch.equal(a, b) and net.noise_step.tolist() == [2, 2]
    with net.training_pass():  # a seed's masks are its own: the same alone as beside another
        pair = net.features(x)
    alone = StackedNetwork(DROPOUT, 1, 5)
    alone.load_state_dict({k: v[1:] for k, v in net.state_dict().items()})
    alone.noise_step.fill_(2)
    with alone.training_pass():
        torch.testing.assert_close(alone.features(x[1:]), pair[1:])


def _run(root, *extra):
    args = fit_args(
        root,
        f"--model.network.module={DROPOUT}",
        "--data.rounds=12",
        "--model.grad_steps=3",
        "--trainer.enable_progress_bar=false",
        *extra,
    )
    assert run_cli(args) == 0
    with open(os.path.join(root, "lightning_logs", "version_0", "summary.json")) as fh:
        return json.load(fh)


def test_a_dropout_network_runs_with_the_default_deep_test_a_seed_alone_as_beside_another(tmp_path):
    both = _run(tmp_path / "both", "--data.num_seeds=2")
    alone = _run(tmp_path / "alone", "--data.num_seeds=1", "--data.first_seed_id=1")
    assert both["seeds"][1] == alone["seeds"][0]
    ckpt = torch.load(
        tmp_path / "both" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False
    )
    assert ckpt["hyper_parameters"]["self_duel"]["test"] == "deep_diag" and "self_duel.gram.U" in ckpt["state_dict"]
    assert ckpt["state_dict"]["net.noise_step"].min() > 0


@pytest.mark.parametrize("test", ["deep_diag", "deep_full", "escape", "none"])
def test_a_network_of_ones_own_takes_every_self_duel_test(test):
    learner = NVLDB(num_seeds=2, rounds=5, network={"module": LAYERNORM}, self_duel={"test": test})
    assert learner.hparams.self_duel["test"] == test


def test_a_network_whose_input_is_not_data_dim_is_refused_naming_both():
    with pytest.raises(
        ValueError, match=r"model.network.module: .*LayerNormMLP does not take \[N, 7\] contexts \(data.dim = 7\)"
    ):
        NVLDB(dim=7, num_seeds=1, rounds=5, network={"module": LAYERNORM})


@pytest.mark.parametrize("path", [LAYERNORM, DROPOUT])
def test_the_sweeps_pre_check_builds_a_network_of_ones_own(path):
    check_learner("NVLDB on cos", "NVLDB", {"network": {"module": path}}, {}, 20, 2)  # on torch's meta device


def _fit(root, *extra):
    args = ["fit", "--config", COS, f"--model.network.module={DROPOUT}", "--model.grad_steps=2", "--data.num_seeds=2"]
    args += ["--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={root}", *extra]
    assert run_cli(args) == 0
    with open(os.path.join(root, "lightning_logs", "version_0", "summary.json")) as fh:
        return [(s["seed"], s["cum_avg_regret"]) for s in json.load(fh)["seeds"]]


def test_a_dropout_networks_run_goes_on_from_its_checkpoint_to_exactly_the_run_in_one_go(tmp_path):
    whole = _fit(tmp_path / "whole", "--data.rounds=24")
    _fit(tmp_path / "parts", "--data.rounds=16")
    assert _fit(tmp_path / "parts", "--data.rounds=24", "--ckpt_path=last") == whole  # the same dropout masks


def test_the_live_api_takes_a_dropout_network_with_the_deep_test_and_its_save_loads(tmp_path):
    import numpy as np

    from nvldb_pl.live import DuelingBandit

    bandit = DuelingBandit.create(network={"module": DROPOUT}, grad_steps=2)
    assert bandit.learner.hparams.self_duel["test"] == "deep_diag"
    x = np.eye(5)[:4]
    for _ in range(3):
        i, j = bandit.select(x)
        assert i != j  # a person is never asked an item against itself
        bandit.observe(x, i, j, 1)
    bandit.save(str(tmp_path / "b.pt"))
    again = DuelingBandit.from_checkpoint(str(tmp_path / "b.pt"))
    np.testing.assert_array_equal(again.scores(x), bandit.scores(x))
    assert again.learner.net.noise_step.tolist() == bandit.learner.net.noise_step.tolist()
