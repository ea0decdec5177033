"""Where a class of one's own is found: the folder the command runs in, for the modules the command names.

A config may name a module of one's own (``model.network.module: my_net.Net``, a ``class_path``, ``--set network.module=...``);
the package's commands (``nvldb``, ``nvldb-reproduce``, ``python scripts/main.py``, ...) find it in the folder they
run from, after the installed packages (a file there named as one of them does not shadow it). Only the top-level
names the command's arguments and ``--config`` files name as dotted paths are looked for there: a stray file named
as a module the frameworks probe for (``torch_xla.py``) is never imported. A module found there is imported with its
failures named: one that raises, or calls ``sys.exit``, is an ImportError naming the module and its file. The library
itself (:mod:`nvldb_pl.live`, :func:`nvldb_pl.loop.run.run_experiment`) leaves imports as the caller has them.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import re
import sys
from typing import Optional, Sequence

# a dotted path: a module's name, then at least one attribute (my_net.Net, pkg.mod.Class)
_DOTTED = re.compile(r"(?<![\w./\\-])([A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)+")


def named_modules(argv: Sequence[str]) -> set[str]:
    """The top-level module names that ``argv`` and the files after its ``--config`` name as dotted paths."""
    texts, args = list(argv), list(argv)
    for i, a in enumerate(args):
        path = args[i + 1] if a == "--config" and i + 1 < len(args) else a[9:] if a.startswith("--config=") else None
        if path and os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as fh:
                    texts.append(fh.read())
            except (OSError, UnicodeDecodeError):
                pass  # the config's own reader names the file
    return {m.group(1) for text in texts for m in _DOTTED.finditer(str(text))}


class OwnModules(importlib.abc.MetaPathFinder):
    """After every other finder: a top-level module of ``names`` from ``folder`` (``name.py`` or a package)."""

    def __init__(self, folder: str):
        self.folder, self.names = folder, set()

    def find_spec(self, fullname, path=None, target=None):
        if path is not None or fullname not in self.names:
            return None
        for file in (os.path.join(self.folder, fullname, "__init__.py"), os.path.join(self.folder, fullname + ".py")):
            if os.path.isfile(file):
                spec = importlib.util.spec_from_file_location(
                    fullname,
                    file,
                    submodule_search_locations=[os.path.dirname(file)] if file.endswith("__init__.py") else None,
                )
                spec.loader = NamedFailures(spec.loader, fullname, file)
                return spec
        return None


class NamedFailures(importlib.abc.Loader):
    """A module's loader whose failures name the module and its file (a ``sys.exit`` on import too)."""

    def __init__(self, loader, name: str, file: str):
        self.loader, self.name, self.file = loader, name, file

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        try:
            self.loader.exec_module(module)
        except SystemExit as stop:
            raise ImportError(f"{self.name} ({self.file}): importing it called sys.exit({stop.code})") from None
        except Exception as err:
            raise ImportError(f"{self.name} ({self.file}): {type(err).__name__}: {err}") from None


_finder: Optional[OwnModules] = None


def find_own_modules_here(argv: Optional[Sequence[str]] = None) -> None:
    """Look in the working folder for the top-level modules ``argv`` (default: ``sys.argv``) names (once installed,
    later calls add names); ``sys.path`` is left as it is."""
    global _finder
    here = os.getcwd()
    if _finder is None or _finder not in sys.meta_path or _finder.folder != here:
        _finder = OwnModules(here)
        sys.meta_path.append(_finder)
    _finder.names |= named_modules(sys.argv[1:] if argv is None else argv)
