"""Group commit: attempts that end close together share three locked appends.

What finishes within the commit window of the first attempt to finish is committed
together: the records of all those attempts to OUT, their log lines to the log, then their
``end`` rows (with the ``start`` rows of the tasks claimed next) to the ledger. An ``end``
row is written only after the records it claims are in OUT (or in a side file beside it),
so nothing is ``ok`` before its records are on disk.

When a commit is due is the run's one size/age rule, :class:`~zotsink._core.batch.Batch`:
the attempts' held records wait outside the batch (:meth:`Batch.hold`), and the window is
its age limit. :class:`CommitGroup` is that decision, without I/O; the appends are
:func:`zotsink._run.output.append_held` and the ledger's.
"""

from __future__ import annotations

import math
from typing import Any, Final

from .._core.batch import Batch

__all__ = ["BEGIN_WITHIN", "COMMIT_WINDOW", "MAX_COMMIT_WINDOW", "BeginRows", "CommitGroup"]

#: Seconds a finished task waits for others to share its commit. A locked, fsynced append
#: on a shared filesystem costs milliseconds, often tens of them: within this window many
#: quick tasks share three appends, while a task of seconds or more is delayed by a small
#: part of its own time, and a crash loses at most this long of finished work (which the
#: next run does again: nothing of it is claimed).
COMMIT_WINDOW: Final = 0.25
#: The window's bound for tasks of a second or more: the window is twice the mean time of a
#: task, within COMMIT_WINDOW and this, so that a few of them share a commit too.
MAX_COMMIT_WINDOW: Final = 2.0
#: Seconds a begin row may wait for the next append (a claim's, a commit's) before it is
#: written on its own: a task that ends sooner needs none (its end row says it all), and a
#: task that outlives its run (SIGKILLed meanwhile) is found by the mark in its
#: environment until then.
BEGIN_WITHIN: Final = 1.0


class CommitGroup:
    """The attempts that ended and wait for their commit; when that commit is due."""

    def __init__(self, max_bytes: float) -> None:
        # due by size: OUT's batch size; by age: the window
        self._batch = Batch(max_bytes, COMMIT_WINDOW)
        self.attempts: list[Any] = []
        self._size = 0
        self.mean_task: float | None = None  # seconds a task takes, recent ones weigh most

    @property
    def window(self) -> float:
        """How long the first attempt to end waits for others."""
        return self._batch.max_age

    def add(self, attempt: Any, now: float, took: float, size: int) -> None:
        """An attempt ended at ``now`` after ``took`` seconds of its own, holding ``size``
        bytes of records: it waits for the group's commit."""
        self.mean_task = took if self.mean_task is None else 0.8 * self.mean_task + 0.2 * took
        self._batch.age(min(MAX_COMMIT_WINDOW, max(COMMIT_WINDOW, 2 * self.mean_task)))
        self.attempts.append(attempt)
        # every attempt waits with its end row to write: a newline at least, so that one
        # without records starts the window too
        self._size += size + 1
        self._batch.hold(self._size, now)

    def due(self, now: float, *, alone: bool, hurry: bool) -> bool:
        """Whether the group's commit is due: by size or age, when nothing else runs
        (``alone``: none will end to share it) or at a stop (``hurry``)."""
        return bool(self.attempts) and (hurry or alone or self._batch.due(now))

    def wait(self, now: float) -> float | None:
        """Seconds until the commit is due by age; None when no attempt waits."""
        return self._batch.wait(now)

    def take(self) -> list[Any]:
        """The attempts of the commit now due; the group is then empty."""
        attempts, self.attempts, self._size = self.attempts, [], 0
        self._batch.hold(0)
        return attempts


class BeginRows:
    """The begin rows waiting to go out, and when they are due on their own (see
    :data:`BEGIN_WITHIN`): a row per attempt that began, by key: its process (a call's:
    its worker's) and since when it waits."""

    def __init__(self) -> None:
        self._waiting: dict[Any, tuple[int, str, float]] = {}
        self._written = -math.inf  # when begin rows last went out

    def add(self, key: Any, pid: int, start: str, now: float) -> None:
        self._waiting[key] = (pid, start, now)

    def drop(self, key: Any) -> None:
        """The attempt's end row goes with or before its begin row: the begin is no news."""
        self._waiting.pop(key, None)

    def _oldest(self) -> float | None:
        # the attempts live at once are few (--jobs)
        return min((since for _p, _s, since in self._waiting.values()), default=None)

    def due(self, now: float) -> bool:
        """Whether rows wait that are due on their own: the oldest a window old, and none
        written by themselves for a window (a run whose tasks outlast the window, as any
        does on a crowded node, writes them at most once a window)."""
        oldest = self._oldest()
        if oldest is None or now - oldest < BEGIN_WITHIN:
            return False
        return now - self._written >= BEGIN_WITHIN

    def next_due(self) -> float | None:
        """When rows are due on their own next (None: none waits)."""
        oldest = self._oldest()
        return None if oldest is None else max(oldest, self._written) + BEGIN_WITHIN

    def take(self, now: float) -> list[tuple[Any, int, str]]:
        """The rows that go out with an append now: those half a window old or more (a
        task that ends sooner needs none, and most do; the half: those that fall due before
        the next window go along)."""
        old = now - BEGIN_WITHIN / 2
        due = [(k, pid, start) for k, (pid, start, since) in self._waiting.items() if since <= old]
        for k, _pid, _start in due:
            del self._waiting[k]
        if due:
            self._written = now
        return due
