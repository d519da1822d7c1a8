"""Files written whole for the user: a page, an exported table, an archive, an index rewritten.

:func:`whole_file` is the one way zotsink writes a whole file (appends go through the
writer): the bytes go to a temporary name beside the target, created ``O_CREAT|O_EXCL|
O_NOFOLLOW`` under a random name, then are fsynced and renamed over the target (or linked
to it, when nothing may be replaced). So:

- a reader sees the old file or the new one, whole, never a mix; a write that fails (a full
  disk, an exception of the caller) removes the temporary file and leaves the target as it
  was;
- nothing planted at a name zotsink writes is written through: not a symbolic link at the
  temporary name (another user of a group directory cannot make zotsink truncate a file of
  the user's by linking a predictable name to it: the name is random, and the exclusive,
  no-follow create fails on anything there), nor one at the target (the rename replaces
  the link itself; the file it pointed to is untouched);
- the target is never a directory, a FIFO or a device (refused before anything is written,
  with :class:`~zotsink.errors.UsageError`); a directory that cannot be written to is said
  to be one (:class:`~zotsink.errors.WriteError`, with the advice).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO, Final

from ..errors import UsageError, WriteError
from .fileio import file_kind, fsync_dir

__all__ = ["WholeFile", "check_target", "whole_file"]

#: A new temporary file: never an existing one, never through a link planted at its name.
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: Names tried for the temporary file before giving up (each taken name is someone's).
_NAMES: Final = 16
#: Bytes of buffer between the caller's writes and the file.
_BUFFER: Final = 1 << 20


class WholeFile:
    """The file being written: write to :attr:`file`; :attr:`temp` is its temporary name
    (a caller may read it back before it is placed, as ``collect --archive`` does)."""

    def __init__(self, path: str, temp: str, file: BinaryIO) -> None:
        self.path = path
        self.temp = temp
        self.file = file

    def write(self, data: bytes) -> int:
        try:
            return self.file.write(data)
        except OSError as e:
            raise WriteError(
                f"cannot write {self.path}: {e.strerror or e}", path=self.path, errno=e.errno
            ) from e


def check_target(path: str) -> None:
    """Refuse a target that is a directory, a FIFO or a device (UsageError): a whole file
    renamed over it would fail or replace what is not a file. A symbolic link there is
    fine: the link itself is replaced."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise WriteError(f"cannot look at {path}: {e.strerror}", path=path, errno=e.errno) from e
    if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
        return
    raise UsageError(
        f"{path} is {file_kind(st.st_mode)}, not a file zotsink may replace: name a file",
        path=path,
    )


@contextlib.contextmanager
def whole_file(path: str, *, replace: bool = True, mode: int = 0o666) -> Iterator[WholeFile]:
    """Write the file ``path`` whole: what the block writes to the :class:`WholeFile` it is
    given lands at ``path`` when the block ends without an exception, fsynced, with the
    permission bits ``mode`` (less the umask). ``replace`` False: a file that exists at
    ``path`` by then is left alone and :class:`~zotsink.errors.WriteError` raised.
    Raises WriteError (the directory named when it is the directory that refuses) or
    UsageError (see :func:`check_target`); an exception of the block goes on as it is.
    Either way nothing is left under the temporary name.
    """
    path = os.fspath(path)
    check_target(path)
    fd, temp = _create(path, mode)
    placed = False
    try:
        f = os.fdopen(fd, "wb", buffering=_BUFFER)
        try:
            yield WholeFile(path, temp, f)
        except BaseException:
            with contextlib.suppress(OSError):
                f.close()  # what it holds is of no use now: a failed flush says nothing
            raise
        try:
            with f:
                f.flush()
                os.fsync(f.fileno())
            _place(temp, path, replace)
        except WriteError:
            raise
        except OSError as e:
            raise WriteError(
                f"cannot write {path}: {e.strerror or e}", path=path, errno=e.errno
            ) from e
        placed = True
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    finally:
        if not placed:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _create(path: str, mode: int) -> tuple[int, str]:
    """The temporary file beside ``path``, created exclusively under a random name."""
    directory = os.path.dirname(os.path.abspath(path))
    for _ in range(_NAMES):
        temp = f"{path}.part.{_suffix()}"
        try:
            return os.open(temp, _CREATE, mode), temp
        except FileExistsError:
            continue  # someone's file, or a link planted there: never used, another name
        except OSError as e:
            raise WriteError(_why(path, directory, e), path=path, errno=e.errno) from e
    raise WriteError(
        f"cannot write {path}: every temporary name tried beside it was taken; "
        f"look at the files named {os.path.basename(path)}.part.* in {directory}",
        path=path,
        errno=errno.EEXIST,
    )


def _suffix() -> str:
    """The random part of a temporary name: nobody can plant a file there in advance."""
    return os.urandom(6).hex()


def _why(path: str, directory: str, e: OSError) -> str:
    if e.errno in (errno.EACCES, errno.EPERM):
        return (
            f"cannot write {path}: the directory {directory} is not writable for you "
            f"({e.strerror}); name a file in a directory you may write to"
        )
    if e.errno == errno.EROFS:
        return f"cannot write {path}: {directory} is on a read-only filesystem"
    if e.errno in (errno.ENOENT, errno.ENOTDIR):
        return f"cannot write {path}: the directory {directory} does not exist"
    return f"cannot write {path}: {e.strerror or e}"


def _place(temp: str, path: str, replace: bool) -> None:
    """Put the finished file at ``path``: with ``replace`` over whatever is there (a link
    there is replaced, not followed), else never over a file that appeared meanwhile."""
    if replace:
        os.rename(temp, path)  # atomic: the old file or the new one, never neither
        return
    appeared = WriteError(
        f"{path} appeared while it was being written; nothing was replaced: write it under "
        "a new name",
        path=path,
        errno=errno.EEXIST,
    )
    try:
        os.link(temp, path)  # fails when path exists: nothing is replaced
    except FileExistsError:
        raise appeared from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
            raise
        # a filesystem without hard links: rename, after one more look
        if os.path.lexists(path):
            raise appeared from None
        os.rename(temp, path)
        return
    os.unlink(temp)
