"""The suite's workers (pytest-xdist, ``-n`` in pyproject.toml's addopts): one torch thread each, so that
two workers on two cores do not oversubscribe them, and a runs directory of their own, so that a run in
one worker does not take a share of the cores from a run in the other (nvldb_pl.machinery.cores) and every
run's thread count is what its test set. A test that is about threads sets its own."""

import os
import tempfile

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault(
        "NVLDB_RUNS_DIR", tempfile.mkdtemp(prefix=f"nvldb_pl-runs-{os.environ['PYTEST_XDIST_WORKER']}-")
    )


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what a run of the suite may leave in the checkout: the suite's own caches and the set-up's virtual environments
ALLOWED = ("__pycache__", ".pytest_cache", ".ruff_cache", ".venv", ".venv-gp", ".whl", ".gl")


def _files_in_checkout() -> set | None:
    """Every file under the checkout that git does not track (ignored ones too), or None outside a git checkout."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", ROOT, "ls-files", "--others", "-z"], capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = {n for n in out.decode(errors="replace").split("\0") if n}
    return {n for n in names if not any(part in ALLOWED or part.endswith(".egg-info") for part in n.split("/"))}


def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller: once for the whole suite
        session.config._files_before = _files_in_checkout()


def pytest_sessionfinish(session, exitstatus):
    """No test writes into the checkout (a run, a database, a report belongs in a temporary folder): a file that was
    not there before the suite fails it, named."""
    before = getattr(session.config, "_files_before", None)
    if before is None:
        return
    new = sorted((_files_in_checkout() or set()) - before)
    if new:
        print(f"\nthe suite wrote into the checkout {ROOT}: {new[:20]}{' ...' if len(new) > 20 else ''}")
        session.exitstatus = 1
