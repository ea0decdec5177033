"""The real-choice person: Ecdat's Train data as shipped, the conditional logit fitted to it against the published
coefficients, and the task and catalog built on it."""

import numpy as np
import pytest

from nvldb_pl.environments import train_choices as tc
from nvldb_pl.environments.tasks import make_task


def test_the_data_is_the_train_data_whole():
    z, chosen, ids = tc.load()
    assert z.shape == (2 * 2929, 4) and chosen.shape == (2929,) and len(set(ids.tolist())) == 235
    assert 0.4 < chosen.mean() < 0.6  # both trips are chosen about as often


def test_the_fitted_logit_has_the_published_signs_and_values():
    beta, se, loglik = tc.fit()
    assert (beta < 0).all()  # dearer, slower, more changes, less comfort (comfort 0 is best): each is worse
    for b, name in zip(beta, tc.FEATURES):
        assert abs(b - tc.PUBLISHED[name]) < 1e-5, name
    assert abs(loglik - (-1724.15)) < 0.01 and (se > 0).all()


def test_the_task_answers_with_the_fitted_person_on_trips_of_the_data():
    task = make_task("nvldb_pl.environments.train_choices.TrainChoices")
    rng = np.random.default_rng(0)
    theta = task.draw_parameter(4, rng)
    x = task.draw_contexts(3, 5, 4, rng)
    trips, beta_std = tc.standardized()
    assert np.allclose(theta, beta_std) and x.shape == (3, 5, 4)
    assert all(any(np.allclose(row, t) for t in trips[::1]) for row in x.reshape(-1, 4)[:3])
    u = task.utility(theta[None].repeat(3, 0), x)
    assert np.allclose(u, x @ beta_std)
    with pytest.raises(ValueError, match="data.dim: the Train trips have 4 features"):
        task.draw_parameter(5, rng)


def test_the_catalog_is_distinct_trips_with_the_persons_utilities():
    names, raw, x, u = tc.catalog(20, seed=3)
    assert len(names) == 20 and len(np.unique(x, axis=0)) == 20
    z = raw * tc.UNITS
    assert np.allclose(u - u.mean(), (z @ tc.fit()[0]) - (z @ tc.fit()[0]).mean())


def test_duel_script_asks_the_fitted_person_about_trips_and_learns_their_order(capsys):
    from tests.helpers.script_loader import load_script

    assert (
        load_script("duel").main(["--catalog", "train", "--simulate", "--objective", "rank", "--questions", "25"]) == 0
    )
    out = capsys.readouterr().out
    assert "price" in out and "comfort" in out
    tau = float(out.rsplit("hidden taste: ", 1)[1].split()[0])
    assert tau > 0.6  # 20 trips, 25 answers of a noiseless person: well above a random order's 0


def test_the_page_learns_the_fitted_persons_order_of_trips(tmp_path):
    """The annotation server on a catalog of trips (an items CSV), answered by the fitted person."""
    from nvldb_pl.serve.annotation import SHARED, Annotation
    from nvldb_pl.serve.items import kendall_tau, read_items
    from nvldb_pl.serve.store import Store

    names, raw, _, u = tc.catalog(12, seed=1)
    path = tmp_path / "trips.csv"
    path.write_text(
        "name,price,time,change,comfort\n" + "".join(f"{n},{','.join(map(str, r))}\n" for n, r in zip(names, raw))
    )
    items = read_items(str(path))
    ann = Annotation(items, Store(str(tmp_path / "a.db")), "configs/live.yaml", offer=None, objective="rank")
    utility = dict(zip(names, u))
    sid = ann.new_session()
    for _ in range(25):
        q = ann.question(sid)
        ann.answer(sid, q["question"], 1 if utility[q["first"]["name"]] > utility[q["second"]["name"]] else 2)
    scores = ann.bandits[SHARED].scores(items.contexts)
    assert kendall_tau(scores, [utility[n] for n in items.names]) > 0.5
