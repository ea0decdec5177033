"""Imports run one way: maths → environments → learners → machinery → loop → cli, experiments, live, serve (the
learners import no machinery); and the modules' old names (before the layout by role) still import."""

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "nvldb_pl")
# what each folder may import from the package besides itself
MAY_IMPORT = {
    "maths": set(),
    "environments": {"maths"},
    "learners": {"maths", "environments"},  # the algorithm: no machinery (checkpoints, devices, files)
    "machinery": {"maths", "environments", "learners"},
    "loop": {"maths", "environments", "machinery", "learners"},
    "experiments": {"maths", "environments", "machinery", "learners", "loop"},
    "live": {"maths", "environments", "machinery", "learners", "loop"},  # loop: a fit config's data section only
}


def modules():
    """(folder, dotted name, path) of every module of the package."""
    for folder, _, files in os.walk(PACKAGE):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                yield os.path.relpath(folder, PACKAGE).split(os.sep)[0], rel.removesuffix(".__init__"), path


def package_imports(name: str, path: str) -> set[tuple[str, tuple[str, ...]]]:
    """(absolute module, names) of every nvldb_pl import in the file, at any depth (lazy imports too)."""
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            if node.module:
                found.add((target, tuple(a.name for a in node.names)))
            else:
                found.update((f"{target}.{a.name}", ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nvldb_pl"):
            found.add((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            found.update((a.name, ()) for a in node.names if a.name.startswith("nvldb_pl"))
    return found


def folders_imported(name: str, path: str) -> set[str]:
    out = set()
    for target, names in package_imports(name, path):
        parts = target.split(".")
        if len(parts) == 1 and set(names) <= {"__version__"}:
            continue  # the package's version, from its root (loaded before any of its modules anyway)
        out.add(parts[1] if len(parts) > 1 else "nvldb_pl")
    return out


LAYERED = [(folder, name, path) for folder, name, path in modules() if folder in MAY_IMPORT]


@pytest.mark.parametrize("folder,name,path", LAYERED, ids=[n for _, n, _ in LAYERED])
def test_a_folder_imports_only_the_folders_below_it(folder, name, path):
    above = folders_imported(name, path) - {folder} - MAY_IMPORT[folder] - {"migrations"}  # the table: a leaf
    assert not above, f"{name} imports {sorted(above)}"


def test_the_migration_table_every_layer_reads_imports_nothing_of_the_package():
    path = os.path.join(PACKAGE, "migrations.py")
    assert folders_imported("nvldb_pl.migrations", path) == set()


def test_the_checker_sees_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from ..loop.run import run_experiment\n    from nvldb_pl.learners import NVLDB\n")
    assert folders_imported("nvldb_pl.maths.bad", str(bad)) == {"loop", "learners"}


def test_no_module_is_left_at_the_top_but_the_entry_points():
    top = {f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py")}
    assert top == {"__init__", "migrations", "cli", "reference"}


def _third_party_imports(path: str) -> set[str]:
    """The top-level names of every absolute import outside the package in the file, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


LEARNER_FILES = [(name, path) for folder, name, path in modules() if folder in ("maths", "environments", "learners")]


@pytest.mark.parametrize("name,path", LEARNER_FILES, ids=[n for n, _ in LEARNER_FILES])
def test_the_learners_and_what_they_stand_on_import_no_lightning(name, path):
    """A learner is a plain torch algorithm: Lightning reaches it only through the loop's adapter (LearnerModule);
    the regret metric (environments/regret.py) is torchmetrics', the one Lightning-family package allowed below."""
    assert not _third_party_imports(path) & {"lightning", "pytorch_lightning"}, f"{name} imports Lightning"


def test_the_lightning_check_sees_a_lightning_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from lightning.pytorch.utilities import rank_zero_warn\n")
    assert "lightning" in _third_party_imports(str(bad))


def test_a_learner_runs_with_lightning_unimportable():
    """Built, proposing and learning with ``lightning`` blocked from import: nothing of it is needed."""
    code = (
        "import sys; sys.modules['lightning'] = None; sys.modules['lightning.pytorch'] = None\n"
        "import torch\n"
        "from nvldb_pl.learners.nvldb import NVLDB\n"
        "m = NVLDB(dim=5, arms=4, rounds=5, num_seeds=2, network={'width': 4}, grad_steps=2)\n"
        "m.init_parameters(0, [0, 1]); m.attach_optimizer()\n"
        "x = torch.randn(2, 4, 5); duel = m.propose(x, torch.randn(2, 4, 4), 1)\n"
        "m.learn({**duel, 'contexts': x, 'o': torch.ones(2), 'du': torch.zeros(2)})\n"
        "assert m.t == 1 and 'lightning' not in {k.split('.')[0] for k in sys.modules if sys.modules[k]}\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_live_api_asks_learns_and_saves_with_lightning_unimportable(tmp_path):
    """The live API drives the plain learner as it is: ask, answer, save and load back with ``lightning`` blocked."""
    save = tmp_path / "b.pt"
    code = (
        "import sys; sys.modules['lightning'] = None; sys.modules['lightning.pytorch'] = None\n"
        "import numpy as np\n"
        "from nvldb_pl.live import DuelingBandit\n"
        "b = DuelingBandit.create('NVLDB', dim=5, horizon=6, seed=1, network={'width': 8}, grad_steps=2)\n"
        "x = np.random.default_rng(0).normal(size=(4, 5))\n"
        "for _ in range(3):\n"
        "    i, j = b.select(x); b.observe(x, i, j, 1)\n"
        f"b.save({str(save)!r}); c = DuelingBandit.from_checkpoint({str(save)!r})\n"
        "assert c.select(x) == b.select(x)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
