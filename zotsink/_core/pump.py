"""Reading lines from a pipe at the speed of ``cat``: one reused buffer, whole lines out.

What limits a single-threaded consumer of a pipe is not Python's per-byte work but the
pipeline: with Linux's default 64 KiB pipe the producer blocks whenever the consumer is busy
writing. So the pipe is enlarged first (:func:`enlarge_pipe`), and input is read with
``readv`` straight into one buffer that is reused for the life of the stream: no
allocation per read, and a batch of whole lines can be written from the buffer itself.

The buffer holds, in order: whole lines already handed out but not yet released (``done``),
whole lines waiting (``ready``), and the unterminated tail of the last line. A line longer
than ``max_line`` is never held whole: once its head passes the limit the reader says so
(:attr:`LineReader.overlong`) and the caller drains it piece by piece.

:class:`LineCutter` is the same cut, with the same over-limit policy, for pipes read
elsewhere in pieces (``zotsink run``: a task's stdout and stderr, a function worker's
prints), where many small pipes share one poll loop and a reused buffer per pipe would cost
more than it saves. Between them, these two are the only code that looks for newlines in
bytes read from a pipe.
"""

from __future__ import annotations

import fcntl
import os
import stat
from typing import Final, Protocol

__all__ = ["LineCutter", "LineReader", "LineSink", "enlarge_pipe", "pad_heap"]

#: ``fcntl.F_SETPIPE_SZ`` (Python 3.10+; the Linux value before that).
F_SETPIPE_SZ: Final = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ: Final = getattr(fcntl, "F_GETPIPE_SZ", 1032)
#: The pipe size asked for: big enough that the producer keeps writing while a batch of
#: about 1 MiB goes to OUT, small enough to stay under the default per-user pipe quota.
PIPE_SIZE: Final = 1 << 20
#: The smallest read worth a system call; below it the buffer is compacted or grown.
MIN_READ: Final = 1 << 16
#: The buffer's starting size. It doubles as a stream needs (a batch of 1 MiB and a pipe's
#: worth of reading take it to 4 MiB within the first reads); a one-record task does not
#: pay for zeroing 4 MiB, a share of its own start-up it would notice.
START_SIZE: Final = 1 << 18
#: Free memory glibc's malloc is asked to keep at the top of the heap (:func:`pad_heap`).
HEAP_PAD: Final = 16 << 20
#: M_TOP_PAD, mallopt's parameter number in glibc's malloc.h.
_M_TOP_PAD: Final = -2


def pad_heap(size: int = HEAP_PAD) -> bool:
    """Ask glibc's malloc to keep ``size`` bytes free at the top of the heap; whether it did.

    A stream that stamps or checks its lines makes a new object of about a block per batch.
    glibc gives freed memory at the top of the heap back to the kernel beyond 128 KiB and
    maps it again, a zero-filled page at a time, for the next batch: those page faults took
    a large share of a stamped stream's time. It costs ``import ctypes``, so the stream asks
    only once it has seen enough input. Elsewhere than glibc nothing changes.
    """
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        import ctypes

        return bool(ctypes.CDLL(None).mallopt(_M_TOP_PAD, size))
    except (ValueError, OSError, AttributeError, ImportError):
        return False  # no such confstr name, no libc handle, no mallopt, no ctypes


def enlarge_pipe(fd: int, size: int = PIPE_SIZE) -> int:
    """Grow the pipe behind ``fd`` to ``size`` bytes (at most the system's limit).

    Returns the pipe's size after the attempt, or 0 when ``fd`` is not a pipe. A refusal
    (an unprivileged user over ``/proc/sys/fs/pipe-user-pages-soft``, an old kernel) is not
    an error: the stream works with the pipe it has, only slower.
    """
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return 0
    except OSError:
        return 0
    try:
        with open("/proc/sys/fs/pipe-max-size", "rb") as f:
            size = min(size, int(f.read()))
    except (OSError, ValueError):
        pass  # not Linux, or no /proc: ask, and let the kernel refuse
    try:
        return fcntl.fcntl(fd, F_SETPIPE_SZ, size)
    except OSError:
        try:
            return fcntl.fcntl(fd, F_GETPIPE_SZ)
        except OSError:
            return 0


