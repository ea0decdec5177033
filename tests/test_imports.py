"""Imports run one way: the maths imports nothing above it, and the machinery no learner and not the loop."""

import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "nvldb_pl")
MATHS = {"links", "network", "backward", "objective", "gram", "selection", "selfduel", "seedwise", "checks"}
MACHINERY = {"host", "devices", "checkpoint", "resume", "shards", "parallel", "graphs", "streams", "messages"}
LEARNERS = {"learner", "neural", "module", "baselines", "registry", "user_network", "live"}
LOOP = {"callbacks", "data", "run", "cli", "grid", "report"}


def package_imports(module: str) -> set[str]:
    """The nvldb_pl modules ``module`` imports (relative ``from . import x`` / ``from .x import``), at any depth."""
    tree = ast.parse(open(os.path.join(PACKAGE, f"{module}.py")).read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("module", sorted(MATHS))
def test_the_maths_imports_only_the_maths(module):
    assert package_imports(module) <= MATHS, package_imports(module) - MATHS


@pytest.mark.parametrize("module", sorted(MACHINERY))
def test_the_machinery_imports_no_learner_and_not_the_loop(module):
    assert not package_imports(module) & (LEARNERS | LOOP)
