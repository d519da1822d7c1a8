"""The locked append path: every byte zotsink adds to OUT goes through :class:`Writer`.

Under the lock, per batch: check that OUT's path still names the open inode (``verify
--repair`` or a user may have replaced it), write the header if OUT is empty, end a torn tail
with a newline, write the batch with one ``write()`` on an ``O_APPEND`` descriptor, fsync
when the policy says so, unlock. Never seek to a remembered size: on network filesystems a
stale size overwrites other writers' data. A failed write is cut back to the size seen
under the lock and raised; saving the batch elsewhere is the caller's choice (see
:class:`zotsink._core.outlet.Outlet`): the writer only locks and writes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Final, TypeVar

from ..errors import (
    HeaderMismatch,
    LockError,
    LockTimeout,
    UsageError,
    WriteError,
    ZotsinkError,
)
from .backoff import HEADER_SETTLE, STALE_HANDLE, tries
from .fileio import RefusedFile, fresh_stat, open_for_append, write_all
from .fsinfo import wants_fsync
from .locking import Held, Locker, open_locked
from .outcheck import check_out

__all__ = ["SYNC_POLICIES", "Writer", "first_line", "seen_first_line", "seen_to", "until_seen"]

#: A hook run under the lock before a batch is written: (fd, fstat of OUT, the batch) ->
#: the bytes to write instead (may raise to write nothing).
Prepare = Callable[[int, os.stat_result, bytes], bytes]

T = TypeVar("T")

#: Values accepted by ``--sync``.
SYNC_POLICIES: Final = ("auto", "fsync", "none")
#: Errors of open() that no retry will fix, with the advice for the user.
_OPEN_ADVICE: Final = {
    errno.ENOENT: "its directory does not exist; create it first",
    errno.EISDIR: "it is a directory; name a file inside it",
    errno.EACCES: "permission denied; choose a place you may write to",
    errno.EPERM: "permission denied; choose a place you may write to",
    errno.EROFS: "the filesystem is read-only",
    errno.ELOOP: "it is a symbolic link, which side files never follow",
    errno.ENXIO: "it is a FIFO or a device, not a regular file; name another OUT",
    errno.ENOTDIR: "a part of the path is not a directory",
}


def seen_first_line(fd: int, size: int, limit: int = 1 << 20) -> bytes:
    """:func:`first_line` once this client can see it. A network client (GlusterFS) that
    read OUT before another node wrote its header may answer a read from what it cached for
    a while after it learned the new size: a short read then is not another header.
    Read again after pauses, within :data:`.backoff.HEADER_SETTLE`'s budget; what is seen
    then is the answer (and a still-short line is refused as a mismatch, as before)."""
    return until_seen(
        lambda: first_line(fd, limit),
        lambda found: found.endswith(b"\n") or len(found) >= min(size, limit),
    )


def seen_to(fd: int, size: int, start: int = 0) -> bool:
    """Whether this client reads bytes ``start`` to ``size`` of the open file whole (the
    server's size, from :func:`.fileio.fresh_stat`), after the wait of
    :func:`seen_first_line`. A GlusterFS client may answer the reads of a small file from
    content it cached before another client appended, while it reports the new size."""
    return until_seen(lambda: _reads_whole(fd, start, size), bool)


def until_seen(look: Callable[[], T], seen: Callable[[T], bool]) -> T:
    """The one stale-view wait: ``look()`` again, after the pauses of
    :data:`.backoff.HEADER_SETTLE`, until ``seen`` accepts what it returned, within the
    policy's budget; the last look either way."""
    for _last in tries(HEADER_SETTLE):
        found = look()
        if seen(found):
            break
    return found


def _reads_whole(fd: int, start: int, end: int) -> bool:
    pos = start
    while pos < end:
        got = len(os.pread(fd, min(end - pos, 1 << 20), pos))
        if not got:
            return False
        pos += got
    return True


def first_line(fd: int, limit: int = 1 << 20) -> bytes:
    """The first line of an open file (with its newline), read with pread; at most ``limit``."""
    out = b""
    while len(out) < limit:
        chunk = os.pread(fd, 65536, len(out))
        if not chunk:
            return out
        nl = chunk.find(b"\n")
        if nl >= 0:
            return out + chunk[: nl + 1]
        out += chunk
    return out


class Writer:
    """Appends whole batches of bytes records to one OUT, each under an exclusive lock.

    ``header`` (a bytes line) is written first when OUT is empty and must match OUT's first
    line otherwise. ``side_file``: OUT is a side file (rejects), never followed through a
    symbolic link. ``prepare`` runs under the lock on each batch, before it is written, and
    returns the bytes to write (recover uses it to journal and to drop a repeated header).
    Thread-safe; one per OUT per process is enough.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock: str = "auto",
        sync: str = "auto",
        header: bytes | None = None,
        side_file: bool = False,
        mode: int = 0o666,
        prepare: Prepare | None = None,
    ) -> None:
        if sync not in SYNC_POLICIES:
            raise UsageError(f"unknown --sync policy {sync!r}: use one of auto, fsync, none")
        self.path = os.fspath(path)
        if not side_file:
            # A side file that is a device is refused where the user names it (run's --log
            # and --ledger); OUT.rejects, made only when a line is refused, is refused at
            # open and its lines saved beside OUT, never lost.
            check_out(self.path)
        self.locker = Locker(lock, self.path)
        self.fsync = sync == "fsync" or (sync == "auto" and wants_fsync(self.path))
        # Under the lock, the size the decisions below are taken on is asked of the server
        # where a client may cache it (network and FUSE filesystems, when fsyncing); a
        # local disk's fstat is the truth, and asking costs the file's cached pages.
        self._coherent = self.fsync and wants_fsync(self.path)
        self._header = header
        self.side_file = side_file
        self.mode = mode
        self._prepare = prepare
        self._held: Held | None = None  # (fd, dev, ino) of OUT, kept open between appends
        self._readable = True
        self._end: tuple[int, int, int] | None = None  # (dev, ino, size) after our last write
        self._header_ok: tuple[int, int] | None = None  # (dev, ino) whose header matched
        self._mutex = threading.Lock()
        self.lock_wait = 0.0  # seconds spent waiting for the lock, summed
        #: Where the data of the last append begins in OUT (after a header or the newline
        #: that ends a torn tail): with its length, the part of OUT that append wrote.
        self.last_at = -1
        self.last_ino = -1  # the inode of the file the last block went to
        self._forked = False  # set in a child made by os.fork() (see _mark_forked)
        _live_writers.add(self)

    @property
    def coherent(self) -> bool:
        """Whether the size taken under the lock is the server's (a network or FUSE
        filesystem, fsynced): what a hook that reads the file's end must know."""
        return self._coherent

    @property
    def header(self) -> bytes | None:
        """The header line this writer puts first into an empty OUT (None: no header)."""
        return self._header

    def set_header(self, header: bytes | None) -> None:
        """Name the header once it is known (the first mapping or key:value record)."""
        with self._mutex:
            if header != self._header:
                self._header = header
                self._header_ok = None

    # -- descriptor ---------------------------------------------------------------------
    def _open(self) -> int:
        try:
            fd, self._readable = open_for_append(self.path, self.mode, side_file=self.side_file)
        except OSError as e:
            if isinstance(e, RefusedFile):
                advice = e.strerror
            else:
                advice = _OPEN_ADVICE.get(e.errno or 0, e.strerror or str(e))
            raise WriteError(
                f"cannot open {self.path} for appending: {advice}", path=self.path, errno=e.errno
            ) from e
        return fd

    def close(self) -> None:
        with self._mutex:
            if self._held is not None:
                fd, self._held = self._held[0], None
                try:
                    os.close(fd)
                except OSError as e:
                    # Some filesystems (MooseFS when full) report a failed write only at
                    # close(). Where this writer fsyncs, every batch was on the server
                    # before its append returned; elsewhere the user must hear of it.
                    if not self.fsync:
                        raise WriteError(
                            f"closing {self.path} failed ({e.strerror or e}): the last "
                            f"records may not have reached it; run `zotsink verify {self.path}`",
                            path=self.path,
                            errno=e.errno,
                        ) from e

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the append path -----------------------------------------------------------------
    def append(self, data: bytes | memoryview, *, timeout: float) -> int:
        """Append ``data`` (whole lines) to OUT under the lock; the bytes written.

        Waits up to ``timeout`` seconds for the lock. Raises :class:`LockTimeout`,
        :class:`LockError`, :class:`HeaderMismatch` or :class:`WriteError` (any I/O error,
        after OUT was cut back to its size under the lock). Nothing is saved elsewhere:
        :class:`zotsink._core.outlet.Outlet` does that for the callers that want it.
        """
        if not data and self._prepare is None:
            return 0  # with a hook, the hook decides what an empty block becomes
        if not timeout >= 0:  # also refuses NaN
            raise UsageError(f"a lock timeout must be a number of seconds >= 0, not {timeout!r}")
        with self._mutex:
            try:
                return self._append(data, timeout)
            except (LockError, WriteError):  # LockTimeout is a LockError
                raise
            except OSError as e:
                # Any other I/O error under the lock (EIO from fstat, stat or pread on a sick
                # mount) is a failed write: one error kind for the callers to save the batch.
                raise WriteError(
                    f"cannot append to {self.path}: {e.strerror or e}",
                    path=self.path,
                    errno=e.errno,
                ) from e

    def append_chunks(self, chunks: Iterator[bytes], *, timeout: float) -> int:
        """Append whole lines given as a stream of chunks, under one lock hold.

        For a block too large to hold in memory (a run attempt's held output, a line over
        the limit bound for the rejects file), called by the outlet only. Nothing is
        spilled: on failure OUT is cut back and WriteError raised.
        """
        with self._mutex:
            return self._append(chunks, timeout)

    def _after_fork(self) -> None:
        # A flock held through a description shared with the parent would not exclude the
        # parent: the child drops its inherited copy and opens OUT afresh.
        if self._held is not None:
            os.close(self._held[0])
        self._held = None
        self._end = self._header_ok = None
        self.locker = Locker(self.locker.requested, self.path)
        self._forked = False

    def _append(self, data: bytes | memoryview | Iterator[bytes], timeout: float) -> int:
        if self._forked:
            self._after_fork()
        for last in tries(STALE_HANDLE):
            try:
                return self._append_once(data, timeout)
            except OSError as e:
                if isinstance(e, ZotsinkError):  # the lock's and the write's own errors
                    raise
                # ENOENT or ESTALE from the descriptor before a byte was written (fstat, the
                # server's size, the header's read): a FUSE client (GlusterFS) that raced
                # another client's create of OUT may hand out a descriptor of an inode the
                # server no longer knows by that name. Nothing was written: drop the
                # descriptor and open OUT again by name.
                if e.errno not in (errno.ENOENT, errno.ESTALE) or last:
                    raise
                self._forget()
        raise AssertionError("unreachable")  # pragma: no cover

    def _forget(self) -> None:
        held, self._held = self._held, None
        self._end = self._header_ok = None
        if held is not None:
            with contextlib.suppress(OSError):
                os.close(held[0])

    def _append_once(self, data: bytes | memoryview | Iterator[bytes], timeout: float) -> int:
        locked = self._lock_held()
        if locked is None:
            held, self._held = self._held, None  # open_locked owns it until it returns
            try:
                held, st, waited = open_locked(
                    self.path, self._open, self.locker, timeout, held=held
                )
            except LockTimeout:
                self.lock_wait += timeout  # a wait that timed out was waited all the same
                raise
            self._held = held
            if waited:
                self.lock_wait += waited
            locked = (held[0], st)
        try:
            return self._write_locked(locked[0], locked[1], data)
        finally:
            self._unlock()

    def _lock_held(self) -> tuple[int, os.stat_result] | None:
        """The steady state, a few calls shorter than open_locked(): OUT open from before,
        its lock free at once, and the name still holding the inode (the same check).
        ``(fd, stat)`` with the lock held; None, and no lock, for anything else (no
        descriptor yet, a busy lock, OUT replaced or removed, a failing stat), which takes
        the whole way."""
        held = self._held
        if held is None or not self.locker.try_now(held[0]):
            return None
        try:
            named = os.stat(self.path)
        except OSError:
            named = None
        except BaseException:  # an interrupt: the lock is not kept, as in open_locked()
            self.locker.release()
            raise
        if named is not None and named.st_ino == held[2] and named.st_dev == held[1]:
            return held[0], named
        with contextlib.suppress(OSError):  # a stale handle may refuse; reopened by name
            self.locker.release()
        return None

    def _unlock(self) -> None:
        """Release the lock after a write (or a failed one). An unlock that fails (a stale
        handle, an evicted client) must not turn records already in OUT into an error: the
        caller would save them to a spill file too, and recover would add them twice. The
        descriptor is closed instead, which drops the lock; the next append opens OUT anew."""
        try:
            self.locker.release()
        except OSError:
            held, self._held = self._held, None
            if held is not None:
                with contextlib.suppress(OSError):
                    os.close(held[0])

    def _write_locked(
        self, fd: int, st: os.stat_result, data: bytes | memoryview | Iterator[bytes]
    ) -> int:
        size = st.st_size
        if self._coherent:
            # A network or FUSE client (GlusterFS: for about a second) may report the size it
            # cached before another client appended, even under the lock. Decisions taken on
            # it (an empty OUT gets the header; a failed write is cut back to it) need the
            # server's size: the same policy that fsyncs asks for it.
            size = fresh_stat(fd, True)[2]
            if size != st.st_size:  # the hook below sees the same, true size
                st = os.stat_result((*st[:6], size, *st[7:10]))
        ident = (st.st_dev, st.st_ino)
        if self._prepare is not None and isinstance(data, (bytes, memoryview)):
            # the hook sees every block it is given, a view of a read buffer too
            data = self._prepare(fd, st, bytes(data))
            if not data:
                return 0
        prefix = b""
        if size == 0:
            if self._header:
                prefix = self._header
        else:
            if self._header and self._header_ok != ident and self._readable:
                found = seen_first_line(fd, size)
                if found != self._header:
                    raise HeaderMismatch(
                        f"{self.path} starts with the header {_show(found)}, not "
                        f"{_show(self._header)}; nothing was written: choose another OUT "
                        "or the same columns",
                        path=self.path,
                    )
                self._header_ok = ident
            # Torn tail: a writer died mid-line, or a foreign writer left no newline. Start
            # on a fresh line so the fragment stays separate; never truncate other data.
            # An empty read means this client cannot see the last byte yet (a GlusterFS
            # client knows the server's size but still reads up to its cached one): no
            # newline then, which would otherwise be an empty line between two records.
            if (
                self._end != (st.st_dev, st.st_ino, size)
                and self._readable
                and os.pread(fd, 1, size - 1) not in (b"\n", b"")
            ):
                prefix = b"\n"
        written = 0
        try:
            if isinstance(data, (bytes, memoryview)):
                written = write_all(fd, prefix + data if prefix else data)
            else:
                for payload in _chain(prefix, data):
                    written += write_all(fd, payload)
            if self.fsync:
                os.fsync(fd)
        except OSError as e:
            self._cut_back(fd, size)
            raise WriteError(
                f"cannot append to {self.path}: {e.strerror or e}", path=self.path, errno=e.errno
            ) from e
        self._end = (st.st_dev, st.st_ino, size + written)
        self.last_at = size + len(prefix)
        self.last_ino = st.st_ino
        if self._header and size == 0:
            self._header_ok = ident
        return written

    def _cut_back(self, fd: int, size: int) -> None:
        # We hold the lock, so ``size`` is exact: no partial record stays behind.
        try:
            os.ftruncate(fd, size)
            if self.fsync:
                os.fsync(fd)
        except OSError:
            pass  # the spill still has every record; verify will show any fragment


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _show(line: bytes) -> str:
    text = line.rstrip(b"\n").decode("utf-8", "replace")
    return repr(text if len(text) <= 80 else text[:80] + "...")


#: Every writer of this process, so that a forked child can mark them (no getpid() per append).
_live_writers: weakref.WeakSet[Writer] = weakref.WeakSet()


def _mark_forked() -> None:
    for w in list(_live_writers):
        w._forked = True


os.register_at_fork(after_in_child=_mark_forked)