class LineReader:
    """Whole lines from ``fd``, read into one reused buffer.

    :meth:`fill` reads once; :meth:`ready` is the span of whole lines not yet handed out;
    :meth:`release` frees what the caller is done with, so the buffer can be reused.
    Views from :meth:`view` are valid until the next :meth:`fill`.
    """

    def __init__(self, fd: int, max_line: int) -> None:
        self.fd = fd
        self.max_line = max_line
        self.buf = bytearray(START_SIZE)
        self.start = 0  # first byte not yet released
        self.cut = 0  # end of the whole lines (just after the last newline seen)
        self.end = 0  # end of the data read
        self.eof = False
        #: The tail is a line over ``max_line``: take it with ``take_tail(drain=True)``.
        self.overlong = False
        #: Draining an over-long line: each fill() moves its next bytes to ``piece``
        #: (not kept in the buffer) until its newline comes, which sets ``drained``.
        self.draining = False
        self.piece = b""
        self.drained = False
        self.pipe_size = enlarge_pipe(fd)

    # -- what the buffer holds ---------------------------------------------------------
    def ready(self) -> int:
        """Bytes of whole lines read and not yet released."""
        return self.cut - self.start

    def tail_size(self) -> int:
        return self.end - self.cut

    def view(self, a: int, b: int) -> memoryview:
        """The buffer's bytes from ``a`` to ``b`` (offsets as in :attr:`start`, :attr:`cut`)."""
        return memoryview(self.buf)[a:b]

    def release(self, upto: int) -> None:
        """The caller is done with everything before offset ``upto`` (at most :attr:`cut`).

        When that is every whole line, the short tail moves to the front at once, so that
        the next read has the whole buffer (reads cut short by the buffer's end were half
        of all reads, and moving unwritten lines out of their way cost more than that).
        """
        self.start = upto
        if upto == self.cut and self.end - upto <= MIN_READ:
            keep = self.end - upto
            self.buf[:keep] = self.buf[upto : self.end]
            self.start, self.cut, self.end = 0, 0, keep

    def batch_end(self, size: float) -> int:
        """Where the next batch of whole lines ends: after about ``size`` bytes (a read may
        bring more), or after one line if that is longer."""
        if self.start + size >= self.cut:  # size may be infinite: --whole
            return self.cut
        end = self.start + int(size)
        nl = self.buf.rfind(b"\n", self.start, end)
        return (nl if nl >= 0 else self.buf.find(b"\n", end, self.cut)) + 1

    def take_tail(self) -> bytes:
        """The unterminated tail, removed from the buffer (the last line, at end of input
        or at a stop)."""
        tail = bytes(self.buf[self.cut : self.end])
        self.end = self.cut
        return tail

    def terminate(self) -> None:
        """End the tail with a newline: the input ended without one."""
        if self.end == len(self.buf):
            self.buf += b"\n"
        else:
            self.buf[self.end] = 0x0A
        self.end += 1
        self.cut = self.end

    def drain_tail(self) -> memoryview:
        """The tail of a line over the limit, to be copied out before the next :meth:`fill`;
        from then on the rest of that line goes to :attr:`piece`, not to the buffer."""
        view = memoryview(self.buf)[self.cut : self.end]
        self.end = self.cut
        self.overlong = False
        self.draining = True
        return view

    # -- reading -----------------------------------------------------------------------
    def fill(self) -> int:
        """Read once into the buffer; the bytes read (0 at end of input).

        The read blocks only if ``fd`` has nothing to read: call it when ``poll`` says so.
        """
        if len(self.buf) - self.end < MIN_READ:
            self._make_room()
        # Never read past the point where the tail would be over the limit: then no whole
        # line in the buffer is ever longer than max_line, and one that would be is seen
        # as soon as max_line + 1 of its bytes are in.
        stop = len(self.buf) if self.draining else min(len(self.buf), self.cut + self.max_line + 1)
        with memoryview(self.buf) as v:
            got = os.readv(self.fd, [v[self.end : stop]])
        if not got:
            self.eof = True
            return 0
        old = self.end
        self.end += got
        self.piece, self.drained = b"", False
        if self.draining:
            # The next bytes continue a line over the limit: out of the buffer with them.
            nl = self.buf.find(b"\n", old, self.end)
            stop = self.end if nl < 0 else nl
            self.piece = bytes(self.buf[old:stop])
            if nl < 0:
                self.end = old
                return got
            rest = self.end - nl - 1
            self.buf[old : old + rest] = self.buf[nl + 1 : self.end]
            self.end = old + rest
            self.draining, self.drained = False, True
        # The new whole lines end at the last newline of what was just read. rfind is C's
        # memrchr: it does not look at the bytes before that newline.
        nl = self.buf.rfind(b"\n", old, self.end)
        if nl >= 0:
            self.cut = nl + 1
        self.overlong = self.end - self.cut > self.max_line
        return got

    def _make_room(self) -> None:
        # Move what is still needed to the front; grow only if it fills the buffer (a
        # batch larger than the buffer, or a long line arriving).
        keep = self.end - self.start
        if self.start and len(self.buf) - keep >= MIN_READ:
            self.buf[:keep] = self.buf[self.start : self.end]
        else:
            # Doubling, but no further than a line at the limit needs (unless the caller
            # holds more whole lines than that: its batch).
            need = max(keep + MIN_READ, min(2 * len(self.buf), self.max_line + 2 * MIN_READ))
            new = bytearray(need)
            new[:keep] = self.buf[self.start : self.end]
            self.buf = new
        self.cut -= self.start
        self.end -= self.start
        self.start = 0


