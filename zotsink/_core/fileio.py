"""Small file operations that several modules need, written once."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator

__all__ = ["RefusedFile", "fsync_dir", "open_for_append", "pread_chunks", "write_all"]


class RefusedFile(OSError):
    """A file zotsink will not append to (not a regular file, a planted link or file);
    its ``strerror`` says why and what to do."""


def write_all(fd: int, data: bytes | bytearray | memoryview) -> int:
    """Write all of ``data``: one write() unless the kernel cuts it short; the bytes written."""
    done = os.write(fd, data)
    if done == len(data):  # the common case: one call, no view
        return done
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


def open_for_append(path: str, mode: int, *, side_file: bool = False) -> tuple[int, bool]:
    """Open (or create) ``path`` for locked appends: ``(fd, readable)``.

    O_RDWR where allowed, so the torn-tail and header checks can pread the same descriptor
    (opening a second one would drop an fcntl lock the moment it is closed); else O_WRONLY.
    Only a regular file is ever appended to: a FIFO or device planted at the name would
    swallow the records or hang the writer (O_NONBLOCK keeps the open itself from hanging).
    A side file (OUT.rejects) is never followed through a symbolic link and must belong to
    this user; OUT itself is followed through a link only where the kernel's
    protected_symlinks rule would allow it (see :func:`_link_allowed`), whatever the sysctl.
    Raises ``OSError`` with the errno that says why.
    """
    flags = os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
    if side_file:
        flags |= os.O_NOFOLLOW
    elif not _link_allowed(path):
        raise RefusedFile(
            errno.EPERM,
            "it is a symbolic link in a shared sticky directory that belongs to neither you "
            "nor the directory's owner, so it is not followed; remove it",
        )
    try:
        fd = os.open(path, flags | os.O_RDWR, mode)
        readable = True
    except PermissionError:
        fd = os.open(path, flags | os.O_WRONLY, mode)
        readable = False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(errno.EINVAL, "it is not a regular file; remove it")
        if side_file and st.st_uid != os.geteuid():
            # In a shared directory another user may plant a file at OUT.rejects and read
            # every record refused there: side files are only ever our own.
            raise RefusedFile(
                errno.EPERM,
                f"it belongs to uid {st.st_uid}, not to you: a side file is only ever your "
                "own; remove it or choose another OUT",
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, readable


def _link_allowed(path: str) -> bool:
    """Whether a symbolic link at ``path`` may be followed (True when it is no link).

    The kernel's protected_symlinks rule, applied whether or not the sysctl is on: in a
    sticky, world-writable directory (/tmp, a shared scratch directory) a link is followed
    only if it belongs to this user or to the directory's owner. Otherwise another user
    could point OUT at the victim's own private file. Nobody else can replace a link that
    passed the check: the sticky bit lets only its owner remove or rename it.
    """
    try:
        link = os.lstat(path)
    except OSError:
        return True  # nothing there yet (O_CREAT makes a file) or unreadable: open decides
    if not stat.S_ISLNK(link.st_mode):
        return True
    try:
        parent = os.stat(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    shared = parent.st_mode & stat.S_ISVTX and parent.st_mode & stat.S_IWOTH
    return not shared or link.st_uid in (os.geteuid(), parent.st_uid)
