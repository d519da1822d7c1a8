"""The forked reader: collect's files read in a child process and streamed to the parser.

Reading and parsing are each about half of the work, so when the process may fork (no other
threads: forking a threaded process can deadlock) the reads run in a forked reader process
that streams the files to the parser through a pipe, one frame per file, in order: reading
and parsing then overlap on two cores. The tasks (and the directory walk behind them) are
consumed in the reader; the walk's directory descriptors live there too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import threading
from collections.abc import Iterable, Iterator
from typing import Final

from .._core.fileio import write_all
from ..errors import InputError
from . import read
from .read import _NOFOLLOW, _READ, MAX_FILE_SIZE, Item, Task, TooBig, _rest, in_process, item

__all__ = ["read_items"]

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
    if not read.FORK or not hasattr(os, "fork") or not single_threaded():
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
                    fd = os_open(path, _NOFOLLOW) if d is None else \
                        os_open(base, _NOFOLLOW, dir_fd=d.fd)  # fmt: skip
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
                    # tuple.__new__ straight: Item()'s own __new__ is Python, a sixth of this loop
                    yield new(Item, (name, base, buf[c:stop], None, False, path, mtime, ld,
                                     "" if lp else root))  # fmt: skip
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