class LineSink(Protocol):
    """Where a :class:`LineCutter` puts what it cut."""

    def lines(self, block: bytes) -> None:
        """Whole lines, each ending in a newline, none over the limit."""

    def long_begin(self, head: bytes) -> None:
        """A line over the limit begins with ``head`` (more than ``max_line`` bytes, or the
        whole line when it came in one piece)."""

    def long_more(self, piece: bytes) -> None:
        """The next bytes of that line (never its newline)."""

    def long_end(self, size: int, how: str) -> None:
        """That line ended after ``size`` bytes: at its newline (``how`` empty) or where
        the input stopped (``how`` says why)."""


class LineCutter:
    """Whole lines out of the pieces of one pipe, read elsewhere: the unfinished last line
    waits here; a line over ``max_line`` is never held whole (as in :class:`LineReader`)
    but handed on piece by piece."""

    __slots__ = ("_long", "_tail", "max_line")

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._tail = bytearray()  # the unfinished last line
        self._long = -1  # bytes so far of a line over the limit; -1: none

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished line wait (or a line over the limit has not ended)."""
        return bool(self._tail) or self._long >= 0

    def feed(self, chunk: bytes, sink: LineSink) -> None:
        """Cut the next piece of the pipe's bytes."""
        if self._long >= 0:
            nl = chunk.find(b"\n")
            if nl < 0:
                self._long += len(chunk)
                sink.long_more(chunk)
                return
            if nl:
                sink.long_more(chunk[:nl])
            size, self._long = self._long + nl, -1
            sink.long_end(size, "")
            chunk = chunk[nl + 1 :]
        nl = chunk.rfind(b"\n")
        if nl < 0:
            self._tail += chunk
            if len(self._tail) > self.max_line:
                head, self._tail = bytes(self._tail), bytearray()
                self._long = len(head)
                sink.long_begin(head)
            return
        if self._tail:
            block = bytes(self._tail) + chunk[: nl + 1]
            self._tail = bytearray(chunk[nl + 1 :])
        else:
            block = chunk if nl + 1 == len(chunk) else chunk[: nl + 1]
            self._tail = bytearray(chunk[nl + 1 :])
        self._whole(block, sink)
        if len(self._tail) > self.max_line:
            head, self._tail = bytes(self._tail), bytearray()
            self._long = len(head)
            sink.long_begin(head)

    def _whole(self, block: bytes, sink: LineSink) -> None:
        if len(block) <= self.max_line + 1:
            sink.lines(block)  # no line in it can be over the limit
            return
        at = 0
        while at < len(block):
            nl = block.find(b"\n", at)
            if nl - at > self.max_line:
                sink.long_begin(block[at:nl])
                sink.long_end(nl - at, "")
                at = nl + 1
                continue
            # the lines up to the next one over the limit, as one block
            end = at
            while end < len(block):
                nl = block.find(b"\n", end)
                if nl - end > self.max_line:
                    break
                end = nl + 1
            sink.lines(block[at:end])
            at = end

    def finish(self, sink: LineSink, how: str) -> bool:
        """The input stopped (its end, or a cut-off: ``how`` says why, for a line over the
        limit): the unfinished line goes with a newline added. Whether one was added."""
        if self._long >= 0:
            size, self._long = self._long, -1
            sink.long_end(size, how)
            return False
        if not self._tail:
            return False
        block, self._tail = bytes(self._tail) + b"\n", bytearray()
        self._whole(block, sink)
        return True
