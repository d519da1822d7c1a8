"""Reading tiny files for collect: in order, whole, and overlapped with parsing.

Each file is read with ``os.open`` and ``os.read`` (no file objects: on tiny files the
wrappers cost more than the reads), relative to its directory's descriptor when a walk found
it, and never past ``--max-file-size``. ``jobs > 1`` adds a thread pool reading ahead, for
network filesystems where every open is a round trip (a reader blocked on the network holds
no GIL).

Reading and parsing are each about half of the work, so when the process may fork (no other
threads: forking a threaded process can deadlock) the reads run in a forked reader process
that streams the files to the parser through a pipe, one frame per file, in order: reading
and parsing then overlap on two cores (:func:`read_items`). The tasks (and the directory walk
behind them) are consumed in the reader; the walk's directory descriptors live there too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import struct
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Final, NamedTuple, Optional

from .._core.fileio import write_all
from ..errors import InputError

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
    "read_items",
    "size_text",
    "too_big",
]

#: Whether collect may fork a reader process (tests turn it off to try the in-process path;
#: read by :func:`read_items` at each call).
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
            data, mtime = read_file(
                path, follow, want_stat, kind == "?", base=base, d=d, limit=limit
            )
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


# -- the forked reader ----------------------------------------------------------------------
#: Frame head: kind, mtime_ns, then the lengths of name, path (empty: derived) and payload.
_FRAME: Final = struct.Struct("<BqIII")
_DATA, _SKIP, _FATAL, _ALREADY, _ERROR = range(5)
#: Bytes gathered in the reader before one write to the pipe, and the pipe's size (the most
#: an unprivileged process may ask for by default).
_PIPE_CHUNK: Final = 1 << 16
_PIPE_SIZE: Final = 1 << 20


def read_items(
    tasks: Iterable[Task],
    jobs: int,
    want_stat: bool,
    what: str,
    root: str = "",
    prefix: str = "",
    limit: int = MAX_FILE_SIZE,
) -> Iterator[Item]:
    """The tasks' files, read in order; in a forked reader process when that is safe.

    ``tasks`` is consumed in the reader, so a directory walk behind it runs there too.
    ``what`` names the source for an error in the reader. Where a task's path is ``root``
    followed by its name without ``prefix`` (a walk), the path does not cross the pipe.
    A file over ``limit`` bytes is skipped unread.
    """
    if not FORK or not hasattr(os, "fork") or not single_threaded():
        return in_process(tasks, jobs, want_stat, limit, prefix)
    return _forked(tasks, jobs, want_stat, what, root, prefix, limit)


def single_threaded() -> bool:
    """Whether this process has one thread, counting those Python did not start (a C
    library's, or ``_thread``'s): a lock one of them holds at the fork stays held for ever
    in the child. Linux lists them all in /proc/self/task; elsewhere Python's count."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


