"""A consistent copy of a file: its size under a shared lock.

Writers only ever append whole batches under the exclusive lock (and ``verify --repair``
replaces the inode instead of changing it), so the first ``size`` bytes seen under the
shared lock are a consistent copy that stays valid after the lock is released. Holding the
lock only for the fstat keeps a slow reader (``zotsink cat out | less``) from stalling
every writer. OUT, the ledger and the pack index are all read this way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..errors import InputError
from .backoff import wait_for_lock
from .fileio import file_kind, open_regular, pread_chunks
from .locking import Locker, open_locked
from .stop import Stopper

__all__ = ["iter_snapshot", "snapshot"]


def _open_for_reading(p: str) -> int:
    try:
        fd, st = open_regular(p)
    except FileNotFoundError:
        raise InputError(f"{p} does not exist", path=p) from None
    except IsADirectoryError:
        raise InputError(f"{p} is a directory, not a zotsink output", path=p) from None
    if fd < 0:  # open(2) of a directory or a FIFO for reading succeeds
        raise InputError(f"{p} is {file_kind(st.st_mode)}, not a zotsink output", path=p)
    return fd


def snapshot(
    path: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    stopper: Stopper | None = None,
) -> tuple[int, int]:
    """Open OUT and read its size under a shared lock: ``(fd, size)``; the caller closes fd.

    With ``stopper`` (a command that catches stop signals, such as ``run`` reading its
    ledger) the wait for the lock ends at a stop signal, with :class:`LockTimeout` naming it
    (:func:`.backoff.wait_for_lock`): anyone who can read the file can hold its lock.
    """
    p = os.fspath(path)
    locker = Locker(lock, p)
    # A reader has nothing to save at a stop: its wait ends with the signal (after_stop=0).
    (fd, _dev, _ino), st, _waited = wait_for_lock(
        lambda t: open_locked(p, lambda: _open_for_reading(p), locker, t, shared=True),
        timeout,
        path=p,
        stopper=stopper,
        after_stop=0.0,
    )
    try:
        locker.release()
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def iter_snapshot(fd: int, size: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The first ``size`` bytes of ``fd`` in chunks; closes ``fd`` at the end."""
    try:
        yield from pread_chunks(fd, size, chunk)
    finally:
        os.close(fd)
