"""Group commit: attempts that end close together share three locked appends.

What finishes within the commit window of the first attempt to finish is committed
together: the records of all those attempts to OUT, their log lines to the log, then their
``end`` rows (with the ``start`` rows of the tasks claimed next) to the ledger. An ``end``
row is written only after the records it claims are in OUT (or in a side file beside it),
so nothing is ``ok`` before its records are on disk.

When a commit is due is the run's one size/age rule, :class:`~zotsink._core.batch.Batch`:
the attempts' held records wait outside the batch (:meth:`Batch.hold`), and the window is
its age limit. :class:`CommitGroup` is that decision, without I/O; :func:`append_held` is
the first of the three appends.
"""

from __future__ import annotations

from typing import Final

from .._core.batch import Batch
from .._core.header import existing_header
from .._core.outlet import Outlet
from .attempt import Attempt

__all__ = ["COMMIT_WINDOW", "MAX_COMMIT_WINDOW", "CommitGroup", "append_held"]

#: Seconds a finished task waits for others to share its commit. A locked, fsynced append
#: on a shared filesystem costs milliseconds, often tens of them: within this window many
#: quick tasks share three appends, while a task of seconds or more is delayed by a small
#: part of its own time, and a crash loses at most this long of finished work (which the
#: next run does again: nothing of it is claimed).
COMMIT_WINDOW: Final = 0.25
#: The window's bound for tasks of a second or more: the window is twice the mean time of a
#: task, within COMMIT_WINDOW and this, so that a few of them share a commit too.
MAX_COMMIT_WINDOW: Final = 2.0


class CommitGroup:
    """The attempts that ended and wait for their commit; when that commit is due."""

    def __init__(self, max_bytes: float) -> None:
        # due by size: OUT's batch size; by age: the window
        self._batch = Batch(max_bytes, COMMIT_WINDOW)
        self.attempts: list[Attempt] = []
        self._size = 0
        self.mean_task: float | None = None  # seconds a task takes, recent ones weigh most

    @property
    def window(self) -> float:
        """How long the first attempt to end waits for others."""
        return self._batch.max_age

    def add(self, attempt: Attempt, now: float) -> None:
        """An attempt ended at ``now``: it waits for the group's commit."""
        took = now - attempt.started
        self.mean_task = took if self.mean_task is None else 0.8 * self.mean_task + 0.2 * took
        self._batch.max_age = min(MAX_COMMIT_WINDOW, max(COMMIT_WINDOW, 2 * self.mean_task))
        self.attempts.append(attempt)
        # every attempt waits with its end row to write: a newline at least, so that one
        # without records starts the window too
        self._size += attempt.size + 1
        self._batch.hold(self._size, now)

    def due(self, now: float, *, alone: bool, hurry: bool) -> bool:
        """Whether the group's commit is due: by size or age, when nothing else runs
        (``alone``: none will end to share it) or at a stop (``hurry``)."""
        return bool(self.attempts) and (hurry or alone or self._batch.due(now))

    def wait(self, now: float) -> float | None:
        """Seconds until the commit is due by age; None when no attempt waits."""
        return self._batch.wait(now)

    def take(self) -> list[Attempt]:
        """The attempts of the commit now due; the group is then empty."""
        attempts, self.attempts, self._size = self.attempts, [], 0
        self._batch.hold(0)
        return attempts


def append_held(out: Outlet, ended: list[Attempt]) -> dict[Attempt, int]:
    """Each attempt's records, in one piece each, in as few locked appends as can be: one
    for all whose records are in memory. Where each piece begins in OUT; an attempt whose
    piece could not be appended is left out, with a note that says where it is.

    The records go before the rows that claim them: a crash between the two leaves lines
    no ok row claims, which readers leave out and the next run writes again."""
    places: dict[Attempt, int] = {}
    _one_header(out, ended)
    # each piece joined once: the one block of all those held in memory, then each of the
    # pieces kept in a temporary file on its own
    pieces = {a: a.held.in_memory() for a in ended if a.held.size}
    small = [a for a, data in pieces.items() if data is not None]
    groups = [small] if small else []
    groups += [[a] for a, data in pieces.items() if data is None]
    for group in groups:
        if group is small:
            block = b"".join(pieces[a] or b"" for a in group)
            err = out.write(block, sum(a.held.count for a in group))
        else:
            err = out.write(group[0].held, group[0].held.count)
        if err is not None:
            where = getattr(err, "spill_path", None) or "a side file"
            for a in group:
                a.notes.append(f"its records could not be appended to OUT; they are in {where}")
            continue
        at = out.writer.last_at  # where the block just appended begins
        for a in group:
            places[a] = at
            a.out_ino = out.writer.last_ino  # which file: OUT may be renamed later
            at += a.held.size
    for a in ended:
        a.held.close()
    return places


def _one_header(out: Outlet, ended: list[Attempt]) -> None:
    """Into an OUT that was new when the run began (no ``--columns``), each task's first
    line was kept as the header it would write: only the piece that lands first in OUT
    keeps it, the others' equal first lines are dropped and counted, before any piece's
    place is taken."""
    kept = [a for a in ended if a.encoder.kept_header is not None and a.held.size]
    if not kept:
        return
    kept.sort(key=lambda a: a.held.in_memory() is None)  # the order append_held lands them
    first = existing_header(out.writer.path)  # a first line, once there, never changes
    for a in kept:
        if first is None:
            first = a.encoder.kept_header  # lands first: OUT's header from now on
        elif a.encoder.kept_header == first and a.held.drop_first(first):
            a.records -= 1
            out.repeated_headers += 1
