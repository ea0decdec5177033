"""scripts/<name>.py loaded as a module (the scripts are not a package), for the tests that call a script's
functions in their own process."""

import importlib.util
import os

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "..", "scripts")


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
