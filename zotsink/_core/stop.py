"""Stopping on a signal without losing what was read.

A job is told to stop by SIGTERM (``scancel``, walltime), SIGINT (Ctrl-C), SIGHUP, or
Slurm's warning signals SIGUSR1/SIGUSR2 (``--signal=B:USR2@600``). The handler only notes
the signal and wakes a ``select``/``poll`` through a wakeup pipe; the loop that was reading
then writes (or spills) everything it holds. Nothing is raised from the handler, so no data
can be dropped between a ``read`` and the line that keeps it. The stopper lives on the
ground floor because the outlet (:mod:`zotsink._core.outlet`) must see it: a batch that is
waiting for the lock when the signal comes waits at most :data:`STOP_LOCK_TIMEOUT` more,
then is spilled.

The Stopper whose block runs is known to the whole process (:func:`current_stopper`): a wait
deep in a call that was given no stopper (a question to the batch scheduler while a run
judges another run's task) ends at a stop all the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

try:
    # The C module behind ``signal``: ``import signal`` turns its constants into enums, a
    # cost every one-record run would pay, and these handlers need only the numbers.
    import _signal as signal
except ImportError:  # pragma: no cover - a Python without it
    import signal  # type: ignore[no-redef]

__all__ = [
    "STOP_LOCK_TIMEOUT",
    "STOP_SIGNALS",
    "Stopper",
    "current_stopper",
    "end_at_stop_signals",
    "leave_stops_to_parent",
]

#: Signals that stop reading: cancel, Ctrl-C, hang-up, and Slurm's warning signals.
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
#: Longest wait for the lock once a stop signal came: then the rest is spilled.
STOP_LOCK_TIMEOUT: Final = 5.0


class Stopper:
    """Catches the stop signals and wakes the reader; restores the old handlers after."""

    def __init__(self, signals: Sequence[int] = STOP_SIGNALS) -> None:
        self.signum: int | None = None  # the first stop signal
        self.count = 0  # stop signals caught (a run ends its grace at the second)
        self._signals = signals
        self._old: dict[int, object] = {}
        self._rfd = self._wfd = -1
        self._old_wakeup = -1

    def _handler(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> Stopper:
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._wfd, False)
        for s in self._signals:
            self._old[s] = signal.signal(s, self._handler)
        self._old_wakeup = signal.set_wakeup_fd(self._wfd, warn_on_full_buffer=False)
        _entered.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _entered.remove(self)
        signal.set_wakeup_fd(self._old_wakeup)
        for s, h in self._old.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        os.close(self._rfd)
        os.close(self._wfd)

    @property
    def wakeup_fd(self) -> int:
        return self._rfd


#: The Stoppers whose blocks run, the innermost last (see :func:`current_stopper`).
_entered: list[Stopper] = []


def current_stopper() -> Stopper | None:
    """The innermost :class:`Stopper` whose block runs in this process; None outside any."""
    return _entered[-1] if _entered else None


@contextmanager
def end_at_stop_signals() -> Iterator[None]:
    """For a command that only reads (``status``), instead of a :class:`Stopper`: a stop
    signal (but SIGINT, which stays KeyboardInterrupt) ends it at once with exit 128+N,
    through ``SystemExit``: a reader has nothing to save, and its exit handlers run (a
    scheduler command still out is killed with its process group), where the signal's
    default action would end the process without them. Usable as a decorator."""

    def end(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, end) for s in STOP_SIGNALS if s != signal.SIGINT}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)  # type: ignore[arg-type]


def leave_stops_to_parent() -> None:
    """In a process whose parent handles the stop signals (a ``run`` worker): ignore them,
    but SIGTERM, by which the parent ends it."""
    for signum in STOP_SIGNALS:
        if signum != signal.SIGTERM:
            signal.signal(signum, signal.SIG_IGN)
