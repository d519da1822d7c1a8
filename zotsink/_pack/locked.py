"""The archive open and locked: the one open -> lock -> same-inode loop of pack."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import Final

from ..errors import WriteError
from ..locking import Locker

__all__ = ["locked_archive"]

#: How often the archive may be found replaced in one hold before giving up.
_MAX_REOPENS: Final = 100


@contextlib.contextmanager
def locked_archive(
    path: str, locker: Locker, timeout: float, *, shared: bool = False
) -> Iterator[int]:
    """The archive open (O_APPEND) and locked, its path naming the open inode.

    ``shared``: open read-only under a shared lock (readers); the archive must exist.
    """
    for _ in range(_MAX_REOPENS):
        try:
            flags = os.O_RDONLY if shared else os.O_RDWR | os.O_APPEND | os.O_CREAT
            fd = os.open(path, flags | os.O_CLOEXEC, 0o666)
        except OSError as e:
            doing = "reading" if shared else "appending"
            raise WriteError(
                f"cannot open {path} for {doing}: {e.strerror or e}", path=path, errno=e.errno
            ) from e
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise WriteError(
                    f"{path} is not a regular file; name a tar file", path=path, errno=errno.EINVAL
                )
            locker.acquire(fd, timeout, shared=shared)
        except BaseException:
            os.close(fd)
            raise
        try:
            try:
                st, named = os.fstat(fd), os.stat(path)
                same = (st.st_dev, st.st_ino) == (named.st_dev, named.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                yield fd
                return
        finally:
            locker.release()
            os.close(fd)
    raise WriteError(
        f"{path} was replaced {_MAX_REOPENS} times while zotsink tried to lock it", path=path
    )
