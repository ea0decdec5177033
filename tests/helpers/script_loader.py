"""scripts/<name>.py (or lab/diagnostics/<name>.py for ``diagnostics/<name>``) loaded as a module (the scripts are
not a package), for the tests that call a script's functions in their own process."""

import importlib.util
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SCRIPTS = os.path.join(ROOT, "scripts")


def script_path(name: str) -> str:
    """The file of script ``name``: ``diagnostics/<x>`` in lab/diagnostics, any other in scripts/."""
    if name.startswith("diagnostics/"):
        return os.path.join(ROOT, "lab", name)
    return os.path.join(SCRIPTS, name)


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, script_path(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
