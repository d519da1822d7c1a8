"""The archive open and locked (through the one open -> lock -> same-inode loop of
``_core.locking``), and a coherent view of its size on network filesystems."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterator
from typing import Any, Final

from .._core.locking import Locker, open_locked
from ..errors import WriteError

__all__ = ["fresh_stat", "locked_archive"]


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
            fd = os.open(path, flags | os.O_CLOEXEC, 0o666)
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

    fd, _st, _waited = open_locked(path, opener, locker, timeout, shared=shared)
    try:
        yield fd
    finally:
        # a stale descriptor (the archive replaced through another client) may refuse even
        # these; the lock goes with the descriptor either way
        with contextlib.suppress(OSError):
            locker.release()
        with contextlib.suppress(OSError):
            os.close(fd)


# -- a coherent view of another client's appends -------------------------------------------
# On network and FUSE filesystems a client may serve a cached size (and cached pages) for a
# while after another client appended, even under the lock: GlusterFS and NFS both do. pack
# needs exact sizes (index offsets, where a torn tail starts), so there it asks the server:
# statx with AT_STATX_FORCE_SYNC for the size, after dropping the file's cached pages so
# that the bytes read next come from the server too.
_AT_EMPTY_PATH: Final = 0x1000
_AT_STATX_FORCE_SYNC: Final = 0x2000
_STATX_BASIC: Final = 0x7FF
_statx: list[Any] = []


def _load_statx() -> Any:
    if not _statx:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        _statx.append(getattr(libc, "statx", None))
    return _statx[0]


def fresh_stat(fd: int, coherent: bool) -> tuple[int, int, int]:
    """(device, inode, size) of an open file; with ``coherent``, as the server has it now."""
    st = os.fstat(fd)
    ident = (st.st_dev, st.st_ino)
    if not coherent:
        return (*ident, st.st_size)
    with contextlib.suppress(OSError):
        # fsync goes to the server even with nothing to write, and its reply carries the
        # file's current attributes: GlusterFS's client refreshes its cached size from it
        os.fsync(fd)
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    statx = _load_statx()
    if statx is None:  # no statx in this libc: fstat is the best there is
        return (*ident, st.st_size)
    import ctypes

    buf = ctypes.create_string_buffer(256)
    if statx(fd, b"", _AT_EMPTY_PATH | _AT_STATX_FORCE_SYNC, _STATX_BASIC, buf) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            return (*ident, st.st_size)
        raise OSError(err, os.strerror(err))
    # struct statx: stx_size is the u64 at byte 40
    return (*ident, int.from_bytes(buf.raw[40:48], sys.byteorder))
