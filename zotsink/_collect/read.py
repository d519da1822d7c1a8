"""Reading tiny files for collect: in order, whole, and overlapped with parsing.

Each file is read with ``os.open`` and ``os.read`` (no file objects: on tiny files the
wrappers cost more than the reads), relative to its directory's descriptor when a walk found
it, and never past ``--max-file-size``. ``jobs > 1`` adds a thread pool reading ahead, for
network filesystems where every open is a round trip (a reader blocked on the network holds
no GIL). :mod:`zotsink._collect.pipe` runs all this in a forked reader process.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Final, NamedTuple, Optional

if TYPE_CHECKING:
    from .walk import Dir

__all__ = [
    "ARCHIVE",
    "FORK",
    "LISTED_DIR",
    "MAX_FILE_SIZE",
    "Item",
    "Task",
    "TooBig",
    "in_process",
    "item",
    "read_fd",
    "read_file",
    "size_text",
    "too_big",
]

#: Whether collect may fork a reader process (tests turn it off to try the in-process path;
#: read by :func:`zotsink._collect.pipe.read_items` at each call).
FORK = True
#: Default of ``--max-file-size``: collect is for tiny files, and a file is parsed whole, at
#: about ten times its size in memory; a bigger file (or archive member) is skipped unread.
MAX_FILE_SIZE: Final = 16 << 20
#: Reads in flight per reader thread: enough to hide latency, little memory.
_AHEAD: Final = 32
_READ: Final = 1 << 16
_NOFOLLOW: Final = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_FOLLOW: Final = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK

#: Skip reasons that are messages to the parser, not skips: no file name contains NUL.
ARCHIVE: Final = "\0archive"
LISTED_DIR: Final = "\0directory"
#: Why a directory entry of this kind is skipped.
WHY: Final = {
    "l": "symbolic link, not followed",
    "o": "not a regular file (fifo, socket or device)",
}


class Item(NamedTuple):
    """One file (or archive member) in output order, read or skipped."""

    name: str  # the source column value
    base: str  # the file name: for --name-pattern and format sniffing
    data: bytes | None  # the content; None when skipped or already collected
    skip: str | None  # why it was skipped (None with data None: already collected)
    fatal: bool  # a skip that --strict refuses (cannot be read), not a deliberate one
    path: str | None  # the file on disk (None for archive members)
    mtime_ns: int  # 0 unless asked for
    size: int
    root: str = ""  # for a file found by walking a SOURCE directory: that directory + "/"


#: name, base, path, kind, follow, directory. kind: ``f`` read it, ``?`` read it unless it
#: is a directory, ``s`` already collected, ``a`` an archive (the parser reads it), ``l``
#: symlink, ``o`` other, ``!reason`` cannot be read. follow: open through a symlink (a
#: SOURCE). directory: for a file found by a walk, its open directory: the file is opened as
#: ``base`` relative to it, never by its path (see :mod:`zotsink._collect.walk`).
Task = tuple[str, str, str, str, bool, Optional["Dir"]]


class TooBig(Exception):
    """A file over ``--max-file-size``: it is skipped, not read."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(too_big(size, limit))
        self.reason = too_big(size, limit)


