"""The learners take the answers in a thread of their own, so that a reply waits for no learning.

:class:`LearningQueue` holds the answers committed and not yet learned, in the order they were committed, and one
thread that hands them, one at a time and in that order, to ``learn``. ``behind`` says how many wait; ``drain``
waits until none does (an undo, a stop). An exception other than the learner's own refusal (which ``learn`` records)
stops the thread and is kept in ``failed``: the answers stay in the database and a restart learns them.
"""

from __future__ import annotations

import collections
import sys
import threading
from typing import Callable, Optional


class LearningQueue:
    def __init__(self, learn: Callable[[tuple], None]):
        self.learn = learn
        self.jobs: collections.deque = collections.deque()
        self.changed = threading.Condition()
        self.stopping = False
        self.failed: Optional[str] = None
        self.thread = threading.Thread(target=self._run, name="nvldb_pl-learner", daemon=True)
        self.thread.start()

    @property
    def behind(self) -> int:
        """Answers committed and not yet learned."""
        return len(self.jobs)

    def put(self, job: tuple) -> None:
        """An answer to learn, after those put before it (call it in the order the answers were committed)."""
        with self.changed:
            self.jobs.append(job)
            self.changed.notify_all()

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until every answer put is learned (or the thread failed); False if ``timeout`` passed first."""
        with self.changed:
            return self.changed.wait_for(lambda: not self.jobs or self.failed is not None, timeout)

    def wait_below(self, most: int, timeout: Optional[float] = None) -> bool:
        """Wait until at most ``most`` answers wait (or the thread failed): how a reply holds people who answer
        faster than the learner learns, so that every answer is learned within about ``most`` answers' time."""
        with self.changed:
            return self.changed.wait_for(lambda: len(self.jobs) <= most or self.failed is not None, timeout)

    def stop(self) -> None:
        """Learn what waits, then end the thread."""
        self.drain()
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
        self.thread.join()

    def _run(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.jobs or self.stopping)
                if not self.jobs:
                    return
                job = self.jobs[0]
            try:
                self.learn(job)
            except Exception as err:  # not the learner's refusal (learn records those): stop, the answers kept
                with self.changed:
                    self.failed = f"{type(err).__name__}: {err}"
                    self.changed.notify_all()
                print(f"error: the learner stopped taking answers ({self.failed}); they are kept", file=sys.stderr)
                return
            with self.changed:
                self.jobs.popleft()
                self.changed.notify_all()
