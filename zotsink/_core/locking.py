"""Lock kinds behind one small interface, and the automatic fallback between them.

``flock``    flock(2) on OUT: what flock(1), Perl ``flock``, Python ``fcntl.flock`` use.
``fcntl``    a POSIX record lock on all of OUT: what ``lockf`` users take. On local Linux
             filesystems it does not see flock locks; on NFS and GlusterFS the two conflict.
``lockfile`` an ``OUT.lock`` marker (filelock's soft lock: owner pid and host, a dead owner
             on this host is broken at once, a foreign one after a lease) for mounts where
             kernel locks do not work at all.

Each kind makes non-blocking attempts only; the waiting lives in
:mod:`zotsink._core.backoff`.

The lock calls come from ``fcntl`` directly rather than portalocker: importing portalocker
costs much of a one-record CLI run's start (most of it package metadata; see
BENCHMARKS.md), and it would add nothing but a wrapper around the same two calls.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import warnings
from collections.abc import Callable
from typing import Any, Final, Protocol

from ..errors import LockError, LockTimeout, UsageError, WriteError, ZotsinkWarning
from .backoff import STALE_HANDLE, pause, retry_until

__all__ = [
    "LOCK_KINDS",
    "UNSUPPORTED_ERRNOS",
    "FcntlLock",
    "FlockLock",
    "Held",
    "Lock",
    "Locker",
    "LockfileLock",
    "make_lock",
    "open_locked",
]

#: Names accepted by ``--lock``; ``auto`` tries them in this order.
LOCK_KINDS: Final = ("auto", "flock", "fcntl", "lockfile")
#: errnos that mean "this filesystem has no such lock" (and so allow falling back).
UNSUPPORTED_ERRNOS: Final = frozenset({errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP})
#: errnos of a non-blocking attempt that found the lock held.
_BUSY: Final = frozenset({errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES})
#: errnos of an attempt that failed in passing: tried again in the back-off, like a busy
#: lock. MooseFS refuses flock with ECANCELED hundreds of times in 20,000 appends when OUT
#: is opened anew for each one, and the next attempt works; EINTR is a signal in the call.
_TRANSIENT: Final = frozenset({errno.ECANCELED, errno.EINTR})
_EX_NB: Final = fcntl.LOCK_EX | fcntl.LOCK_NB
_SH_NB: Final = fcntl.LOCK_SH | fcntl.LOCK_NB
#: How often a file may be found replaced while zotsink tries to lock it before giving up.
MAX_REOPENS: Final = 100
#: Age in seconds after which a lockfile marker from another host is taken as abandoned.
LOCKFILE_LEASE: Final = float(os.environ.get("ZOTSINK_LOCKFILE_LEASE", "300"))


class Unsupported(OSError):
    """Raised by a lock kind when the filesystem does not support it."""


class Lock(Protocol):
    """A lock on one OUT: non-blocking attempts and a release."""

    kind: str

    def try_acquire(self, shared: bool = False) -> bool:
        """Take the lock if free; False when another holder has it."""
        ...

    def release(self) -> None: ...


def _attempt(call: Any, fd: int, op: int, kind: str) -> bool:
    try:
        call(fd, op)
    except OSError as e:
        return _refused(e, kind)
    return True


def _refused(e: OSError, kind: str) -> bool:
    """A failed lock attempt: False when the lock is busy (or the call was interrupted),
    :class:`Unsupported` when the filesystem has no such locks, else the error itself."""
    if e.errno in _BUSY or e.errno in _TRANSIENT:
        return False
    if e.errno in UNSUPPORTED_ERRNOS:
        raise Unsupported(e.errno, f"{kind} locks: {os.strerror(e.errno)}") from e
    raise e


class FlockLock:
    """flock(2) on an open descriptor of OUT."""

    kind = "flock"

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def try_acquire(self, shared: bool = False) -> bool:
        # flock called here, not through _attempt: the writer's steady state takes this
        # path once per record, and a call less shows in append_record's rate
        try:
            fcntl.flock(self.fd, _SH_NB if shared else _EX_NB)
        except OSError as e:
            return _refused(e, self.kind)
        return True

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)


class FcntlLock:
    """A POSIX record lock on the whole of OUT (``fcntl.lockf``).

    POSIX locks belong to the process and vanish when it closes ANY descriptor of the file,
    so the writer never opens a second descriptor of OUT while holding one.
    """

    kind = "fcntl"

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def try_acquire(self, shared: bool = False) -> bool:
        op = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        return _attempt(fcntl.lockf, self.fd, op, self.kind)

    def release(self) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_UN)


class LockfileLock:
    """An ``OUT.lock`` marker file, for filesystems without working kernel locks.

    Always exclusive (a marker cannot be shared). filelock's soft lock records pid and host;
    a marker whose owner died on this host is broken at once, one from another host only
    once it is older than :data:`LOCKFILE_LEASE` seconds.
    """

    kind = "lockfile"

    def __init__(self, path: str, lease: float = LOCKFILE_LEASE) -> None:
        import filelock  # only this kind needs it, and its import slows every start

        with warnings.catch_warnings():
            # The lease is deliberate: zotsink holds the lock for milliseconds, so a marker
            # minutes old is abandoned, and a stuck foreign marker must not stop a cluster.
            warnings.simplefilter("ignore")
            self._lock = filelock.SoftFileLock(path + ".lock", timeout=0, lifetime=lease)
        self._timeout = filelock.Timeout
        self.marker = path + ".lock"

    def try_acquire(self, shared: bool = False) -> bool:
        try:
            self._lock.acquire(timeout=0)
        except self._timeout:
            return False
        return True

    def release(self) -> None:
        self._lock.release()


def make_lock(kind: str, fd: int, path: str) -> Lock:
    """A lock of ``kind`` (not ``auto``) for OUT open as ``fd`` at ``path``."""
    if kind == "flock":
        return FlockLock(fd)
    if kind == "fcntl":
        return FcntlLock(fd)
    if kind == "lockfile":
        return LockfileLock(path)
    raise UsageError(f"unknown lock kind {kind!r}: use one of {', '.join(LOCK_KINDS)}")


_FALLBACK: Final = ("flock", "fcntl", "lockfile")


class Locker:
    """Locks one OUT again and again, settling ``auto`` on the first kind that works.

    ``auto`` starts with flock and moves on to fcntl, then lockfile, only when the
    filesystem answers ENOSYS, ENOLCK or EOPNOTSUPP, with a :class:`ZotsinkWarning`.
    """

    def __init__(self, kind: str, path: str) -> None:
        if kind not in LOCK_KINDS:
            raise UsageError(f"unknown lock kind {kind!r}: use one of {', '.join(LOCK_KINDS)}")
        self.requested = kind
        self.path = path
        self.kind = "flock" if kind == "auto" else kind
        self._lock: Lock | None = None
        self._fd = -1

    def acquire(self, fd: int, timeout: float, shared: bool = False) -> float:
        """Take the lock on OUT open as ``fd``, waiting with backoff; the wait in seconds.

        Raises :class:`LockTimeout` past ``timeout``, :class:`LockError` when no kind works.
        """
        while True:
            if self._lock is None or self._fd != fd:
                self._lock = make_lock(self.kind, fd, self.path)
                self._fd = fd
            lock = self._lock
            try:
                if lock.try_acquire(shared):  # the common case: no contention, no loop
                    return 0.0
                ok, _tries, waited = retry_until(lambda lk=lock: lk.try_acquire(shared), timeout)
            except Unsupported as e:
                self._fall_back(e)
                continue
            except OSError as e:
                raise LockError(
                    f"{self.path}: cannot take a {self.kind} lock: {e.strerror or e}",
                    path=self.path,
                    errno=e.errno,
                ) from e
            if not ok:
                raise LockTimeout(
                    f"{self.path}: the lock was still held by another writer after {timeout:g} s",
                    path=self.path,
                )
            return waited

    def try_now(self, fd: int) -> bool:
        """One exclusive attempt on ``fd``, the descriptor the lock was last taken on, without
        waiting: a writer's steady state. False when the lock is busy or anything is unusual
        (another descriptor, an error): :meth:`acquire` then takes the whole way."""
        lock = self._lock
        if lock is None or self._fd != fd:
            return False
        try:
            return lock.try_acquire()
        except OSError:  # Unsupported too: acquire() falls back or says why
            return False

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def _fall_back(self, e: OSError) -> None:
        why = os.strerror(e.errno or 0)
        pos = _FALLBACK.index(self.kind)
        if self.requested != "auto" or pos + 1 >= len(_FALLBACK):
            raise LockError(
                f"{self.path}: {self.kind} locks do not work on this filesystem ({why});"
                + (" try --lock auto" if self.requested != "auto" else "")
                + " and run `zotsink doctor` on its directory",
                path=self.path,
                errno=e.errno,
            ) from e
        nxt = _FALLBACK[pos + 1]
        warnings.warn(
            f"{self.path}: {self.kind} locks are not supported here ({why}); using {nxt} locks",
            ZotsinkWarning,
            stacklevel=4,
        )
        self.kind = nxt
        self._lock = None


#: An open descriptor and the (device, inode) it was opened on, which never change.
Held = tuple[int, int, int]


def open_locked(
    path: str,
    opener: Callable[[], int],
    locker: Locker,
    timeout: float,
    *,
    shared: bool = False,
    held: Held | None = None,
) -> tuple[Held, os.stat_result, float]:
    """Lock the file that ``path`` names: ``((fd, dev, ino), its stat, seconds waited)``.

    The one open -> lock -> same-inode loop of zotsink. ``held`` is a descriptor of
    ``path`` kept open from before; otherwise ``opener()`` opens one. Under the lock,
    ``path`` must still name the open inode: ``verify --repair`` or a user may have renamed
    another file over it, and a writer that went on with the old inode would append to a
    file nobody reads. So a replaced file is unlocked, closed and opened again. The check
    is one ``stat(path)`` compared with the inode the descriptor was opened on (an fstat at
    open time): the same inode, so the stat's size is the file's size under the lock.

    The descriptor is the caller's after a return, with the lock held; on an exception it
    has been closed (the caller must not use the one it passed in again). Raises
    :class:`LockTimeout`, :class:`LockError`, :class:`WriteError` (replaced
    :data:`MAX_REOPENS` times) and the ``OSError`` of a failing ``stat``.
    """
    waited = 0.0
    stale = 0  # stale handles met so far
    for _ in range(MAX_REOPENS):
        if held is None:
            fd = opener()
            try:
                st = os.fstat(fd)
            except BaseException:
                os.close(fd)
                raise
            held = (fd, st.st_dev, st.st_ino)
        fd = held[0]
        try:
            waited += locker.acquire(fd, timeout, shared)
        except BaseException:
            os.close(fd)
            raise
        was_stale = False
        try:
            named = os.stat(path)
            if named.st_ino == held[2] and named.st_dev == held[1]:
                return held, named, waited
        except FileNotFoundError:
            pass  # removed since we opened it: follow the name
        except OSError as e:
            # A stale handle: the file was replaced through another client of a network
            # filesystem. Reopen by name, as for any replaced file.
            if e.errno != errno.ESTALE:
                _drop(locker, fd)
                raise
            was_stale = True
        except BaseException:
            _drop(locker, fd)
            raise
        _drop(locker, fd)
        held = None
        if was_stale:  # the client's cache needs a moment to let go of the old handle
            pause(STALE_HANDLE, stale)
            stale += 1
    raise WriteError(
        f"{path} was replaced {MAX_REOPENS} times while zotsink tried to lock it",
        path=path,
        errno=errno.ESTALE,
    )


def _drop(locker: Locker, fd: int) -> None:
    # A stale descriptor may refuse even these; it is dropped either way.
    with contextlib.suppress(OSError):
        locker.release()
    with contextlib.suppress(OSError):
        os.close(fd)
