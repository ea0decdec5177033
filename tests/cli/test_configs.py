"""The shipped configs: each literal config is its default twin with the literal reading's settings."""

import glob
import os

import pytest
import yaml

from nvldb_pl.learners.nvldb import NVLDB
from nvldb_pl.learners.registry import LITERAL_OF

LITERAL = LITERAL_OF["NVLDB"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LITERAL_CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "literal", "*.yaml")))


def test_every_paper_task_has_a_literal_config():
    names = {os.path.basename(p) for p in LITERAL_CONFIGS}
    assert names == {f"{t}.yaml" for t in ("cos", "square", "quadratic", "statlog", "magic", "covertype")}


@pytest.mark.parametrize("path", LITERAL_CONFIGS, ids=os.path.basename)
def test_literal_config_is_its_twin_with_the_literal_settings(path):
    literal = yaml.safe_load(open(path))
    default = yaml.safe_load(open(os.path.join(ROOT, "configs", os.path.basename(path))))
    assert literal["data"] == default["data"] and literal["seed_everything"] == default["seed_everything"]
    assert literal["model"] == {**default["model"], **LITERAL}
    assert literal["trainer"]["default_root_dir"] != default["trainer"]["default_root_dir"]  # runs kept apart


def test_default_configs_write_out_the_learners_defaults():
    """Every task's config, synthetic and UCI alike, spells the learner's defaults out (one rule for every task:
    the deep self-duel test lets the UCI tasks' best duel, the best arm's self-duel, be played)."""
    defaults = NVLDB(num_seeds=1).hparams  # the values in force (None resolved)
    for task in ("cos", "square", "quadratic", "statlog", "magic", "covertype"):
        model = yaml.safe_load(open(os.path.join(ROOT, "configs", f"{task}.yaml")))["model"]
        for key, literal in LITERAL.items():  # (a group by the fields the literal reading sets)
            given, default = model[key], defaults[key]
            if isinstance(literal, dict):
                given, default = {k: given[k] for k in literal}, {k: default[k] for k in literal}
            assert given == default, (task, key)
        assert "self_duel" not in model and defaults["self_duel"]["test"] == "deep_diag"
