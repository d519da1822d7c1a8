"""Small file operations that several modules need, written once."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

__all__ = ["fsync_dir", "pread_chunks", "write_all"]


def write_all(fd: int, data: bytes | bytearray | memoryview) -> int:
    """Write all of ``data``: one write() unless the kernel cuts it short; the bytes written."""
    done = 0
    view = memoryview(data)
    while done < len(view):
        n = os.write(fd, view[done:])
        if n <= 0:  # a regular file never takes 0 bytes of a non-empty write: do not spin
            raise OSError(errno.EIO, "write returned 0")
        done += n
    return done


def fsync_dir(directory: str) -> None:
    """fsync a directory so that a name created or renamed in it is on disk; best effort.

    Some filesystems refuse to fsync a directory: the rename or create is done either way.
    """
    try:
        fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def pread_chunks(fd: int, size: int, chunk: int = 1 << 20, start: int = 0) -> Iterator[bytes]:
    """Bytes ``start`` to ``size`` of an open file in chunks, read with pread (the file
    offset is left alone, so an O_APPEND writer on the same descriptor is not disturbed).
    Stops early if the file turns out shorter."""
    pos = start
    while pos < size:
        data = os.pread(fd, min(chunk, size - pos), pos)
        if not data:
            return
        pos += len(data)
        yield data
