"""One Ray cluster at a time on this machine, whichever worker of the suite starts it: `ray stop` (a cluster test's
clean-up) ends every cluster here, so a test that starts one holds this lock meanwhile."""

import contextlib
import fcntl
import os
import tempfile


@contextlib.contextmanager
def one_ray_cluster():
    with open(os.path.join(tempfile.gettempdir(), "nvldb_pl-ray-tests.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
