"""Stopping on a signal without losing what was read.

A job is told to stop by SIGTERM (``scancel``, walltime), SIGINT (Ctrl-C), SIGHUP, or
Slurm's warning signals SIGUSR1/SIGUSR2 (``--signal=B:USR2@600``). The handler only notes
the signal and wakes a ``select``/``poll`` through a wakeup pipe; the loop that was reading
then writes (or spills) everything it holds. Nothing is raised from the handler, so no data
can be dropped between a ``read`` and the line that keeps it. A batch that is waiting for
the lock when the signal comes waits at most :data:`STOP_LOCK_TIMEOUT` more, then is spilled.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Final

from ._core import sidefiles
from ._core.writer import Writer
from .errors import HeaderMismatch, LockError, LockTimeout, WriteError

try:
    # The C module behind ``signal``: ``import signal`` turns its constants into enums,
    # 0.6 ms of every one-record run, and these handlers need only the numbers.
    import _signal as signal
except ImportError:  # pragma: no cover - a Python without it
    import signal  # type: ignore[no-redef]

__all__ = ["STOP_LOCK_TIMEOUT", "STOP_SIGNALS", "Stopper", "append_until_stopped"]

#: Signals that stop reading: cancel, Ctrl-C, hang-up, and Slurm's warning signals.
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
#: Longest wait for the lock once a stop signal came: then the rest is spilled.
STOP_LOCK_TIMEOUT: Final = 5.0
#: While a batch waits for the lock, how often the wait looks for a stop signal (seconds).
_STOP_CHECK: Final = 1.0


class Stopper:
    """Catches the stop signals and wakes the reader; restores the old handlers after."""

    def __init__(self, signals: Sequence[int] = STOP_SIGNALS) -> None:
        self.signum: int | None = None
        self._signals = signals
        self._old: dict[int, object] = {}
        self._rfd = self._wfd = -1
        self._old_wakeup = -1

    def _handler(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> Stopper:
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._wfd, False)
        for s in self._signals:
            self._old[s] = signal.signal(s, self._handler)
        self._old_wakeup = signal.set_wakeup_fd(self._wfd, warn_on_full_buffer=False)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.set_wakeup_fd(self._old_wakeup)
        for s, h in self._old.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        os.close(self._rfd)
        os.close(self._wfd)

    @property
    def wakeup_fd(self) -> int:
        return self._rfd


def append_until_stopped(
    writer: Writer, data: bytes | memoryview, timeout: float, stopper: Stopper | None
) -> None:
    """Append ``data`` waiting up to ``timeout`` for the lock, cut short by a stop.

    A batch may be waiting for a lock held elsewhere when the walltime signal comes, and
    the scheduler's SIGKILL follows within seconds: so the wait runs in slices that look at
    the stopper, and ends :data:`STOP_LOCK_TIMEOUT` after a stop was seen. A slice that
    merely timed out has lost nothing; only the end of the whole wait spills (or, on a
    header mismatch, sends the batch to OUT.rejects), through
    :func:`~zotsink._core.sidefiles.append_or_save`. ``data`` may be a view of the
    stream's read buffer: it is copied only when it has to be saved elsewhere.
    """
    start = now = time.monotonic()
    deadline = start + timeout
    slices = 0
    while True:
        if stopper is not None and stopper.signum is not None:
            deadline = min(deadline, now + STOP_LOCK_TIMEOUT)
            stopper = None  # seen: from now on one last wait up to the deadline
        left = max(0.0, deadline - now)
        if left <= _STOP_CHECK:
            break
        try:
            writer.append(data, timeout=_STOP_CHECK)
            return
        except LockTimeout:
            writer.lock_wait += time.monotonic() - now
            slices += 1
            now = time.monotonic()
        except (LockError, WriteError) as e:
            sidefiles.save(writer, e, bytes(data))
            raise
        except HeaderMismatch:
            break  # the last call below sends the batch to OUT.rejects and says so
    try:
        sidefiles.append_or_save(writer, bytes(data), left)
    except LockTimeout as e:
        if not slices:
            raise
        # the message gives the whole wait, not the last slice's
        waited = round(time.monotonic() - start, 1)
        err = LockTimeout(
            f"{writer.path}: the lock was still held by another writer after {waited:g} s",
            path=writer.path,
            spill_path=e.spill_path,
        )
        err.message += f"; the records were saved to {e.spill_path}"
        raise err from None