def size_text(n: int) -> str:
    """A size as ``512.0 MiB`` or ``1.0 GiB`` (binary units)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def too_big(size: int, limit: int) -> str:
    return f"{size_text(size)}, over --max-file-size {_limit_text(limit)}"


def _limit_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return size_text(n)


def _open(path: str, base: str, d: Dir | None, flags: int) -> int:
    return os.open(path, flags) if d is None else os.open(base, flags, dir_fd=d.fd)


def read_file(
    path: str,
    follow: bool,
    want_stat: bool,
    check: bool = False,
    *,
    base: str = "",
    d: Dir | None = None,
    limit: int = MAX_FILE_SIZE,
) -> tuple[bytes, int]:
    """The whole content of a small file and its mtime (ns, 0 unless asked for).

    ``follow``: open through a symlink (a SOURCE the user named). ``check`` (implied by
    ``follow``): make sure it is a regular file first; a walk knows that already, a path
    from a list does not (``/dev/zero`` would never end). With ``d``, the file is ``base``
    in that open directory. Raises :class:`TooBig` for a file over ``limit`` bytes.
    """
    fd = _open(path, base, d, _FOLLOW if follow else _NOFOLLOW)
    try:
        mtime = 0
        if want_stat or follow or check:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            mtime = st.st_mtime_ns if want_stat else 0
        return read_fd(fd, limit), mtime
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int) -> bytes:
    """All of an open regular file, or :class:`TooBig` without reading past ``limit``."""
    data = os.read(fd, _READ)
    if data:
        more = os.read(fd, _READ)  # a short read is no promise of EOF (network, FUSE)
        if more:
            data = _rest(fd, data, more, limit)
    return data


def _rest(fd: int, data: bytes, more: bytes, limit: int) -> bytes:
    """The rest of a file that did not fit the first read: read to EOF, up to ``limit``."""
    size = os.fstat(fd).st_size
    if size > limit:
        raise TooBig(size, limit)  # told by its size: not a byte more is read
    parts = [data, more]
    total = len(data) + len(more)
    while more:
        more = os.read(fd, 1 << 20)
        parts.append(more)
        total += len(more)
        if total > limit:  # it grew while being read
            raise TooBig(total, limit)
    return b"".join(parts)


def item(
    name: str,
    base: str,
    path: str,
    kind: str,
    follow: bool,
    d: Dir | None,
    want_stat: bool,
    limit: int = MAX_FILE_SIZE,
) -> Item:
    """The :class:`Item` for one task: the file read, or why not."""
    if kind == "f" or kind == "?":
        try:
            data, mtime = read_file(path, follow, want_stat, kind == "?", base=base, d=d,
                                    limit=limit)  # fmt: skip
        except TooBig as e:
            return Item(name, base, None, e.reason, True, path, 0, 0)
        except IsADirectoryError:
            if kind == "?":
                return Item(name, base, None, LISTED_DIR, False, path, 0, 0)
            return Item(name, base, None, "unreadable: a directory", True, path, 0, 0)
        except OSError as e:
            if e.errno == errno.ELOOP and not follow:  # a symlink, or it became one since listed
                return Item(name, base, None, WHY["l"], False, path, 0, 0)
            return Item(name, base, None, f"unreadable: {e.strerror or e}", True, path, 0, 0)
        return Item(name, base, data, None, False, path, mtime, len(data))
    if kind == "s":
        return Item(name, base, None, None, False, path, 0, 0)
    if kind == "a":
        return Item(name, base, None, ARCHIVE, False, path, 0, 0)
    if kind[0] == "!":
        return Item(name, base, None, kind[1:], True, path, 0, 0)
    return Item(name, base, None, WHY[kind], False, path, 0, 0)


def _with_root(it: Item, task: Task, cut: int) -> Item:
    """A walked file's Item knows its SOURCE directory (for removal by descriptors)."""
    if task[5] is None:
        return it
    path, rel = task[2], task[0][cut:]
    return it._replace(root=path[: len(path) - len(rel)])


def _item(task: Task, want_stat: bool, limit: int, cut: int) -> Item:
    return _with_root(item(*task, want_stat, limit), task, cut)


def in_process(
    tasks: Iterable[Task], jobs: int, want_stat: bool, limit: int, prefix: str = ""
) -> Iterator[Item]:
    cut = len(prefix)
    if jobs <= 1:
        for t in tasks:
            yield _with_root(item(*t, want_stat, limit), t, cut)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(jobs, thread_name_prefix="zotsink-read") as pool:
        window: deque = deque()
        for t in tasks:
            window.append(pool.submit(_item, t, want_stat, limit, cut))
            if len(window) >= jobs * _AHEAD:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()
