"""Small file operations that several modules need, written once."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator

__all__ = ["check_side_file", "fsync_dir", "pread_chunks", "write_all"]


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


def check_side_file(st: os.stat_result, path: str) -> str | None:
    """Why the side file at ``path`` (``st``: its fstat) must not be trusted, or None.

    A side file (``OUT.rejects``, a spill file, a journal) is only ever a regular file. In
    a directory where others may create files but not remove them (sticky and group- or
    world-writable: ``/tmp``, a shared scratch), anyone can create a file at a side file's
    name before its owner does: to receive the records written to it, or to feed records
    or a forged journal to recover. There it must belong to the user or to the directory's
    owner, the rule of the kernel's ``protected_regular``. Elsewhere whoever could create
    it could replace OUT itself, so its owner proves nothing and is not checked.
    """
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid == os.geteuid():
        return None
    directory = os.path.dirname(os.path.abspath(path))
    try:
        d = os.stat(directory)
    except OSError:
        return f"it belongs to {_user(st.st_uid)}, not to you, and {directory} cannot be checked"
    shared = d.st_mode & stat.S_ISVTX and d.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if not shared or st.st_uid == d.st_uid:
        return None
    return (
        f"it belongs to {_user(st.st_uid)}, not to you, in {directory}, where others may "
        "create files"
    )


def _user(uid: int) -> str:
    import pwd  # only on this error path

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user {uid}"
