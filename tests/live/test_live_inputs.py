"""The live API's contexts standardized by a frozen map (nvldb_pl/live/inputs.py): the features' scale and offset no
longer decide what the learner does (issue 81: features in [0, 1] or [0, 100] killed every unit of phi)."""

import numpy as np
import pytest
import torch

from nvldb_pl.live import DuelingBandit
from nvldb_pl.live.inputs import InputMap


def _catalog(scale=1.0, N=8, d=3, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (N, d)) * scale


def _answers(bandit, x, n=12, seed=1):
    """n answers of a linear person to the bandit's own questions on x; the pairs asked and the final scores."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(x.shape[1])
    u = (x - x.mean(0)) / x.std(0) @ w
    asked = []
    for _ in range(n):
        i, j = bandit.select(x)
        asked.append((i, j))
        bandit.observe(x, i, j, int(rng.uniform() < 1 / (1 + np.exp(u[j] - u[i]))))
    return asked, bandit.scores(x)


def test_a_catalog_on_another_scale_is_learned_exactly_alike():
    """x and 4x (a scale exact in floating point) give the same questions and the same scores: the learner reads
    both through the map fitted on the first call. As given (standardize False), features in [0, 1] killed every
    ReLU unit of this learner: every item scored 0 and one pair was asked every time."""
    x = _catalog()
    runs = {}
    for factor in (1.0, 4.0):
        for std in (True, False):
            b = DuelingBandit.create(dim=3, horizon=50, seed=2, standardize=std, network={"width": 8})
            runs[factor, std] = _answers(b, factor * x)
    assert runs[1.0, True][0] == runs[4.0, True][0]
    np.testing.assert_array_equal(runs[1.0, True][1], runs[4.0, True][1])
    assert np.ptp(runs[1.0, True][1]) > 0
    assert np.ptp(runs[1.0, False][1]) == 0 and len(set(runs[1.0, False][0])) == 1


def test_the_map_is_fitted_once_kept_by_a_save_and_an_old_save_reads_contexts_as_given(tmp_path):
    x = _catalog(100.0)
    b = DuelingBandit.create(dim=3, horizon=50, seed=0, network={"width": 8})
    assert b.input_map is None  # nothing seen yet
    b.scores(x[:1])  # one context fits nothing
    assert b.input_map is None
    _answers(b, x, n=3)
    mean = b.input_map.mean.clone()
    np.testing.assert_allclose(mean.numpy(), x.mean(0))
    _answers(b, x[:4] + 50.0, n=2)  # later contexts are read by the same map
    assert torch.equal(b.input_map.mean, mean)
    b.save(str(tmp_path / "b.pt"))
    again = DuelingBandit.from_checkpoint(str(tmp_path / "b.pt"))
    assert again.standardize and torch.equal(again.input_map.mean, mean)
    np.testing.assert_array_equal(again.scores(x), b.scores(x))
    old = torch.load(str(tmp_path / "b.pt"), weights_only=False)
    del old["standardize"], old["input_map"]  # a save from before the map
    torch.save(old, str(tmp_path / "old.pt"))
    assert not DuelingBandit.from_checkpoint(str(tmp_path / "old.pt")).standardize


def test_items_fit_the_map_and_are_refused_without_standardize():
    x = _catalog(10.0, N=20)
    b = DuelingBandit.create(dim=3, horizon=50, items=x, network={"width": 8})
    np.testing.assert_allclose(b.input_map.scale.numpy(), x.std(0))
    with pytest.raises(ValueError, match="items: they fit the standardizing map; with standardize false"):
        DuelingBandit.create(dim=3, items=x, standardize=False)
    with pytest.raises(ValueError, match=r"standardize: must be True or False, got 'yes'"):
        DuelingBandit.create(dim=3, standardize="yes")


def test_a_feature_alike_on_the_first_contexts_keeps_its_size_and_sign():
    m = InputMap.fitted(torch.tensor([[1.0, 5.0, 0.0], [3.0, 5.0, 0.0]]))
    assert m.mean.tolist() == [2.0, 5.0, 0.0] and m.scale.tolist() == [1.0, 5.0, 1.0]
    assert m(torch.tensor([[2.0, 10.0, -1.0]], dtype=torch.float32)).tolist() == [[0.0, 1.0, -1.0]]
    with pytest.raises(ValueError, match="fitted on two contexts at least"):
        InputMap.fitted(torch.zeros(1, 3))
