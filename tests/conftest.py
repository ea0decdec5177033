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
