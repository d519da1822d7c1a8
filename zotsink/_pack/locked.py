"""The archive open and locked (through the one open -> lock -> same-inode loop of
``_core.locking``), and a coherent view of its size on network filesystems."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from .._core.fileio import open_created
from .._core.locking import Locker, open_locked
from ..errors import WriteError

__all__ = ["locked_archive"]


@contextlib.contextmanager
def locked_archive(
    path: str, locker: Locker, timeout: float, *, shared: bool = False
) -> Iterator[int]:
    """The archive open (``O_APPEND``) and locked, its path naming the open inode.

    ``shared``: opened read-only under a shared lock (readers); the archive must exist.
    """

    def opener() -> int:
        flags = os.O_RDONLY if shared else os.O_RDWR | os.O_APPEND | os.O_CREAT
        try:
            fd = open_created(path, flags | os.O_CLOEXEC, 0o666)
        except OSError as e:
            doing = "reading" if shared else "appending"
            raise WriteError(
                f"cannot open {path} for {doing}: {e.strerror or e}", path=path, errno=e.errno
            ) from e
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WriteError(
                f"{path} is not a regular file; name a tar file", path=path, errno=errno.EINVAL
            )
        return fd

    (fd, _dev, _ino), _st, _waited = open_locked(path, opener, locker, timeout, shared=shared)
    try:
        yield fd
    finally:
        # a stale descriptor (the archive replaced through another client) may refuse even
        # these; the lock goes with the descriptor either way
        with contextlib.suppress(OSError):
            locker.release()
        with contextlib.suppress(OSError):
            os.close(fd)
