"""The versioned migration table (nvldb_pl/migrations.py): what older versions wrote, read in today's terms."""

import torch

from nvldb_pl.learners.ndb import NDB
from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.live import DuelingBandit
from nvldb_pl.migrations import MIGRATIONS, VERSION, upgrade_settings, upgrade_state


def test_the_table_is_numbered_in_order_and_its_last_version_is_what_files_record():
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert VERSION == MIGRATIONS[-1].version


def test_a_file_of_before_the_table_gets_every_setting_it_predates_as_it_was_then():
    nvldb = upgrade_settings({"dim": 3, "lr": 0.01}, "NVLDB")
    net = nvldb["network"]  # nested (migration 15)
    assert net["parametrization"] == "ntk" and net["bias"] is False and nvldb["distinct_arms"] is False
    assert (
        nvldb["self_duel"] == {"test": "none", "escape_rate": 1.0, "width": None, "second_arm": "rule"}
        and net["activation"] == "relu"
    )
    assert not {"self_duel_test", "self_duel_width", "second_arm"} & set(nvldb)  # nested (migration 13)
    assert nvldb["dim"] == 3 and nvldb["lr"] == 0.01  # what it saved is kept
    ndb = upgrade_settings({"rule": "ucb"}, "NDB")
    assert ndb["strategy"] == "ucb_asym" and "rule" not in ndb and "self_duel" not in ndb
    assert upgrade_settings({"beta": 2.0}, "CoLSTIM") == {"beta": 2.0}  # a learner no migration names


def test_a_file_of_a_version_gets_only_the_migrations_after_it():
    assert upgrade_settings({}, "NVLDB", since=8) == {"network": {"activation": "relu"}, "w_reg": 0.0}
    assert upgrade_settings({"w_reg": 0.1}, "NVLDB", since=9) == {"w_reg": 0.1}  # what it recorded is kept
    assert upgrade_settings({}, "NVLDB", since=VERSION) == {}
    assert upgrade_settings({"rule": "ts"}, "NDB", since=8) == {"rule": "ts", "network": {"activation": "relu"}}
    assert upgrade_settings({}, "NVLDB")["w_reg"] == 0.0  # a file without the setting ran 0
    old = {"U": 1, "Zinv": 2, "theta": 3}
    assert upgrade_state(old, NVLDB.lineage()) == {"self_duel.gram.U": 1, "self_duel.gram.Zinv": 2, "theta": 3}
    assert upgrade_state(old, NVLDB.lineage(), since=7) == old
    assert upgrade_state({"V": 0, "U": 1, "Vinv": 2}, NDB.lineage()) == {"gradient_gram.U": 1, "gradient_gram.Zinv": 2}


def test_the_networks_flat_settings_and_a_module_of_ones_own_are_read_into_the_network_mapping():
    """Migration 15: ``width``, ``depth``, ... and the old ``network`` (a module of one's own) are ``network``'s fields;
    a file written since keeps its mapping (the flat values the earlier steps fill in, as absent, are dropped)."""
    old = {"width": 8, "depth": 2, "network": {"class_path": "my.Net", "init_args": {"h": 3}}, "lr": 0.1}
    net = upgrade_settings(old, "NVLDB", since=14)["network"]
    assert net == {"width": 8, "depth": 2, "module": {"class_path": "my.Net", "init_args": {"h": 3}}}
    assert upgrade_settings({"network": "my.Net"}, "NDB", since=14) == {"network": {"module": "my.Net"}}
    now = dict(NVLDB(dim=3, num_seeds=1, network={"width": 4, "parametrization": "ntk"}).hparams)
    assert upgrade_settings(now, "NVLDB") == now  # every migration, as a results file gets them: nothing changes


def test_upgrading_twice_is_upgrading_once():
    for name in ("NVLDB", "NDB"):
        once = upgrade_settings({"rule": "ucb", "dim": 4}, name)
        assert upgrade_settings(once, name) == once
    state = {"U": 1, "Zinv": 2, "V": 3}
    once = upgrade_state(state, NDB.lineage())
    assert upgrade_state(once, NDB.lineage()) == once


def test_a_learner_of_one_s_own_derived_from_nvldb_reads_nvldb_s_old_state_names():
    class Mine(NVLDB):
        pass

    assert Mine.lineage()[0] == "NVLDB"  # the package's classes only: a user's module is not a key
    assert upgrade_state({"U": 1}, Mine.lineage()) == {"self_duel.gram.U": 1}


def test_a_live_save_records_the_version_and_reads_back_bit_for_bit(tmp_path):
    bandit = DuelingBandit.create(dim=3, network={"width": 4}, grad_steps=2, seed=3)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0)).numpy()
    for _ in range(3):
        bandit.observe(x, *bandit.select(x), 1)
    path = str(tmp_path / "s.pt")
    bandit.save(path)
    assert torch.load(path, weights_only=False)["format_version"] == VERSION
    back = DuelingBandit.from_checkpoint(path)
    for k, v in bandit.learner.state_dict().items():
        assert torch.equal(back.learner.state_dict()[k], v), k


def test_an_old_save_of_a_users_nvldb_subclass_gets_the_settings_it_predates_by_lineage(tmp_path):
    """The migrations were keyed by class name: an old live save of a user's NVLDB subclass (no w_reg recorded, from
    before the prior's default) got today's w_reg 0.1 instead of the 0 it ran. They now follow the class's lineage."""
    path = str(tmp_path / "b.pt")
    DuelingBandit.create("tests.extensions.learners.WideNVLDB", dim=3, horizon=20).save(path)
    save = torch.load(path, weights_only=False)
    save["format_version"] = 8
    del save["hparams"]["w_reg"]
    torch.save(save, path)
    assert DuelingBandit.from_checkpoint(path).learner.settings.w_reg == 0.0
    assert upgrade_settings({}, ("WideNVLDB", "NVLDB", "NeuralLearner"), since=8)["w_reg"] == 0.0
