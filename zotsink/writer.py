"""The locked append path: every byte zotsink adds to OUT goes through :class:`Writer`.

Under the lock, per batch: check that OUT's path still names the open inode (``verify
--repair`` or a user may have replaced it), write the header if OUT is empty, end a torn tail
with a newline, write the batch with one ``write()`` on an ``O_APPEND`` descriptor, fsync
when the policy says so, unlock. Never seek to a remembered size: on network filesystems a
stale size overwrites other writers' data. A failed write is cut back to the size seen
under the lock, and the batch goes to a spill file instead (see :mod:`zotsink.sidefiles`).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final

from . import sidefiles
from .errors import HeaderMismatch, LockError, UsageError, WriteError, ZotsinkError
from .fileio import write_all
from .fsinfo import wants_fsync
from .locking import Locker

__all__ = ["SYNC_POLICIES", "Writer", "first_line"]

#: A hook run under the lock just before a write: (fd, fstat of OUT, the exact bytes).
UnderLock = Callable[[int, os.stat_result, bytes], None]

#: Values accepted by ``--sync``.
SYNC_POLICIES: Final = ("auto", "fsync", "none")
#: How often OUT may be found replaced in one append before zotsink gives up.
_MAX_REOPENS: Final = 100
#: Errors of open() that no retry will fix, with the advice for the user.
_OPEN_ADVICE: Final = {
    errno.ENOENT: "its directory does not exist; create it first",
    errno.EISDIR: "it is a directory; name a file inside it",
    errno.EACCES: "permission denied; choose a place you may write to",
    errno.EPERM: "permission denied; choose a place you may write to",
    errno.EROFS: "the filesystem is read-only",
    errno.ELOOP: "it is a symbolic link, which side files never follow",
    errno.ENOTDIR: "a part of the path is not a directory",
}


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
    line otherwise. Thread-safe; one per OUT per process is enough.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock: str = "auto",
        sync: str = "auto",
        timeout: float = 600.0,
        header: bytes | None = None,
        side_file: bool = False,
        mode: int = 0o666,
    ) -> None:
        if sync not in SYNC_POLICIES:
            raise UsageError(f"unknown --sync policy {sync!r}: use one of auto, fsync, none")
        if timeout < 0:
            raise UsageError(f"--timeout must not be negative, not {timeout!r}")
        self.path = os.fspath(path)
        self.locker = Locker(lock, self.path)
        self.fsync = sync == "fsync" or (sync == "auto" and wants_fsync(self.path))
        self.timeout = timeout
        self.header = header
        self.side_file = side_file
        self.mode = mode
        self._fd = -1
        self._readable = True
        self._end: tuple[int, int, int] | None = None  # (dev, ino, size) after our last write
        self._header_ok: tuple[int, int] | None = None  # (dev, ino) whose header matched
        self._mutex = threading.Lock()
        self.lock_wait = 0.0  # seconds spent waiting for the lock, summed
        self.skipped_first_line = False  # whether the last append dropped its first line
        self._pid = os.getpid()

    # -- descriptor ---------------------------------------------------------------------
    def _open(self) -> int:
        # O_RDWR so the torn-tail and header checks can pread the same descriptor: opening
        # a second one would drop an fcntl lock the moment it is closed.
        flags = os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        if self.side_file:
            # O_NONBLOCK: a FIFO planted at a side file's name must not hang the open; it is
            # refused below and cleared again for the regular file.
            flags |= os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            try:
                fd = os.open(self.path, flags | os.O_RDWR, self.mode)
                self._readable = True
            except PermissionError:
                fd = os.open(self.path, flags | os.O_WRONLY, self.mode)
                self._readable = False
        except OSError as e:
            advice = _OPEN_ADVICE.get(e.errno or 0, e.strerror or str(e))
            raise WriteError(
                f"cannot open {self.path} for appending: {advice}", path=self.path, errno=e.errno
            ) from e
        if self.side_file:
            self._check_regular(fd)
        self._fd = fd
        return fd

    def _check_regular(self, fd: int) -> None:
        # A side file is only ever a regular file: anything else planted at its name (a FIFO,
        # a device) could hang the writer or send the records elsewhere.
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WriteError(
                f"cannot open {self.path} for appending: it is not a regular file; remove it",
                path=self.path,
                errno=errno.EINVAL,
            )
        os.set_blocking(fd, True)

    def close(self) -> None:
        with self._mutex:
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                os.close(fd)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the append path -----------------------------------------------------------------
    def append(
        self,
        data: bytes,
        *,
        skip_first_line_if_equal: bytes | None = None,
        spill: bool = True,
        under_lock: UnderLock | None = None,
    ) -> int:
        """Append ``data`` (whole lines) to OUT under the lock; the bytes written.

        On lock timeout, a failed lock call or a failed write the batch is saved to a spill
        file and :class:`LockTimeout`, :class:`LockError` or :class:`WriteError` is raised with
        its ``spill_path``.
        ``skip_first_line_if_equal`` (used by recover) drops ``data``'s first line when OUT
        is not empty and already starts with exactly that line. ``spill=False`` raises
        without saving (for a caller whose records are already safe elsewhere).
        ``under_lock(fd, st, payload)`` (used by recover) runs under the lock just before
        ``payload``, the exact bytes about to be written at offset ``st.st_size``; it may
        raise to write nothing.
        """
        if not data:
            return 0
        with self._mutex:
            try:
                return self._append(data, skip_first_line_if_equal, under_lock)
            except (LockError, WriteError) as e:
                # LockTimeout is a LockError. A lock call that fails outright (an explicit
                # --lock kind the filesystem lacks) would lose a batch read from a pipe just
                # the same, so it is saved too: exit 74 always means "spilled".
                if spill:
                    self.save(e, data, skip_first_line_if_equal)
                raise
            except OSError as e:
                # Any other I/O error under the lock (EIO from fstat, stat or pread on a sick
                # mount) takes the failed-write path: one error kind, and the batch is saved.
                err = WriteError(
                    f"cannot append to {self.path}: {e.strerror or e}",
                    path=self.path,
                    errno=e.errno,
                )
                if spill:
                    self.save(err, data, skip_first_line_if_equal)
                raise err from e

    def save(self, e: ZotsinkError, data: bytes, skip_line: bytes | None = None) -> None:
        """Save a batch that ``e`` kept out of OUT to a spill file; note where on ``e``."""
        e.spill_path = self._spill(data, skip_line)
        e.message += f"; the records were saved to {e.spill_path}"

    def append_chunks(self, chunks: Iterator[bytes]) -> int:
        """Append one record given as a stream of chunks, under one lock hold.

        For a record too large to hold in memory (an over-long line bound for the rejects
        file). Nothing is spilled: on failure OUT is cut back and WriteError raised.
        """
        with self._mutex:
            return self._append(chunks, None, None)

    def _after_fork(self) -> None:
        # A flock held through a description shared with the parent would not exclude the
        # parent: the child drops its inherited copy and opens OUT afresh.
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._end = self._header_ok = None
        self.locker = Locker(self.locker.requested, self.path)
        self._pid = os.getpid()

    def _append(
        self, data: bytes | Iterator[bytes], skip_line: bytes | None, under_lock: UnderLock | None
    ) -> int:
        if self._pid != os.getpid():
            self._after_fork()
        for _ in range(_MAX_REOPENS):
            fd = self._fd if self._fd >= 0 else self._open()
            self.lock_wait += self.locker.acquire(fd, self.timeout)
            stale = False
            try:
                try:
                    st = os.fstat(fd)
                    named = os.stat(self.path)
                    replaced = named.st_ino != st.st_ino or named.st_dev != st.st_dev
                except FileNotFoundError:
                    replaced = True
                except OSError as e:
                    # A stale handle: OUT was replaced through another client of a network
                    # filesystem. Reopen by name, as for any replaced OUT.
                    if e.errno != errno.ESTALE:
                        raise
                    replaced = stale = True
                if replaced:
                    # Someone renamed or removed OUT since we opened it: follow the name.
                    self._fd = -1
                    try:
                        self.locker.release()
                        os.close(fd)
                    except OSError:
                        pass  # a stale descriptor may refuse even this; it is dropped
                    if stale:
                        time.sleep(0.02)  # the client's cache needs a moment to let go
                    continue
                return self._write_locked(fd, st, data, skip_line, under_lock)
            finally:
                if self._fd == fd:
                    self.locker.release()
        raise WriteError(
            f"{self.path} was replaced {_MAX_REOPENS} times while zotsink tried to append",
            path=self.path,
            errno=errno.ESTALE,
        )

    def _write_locked(
        self,
        fd: int,
        st: os.stat_result,
        data: bytes | Iterator[bytes],
        skip_line: bytes | None,
        under_lock: UnderLock | None = None,
    ) -> int:
        size = st.st_size
        ident = (st.st_dev, st.st_ino)
        prefix = b""
        self.skipped_first_line = False
        if size == 0:
            if self.header:
                prefix = self.header
        else:
            if (
                skip_line is not None
                and isinstance(data, bytes)
                and self._readable
                and first_line(fd) == skip_line
            ):
                data = data[len(skip_line) :]
                self.skipped_first_line = True
            if self.header and self._header_ok != ident and self._readable:
                found = first_line(fd)
                if found != self.header:
                    raise HeaderMismatch(
                        f"{self.path} starts with the header {_show(found)}, not "
                        f"{_show(self.header)}; nothing was written: choose another OUT "
                        "or the same columns",
                        path=self.path,
                    )
                self._header_ok = ident
            # Torn tail: a writer died mid-line, or a foreign writer left no newline. Start
            # on a fresh line so the fragment stays separate; never truncate other data.
            if (
                self._end != (st.st_dev, st.st_ino, size)
                and self._readable
                and os.pread(fd, 1, size - 1) != b"\n"
            ):
                prefix = b"\n"
        if isinstance(data, bytes):
            pieces: Iterator[bytes] | list[bytes] = [prefix + data if prefix else data]
            if under_lock is not None:
                under_lock(fd, st, pieces[0])
        else:
            pieces = _chain(prefix, data)
        written = 0
        try:
            for payload in pieces:
                written += write_all(fd, payload)
            if self.fsync:
                os.fsync(fd)
        except OSError as e:
            self._cut_back(fd, size)
            raise WriteError(
                f"cannot append to {self.path}: {e.strerror or e}", path=self.path, errno=e.errno
            ) from e
        self._end = (st.st_dev, st.st_ino, size + written)
        if self.header and size == 0:
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

    def _spill(self, data: bytes, skip_line: bytes | None) -> str:
        return sidefiles.spill(self.path, data, header=self.header, mode=self._side_mode())

    def _side_mode(self) -> int:
        if self.side_file:
            # The mode given is OUT's; whatever sits at the side file's name may have been
            # planted there, and must not choose who can read the spilled records.
            return self.mode
        try:
            return os.stat(self.path).st_mode & 0o666
        except OSError:
            return 0o600


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _show(line: bytes) -> str:
    text = line.rstrip(b"\n").decode("utf-8", "replace")
    return repr(text if len(text) <= 80 else text[:80] + "...")