def _enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _dec(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _code(it: Item) -> tuple[int, bytes]:
    if it.data is not None:
        return _DATA, it.data
    if it.skip is None:
        return _ALREADY, b""
    return (_FATAL if it.fatal else _SKIP), _enc(it.skip)


def _serve(
    wfd: int, tasks: Iterable[Task], jobs: int, want_stat: bool, root: str, prefix: str, limit: int
) -> None:
    """The reader's loop: every file as a frame on the pipe, gathered into large writes."""
    out: list[bytes] = []
    size = 0
    cut = len(prefix)
    pack = _FRAME.pack
    os_open, os_read, os_close = os.open, os.read, os.close
    # the usual case, kept lean (about a third of the reader's time is Python around four
    # system calls): a local walk, one file at a time, no stat
    lean = jobs <= 1 and not want_stat
    source: Iterable[Task | Item] = (
        tasks if lean else in_process(tasks, jobs, want_stat, limit, prefix)
    )
    for x in source:
        if lean:
            name, base, path, kind, follow, d = x  # type: ignore[misc]
            data = None
            if kind == "f" and not follow:
                try:
                    if d is None:
                        fd = os_open(path, _NOFOLLOW)
                    else:
                        fd = os_open(base, _NOFOLLOW, dir_fd=d.fd)
                    try:
                        data = os_read(fd, _READ)
                        if data:
                            more = os_read(fd, _READ)  # a short read is no promise of EOF
                            if more:
                                data = _rest(fd, data, more, limit)
                    finally:
                        os_close(fd)
                except (OSError, TooBig):
                    data = None  # item() below finds out why
            if data is not None:
                code, payload, mtime = _DATA, data, 0
            else:
                it = item(name, base, path, kind, follow, d, False, limit)
                (code, payload), mtime = _code(it), it.mtime_ns
        else:
            it = x  # type: ignore[assignment]
            name, path, mtime = it.name, it.path or "", it.mtime_ns
            code, payload = _code(it)
        n = name.encode("utf-8", "surrogateescape")
        p = b"" if path == root + name[cut:] else _enc(path)
        out += (pack(code, mtime, len(n), len(p), len(payload)), n, p, payload)
        size += len(n) + len(p) + len(payload)
        if size >= _PIPE_CHUNK:
            write_all(wfd, b"".join(out))
            out, size = [], 0
    if out:
        write_all(wfd, b"".join(out))


def _big_pipe() -> tuple[int, int]:
    """A pipe that holds a good stretch of files: with the default 64 KiB the reader could
    run only a few hundred files ahead, and reader and parser would mostly take turns."""
    rfd, wfd = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(wfd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_SIZE)
    except (ImportError, OSError):
        pass  # not Linux, or over the limit: the default size works, only slower
    return rfd, wfd


def _forked(
    tasks: Iterable[Task],
    jobs: int,
    want_stat: bool,
    what: str,
    root: str,
    prefix: str,
    limit: int,
) -> Iterator[Item]:
    rfd, wfd = _big_pipe()
    pid = os.fork()
    if pid == 0:  # the reader
        code = 0
        try:
            os.close(rfd)
            _serve(wfd, tasks, jobs, want_stat, root, prefix, limit)
        except BaseException as e:  # report it to the parser, which raises it
            code = 1
            try:
                msg = _enc(f"{type(e).__name__}: {e}")
                write_all(wfd, _FRAME.pack(_ERROR, 0, 0, 0, len(msg)) + msg)
            except BaseException:
                pass
        finally:
            os._exit(code)  # no atexit handlers, no flushing of the parent's buffers
    os.close(wfd)
    return _receive(rfd, pid, what, root, prefix)


def _receive(rfd: int, pid: int, what: str, root: str, prefix: str) -> Iterator[Item]:
    head = _FRAME.size
    cut = len(prefix)
    unpack = _FRAME.unpack_from
    new = tuple.__new__
    buf = b""
    pos = 0
    finished = False
    try:
        while True:
            chunk = os.read(rfd, 1 << 20)
            if not chunk:
                break
            buf = buf[pos:] + chunk if pos < len(buf) else chunk
            pos, end = 0, len(buf)
            while pos + head <= end:
                code, mtime, ln, lp, ld = unpack(buf, pos)
                a = pos + head
                b = a + ln
                c = b + lp
                stop = c + ld
                if stop > end:
                    break
                pos = stop
                name = buf[a:b].decode("utf-8", "surrogateescape")
                path = _dec(buf[b:c]) if lp else root + name[cut:]
                base = name[name.rfind("/") + 1 :]
                if code == _DATA:
                    # tuple.__new__ straight: Item()'s own __new__ is Python code, run once a file
                    data, walked = buf[c:stop], "" if lp else root
                    yield new(Item, (name, base, data, None, False, path, mtime, ld, walked))
                elif code == _ALREADY:
                    yield Item(name, base, None, None, False, path, 0, 0)
                elif code == _ERROR:
                    raise InputError(f"cannot read {what}: {_dec(buf[c:stop])}", path=what)
                else:
                    yield Item(name, base, None, _dec(buf[c:stop]), code == _FATAL, path, 0, 0)
        finished = pos == len(buf)
    finally:
        os.close(rfd)
        if not finished:  # the parser stopped early: the reader has nobody to read for
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        # a reader killed from outside (out of memory?) must not pass for a complete read
        raise InputError(f"the reader of {what} ended with status {code}: run collect again")
