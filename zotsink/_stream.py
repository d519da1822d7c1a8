"""Streaming records from a pipe into OUT: ``producer | zotsink out.tsv``.

Input is read into one reused buffer (:class:`~zotsink._core.pump.LineReader`, which also
enlarges the pipe) and appended in batches of whole lines: when a batch reaches
``batch_bytes``, when its oldest line is ``flush_interval`` old, and at the end. Lines that
pass through unchanged wait in the read buffer itself and are checked and written from it
(no copy in Python); stamped or key:value lines are encoded as they arrive (a stamp's time
is when its line was read) and wait in a :class:`Batch`. Refused lines go to
``OUT.rejects``, batches that cannot be appended to spill files. Every wait (for input, for
the lock) looks at the stop flag and the batch's age; an unexpected error after reading
began first saves what was held.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import time
import warnings
from collections.abc import Sequence
from typing import Final, NamedTuple

from ._core import sidefiles
from ._core.batch import Batch
from ._core.header import make_encoder
from ._core.pump import LineReader
from ._core.records import MAX_LINE, Encoder, format_for
from ._core.writer import Writer
from ._input import UNCOUNTED, BlockEncoder, LongLine, check_not_out, check_options, lines_of
from ._signals import STOP_LOCK_TIMEOUT, Stopper, append_until_stopped
from .errors import (
    HeaderMismatch,
    LockError,
    UsageError,
    WriteError,
    ZotsinkError,
    ZotsinkWarning,
)

__all__ = ["StreamReport", "append_stream"]

#: Default batch size: about 1 MiB. Each batch costs a lock hold (flock, fstat, stat; an
#: fsync on network filesystems) and Python around it, about 85 us a batch in a profile of
#: 88 MB streamed in 64 KiB batches; --flush-interval, not the size, bounds how long a
#: record waits in memory.
BATCH_BYTES: Final = 1 << 20
#: Reason given for an unterminated line cut off by a stop signal.
INCOMPLETE: Final = "incomplete at stop"


class StreamReport(NamedTuple):
    """What one stream did."""

    records: int | None  # appended to OUT; None when lines were not counted (``count``)
    rejected: int  # written to OUT.rejects
    spilled: int  # saved to spill files instead of OUT
    spill_paths: tuple[str, ...]
    rejects_path: str | None
    signal: int | None  # the stop signal, if one came
    lock_wait: float  # seconds spent waiting for the lock
    error: Exception | None  # the first LockTimeout/WriteError/HeaderMismatch, if any
    unterminated: bool = False  # the input ended without a newline: one was added
    appended: int = 0  # bytes appended to OUT


def append_stream(
    path: str | os.PathLike[str],
    infd: int | None,
    *,
    data: bytes | None = None,
    format: str | None = None,
    columns: Sequence[str] | None = None,
    kv: str | None = None,
    stamp: Sequence[str] = (),
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
    batch_bytes: int = BATCH_BYTES,
    flush_interval: float = 1.0,
    whole: bool = False,
    stopper: Stopper | None = None,
    count: bool = False,
) -> StreamReport:
    """Append the lines read from ``infd`` until end of input (or a stop signal).

    With ``data`` (lines given at once, e.g. command-line arguments) ``infd`` is not read.
    Option values are checked, and standard input compared with OUT, before anything is
    read: :class:`UsageError`. After that, whatever goes wrong, every line read is in OUT,
    in ``OUT.rejects`` or in a spill file named by the report or by the error raised.

    Lines that pass through unchanged (no field count, stamp or key:value parse) are not
    counted unless ``count`` is true: the report's ``records`` is then None, and refused
    lines are named by the input byte where they start (``byte 265: NUL byte``) instead of
    their line number. Counting costs about as much CPU as copying the lines.
    """
    out = os.fspath(path)
    fmt = format_for(out, format)
    check_options(timeout, batch_bytes, flush_interval, kv)
    if data is None:
        assert infd is not None
        check_not_out(infd, out)
    # Stamped raw lines into a tsv/csv OUT need the data columns for the header: without
    # them OUT would get no header at all, and verify would call its first record damaged.
    stamped_raw = bool(stamp) and kv is None and columns is None and fmt != "lines"
    enc = make_encoder(out, fmt, columns, stamp, adopt=kv is not None or stamped_raw)
    if stamped_raw and enc.columns is None:
        raise UsageError(
            f"--stamp into {out} ({fmt}) needs the names of the data columns for its header: "
            "give --columns NAME,... (or --kv for key:value input), or append to a .txt "
            "file (lines format, no header)"
        )
    writer = Writer(out, lock=lock, sync=sync, header=enc.header_line())
    eng = _Engine(writer, enc, kv, timeout, batch_bytes, flush_interval, whole, stopper, count)
    try:
        if data is not None:
            eng.take_data(data)
        else:
            assert infd is not None
            eng.pump(LineReader(infd, MAX_LINE))
    except BaseException as e:
        eng.rescue(e)  # saves what was read; raises what the caller should see
    finally:
        writer.close()
    return StreamReport(
        records=None if eng.uncounted else eng.records,
        rejected=eng.rejected,
        spilled=eng.spilled,
        spill_paths=tuple(eng.spills),
        rejects_path=(eng.rejects_file or sidefiles.rejects_path(out)) if eng.rejected else None,
        signal=eng.signum,
        lock_wait=writer.lock_wait,
        error=eng.error,
        unterminated=eng.unterminated,
        appended=eng.appended,
    )


class _Engine:
    """The read loop and everything it holds: the buffer, the batch, refused lines."""

    def __init__(
        self,
        writer: Writer,
        enc: Encoder,
        kv: str | None,
        timeout: float,
        batch_bytes: int,
        interval: float,
        whole: bool,
        stopper: Stopper | None,
        count: bool = False,
    ) -> None:
        self.writer = writer
        self.enc = enc
        self.timeout = timeout
        self.stopper = stopper
        self.whole = whole
        self.batch = Batch(batch_bytes, math.inf if whole else interval)
        # Lines wait in the read buffer until their batch is due, then are checked and
        # stamped (one time: when appended) as one block. key:value lines are parsed at once.
        self.raw = kv is None
        self.blocks = BlockEncoder(enc, kv, count)
        self.reader: LineReader | None = None
        self.raw_since = 0.0  # when the oldest line waiting in the read buffer came
        self.records = self.rejected = self.spilled = self.appended = 0
        self.uncounted = False  # some lines were appended without being counted
        self.spills: list[str] = []
        self.rejects_file: str | None = None
        self.error: Exception | None = None
        self.signum: int | None = None
        self.unterminated = False
        self.long: LongLine | None = None

    def take_data(self, data: bytes) -> None:
        if data and not data.endswith(b"\n"):
            data += b"\n"
        block, n = self._encode(data)
        # Lines given at once are few (command-line arguments): counted, even when plain.
        self._add((block, lines_of(block, n)))
        self.flush()

    def pump(self, reader: LineReader) -> None:
        self.reader = reader
        poller = select.poll()
        poller.register(reader.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        if self.stopper is not None:
            poller.register(self.stopper.wakeup_fd, select.POLLIN)
        while not self._stopped():
            wait = self._wait()
            ms = None if wait is None else int(wait * 1000) + 1
            events = dict(poller.poll(ms))
            if self._stopped():
                break
            if reader.fd in events:
                if not reader.fill():
                    break  # end of input
                self._after_read(reader)
            if self._due():
                self.flush()
        self._finish(reader)

    def _stopped(self) -> bool:
        if self.stopper is not None:
            self.signum = self.stopper.signum
        return self.signum is not None

    def _wait(self) -> float | None:
        """Seconds until the oldest line held is due, None when nothing is held."""
        if self.whole:
            return None
        wait = self.batch.wait()
        r = self.reader
        if r is not None and r.cut > r.start:
            raw = max(0.0, self.raw_since + self.batch.max_age - time.monotonic())
            wait = raw if wait is None else min(wait, raw)
        return wait

    def _due(self) -> bool:
        if self.whole:
            return False
        r = self.reader
        if r is not None and r.cut > r.start:  # lines waiting in the read buffer
            size = r.cut - r.start + self.batch.size
            age = time.monotonic() - self.raw_since
            return size >= self.batch.max_bytes or age >= self.batch.max_age or self.batch.due()
        return self.batch.due()

    def _after_read(self, r: LineReader) -> None:
        if r.piece and self.long is not None:
            self.long.add(r.piece)
        if r.drained and self.long is not None:
            self._long_done(f"over the {MAX_LINE}-byte line limit")
        self._take_ready(r)
        if r.overlong:
            # Lines before the long one are numbered first, then the long one goes out of
            # the buffer, to a temporary file, as it comes: memory stays flat and every
            # wait still looks at the stop flag and the batch's age.
            self.flush()
            self.long = LongLine(self.writer.path, self.blocks.take_line())
            with r.drain_tail() as head:
                self.long.add(head)

    def _take_ready(self, r: LineReader) -> None:
        """New whole lines: parsed now when they are key:value, else left in the buffer."""
        if self.raw:
            if r.cut > r.start and not self.raw_since:
                self.raw_since = time.monotonic()
            return
        while r.cut > r.start:
            stop = r.batch_end(math.inf if self.whole else self.batch.max_bytes)
            with r.view(r.start, stop) as view:
                self._add(self._encode(view, r.buf, r.start))  # parsed: new bytes, no view
            r.release(stop)
            if not self.whole and self.batch.due():
                self.flush()

    def _finish(self, r: LineReader) -> None:
        stopping = self.signum is not None
        if self.long is not None:
            why = f"over the {MAX_LINE}-byte line limit"
            self._long_done(f"{INCOMPLETE} ({why})" if stopping else why)
        if r.end > r.cut:
            if stopping:
                # A producer stopped mid-line: the part is not a record. OUT.rejects keeps it.
                self.flush(stopping)
                where = self.blocks.take_line()
                self.blocks.rejects.append((f"{where}: {INCOMPLETE}", r.take_tail()))
            else:
                # Many producers omit the last newline: the line is a record; say so.
                self.unterminated = True
                r.terminate()
                self._take_ready(r)
        self.flush(stopping)

    def _add(self, encoded: tuple[bytes | memoryview, int]) -> None:
        data, n = encoded
        if n:
            self.batch.add(data, n)

    def flush(self, stopping: bool = False) -> None:
        """Append everything held (read buffer first, then the batch), and refused lines."""
        r = self.reader
        while r is not None and r.cut > r.start:
            stop = r.batch_end(math.inf if self.whole else self.batch.max_bytes)
            with r.view(r.start, stop) as view:
                data, n = self._encode(view, r.buf, r.start)
                # Lines that pass through are written from the read buffer itself (one
                # copy less per byte); they are copied only if they must be saved elsewhere.
                self._append(data, n, stopping)
            r.release(stop)  # only now: if the append raised, the rescue saves these lines
            self.raw_since = 0.0
        if self.batch:
            data, n = self.batch.take()
            self._append(data, n, stopping)
        if self.blocks.rejects:
            items, self.blocks.rejects = self.blocks.rejects, []
            self._reject(items, stopping)

    def _append(self, data: bytes | memoryview, n: int, stopping: bool) -> None:
        if not data:
            return
        try:
            append_until_stopped(
                self.writer, data, self._timeout(stopping), None if stopping else self.stopper
            )
            self.appended += len(data)
            if n == UNCOUNTED:
                self.uncounted = True
            else:
                self.records += n
        except (LockError, WriteError) as e:  # LockTimeout is a LockError
            # Counted now if they were not: what is saved elsewhere is always told in records.
            self.spilled += lines_of(data, n)
            if e.spill_path and e.spill_path not in self.spills:
                self.spills.append(e.spill_path)
            self.error = self.error or e
            if e.spill_path is None:
                raise  # saved nowhere: the caller must say so loudly
        except HeaderMismatch as e:
            # Nothing was written to OUT; the records went to OUT.rejects.
            self.rejects_file = e.spill_path
            self.rejected += lines_of(data, n)
            self.error = self.error or e

    def _reject(self, items: list[tuple[str, bytes]], stopping: bool) -> None:
        """Append refused lines to OUT.rejects (or, if that fails, to its spill file)."""
        w, timeout = self.writer, self._timeout(stopping)
        try:
            self.rejects_file = sidefiles.reject(
                w.path, items, lock=w.locker.requested, timeout=timeout
            )
        except (LockError, WriteError) as e:
            if e.spill_path is None:
                raise  # saved nowhere: the caller must say so loudly
            self.rejects_file = e.spill_path
            self.error = self.error or e
        self.rejected += len(items)

    def _timeout(self, stopping: bool) -> float:
        return min(self.timeout, STOP_LOCK_TIMEOUT) if stopping else self.timeout

    def _long_done(self, why: str) -> None:
        long, self.long = self.long, None
        assert long is not None
        self.blocks.skip(long.size + 1)  # the line and its newline
        long.finish(f"{long.where}: {why}", lock=self.writer.locker.requested, timeout=self.timeout)
        self.rejected += 1

    def _encode(
        self, block: bytes | memoryview, buf: bytearray | None = None, at: int = 0
    ) -> tuple[bytes | memoryview, int]:
        encoded = self.blocks.encode(block, buf, at)
        if self.writer.header is None and self.enc.columns is not None:
            self.writer.set_header(self.enc.header_line())  # the first key:value line named them
        return encoded

    def rescue(self, e: BaseException) -> None:
        """An error escaped the loop (a bug, an I/O error on the input, an interrupt without
        a stopper): save every line held to a spill file, then raise, saying where."""
        held, n = [], 0
        if self.batch:
            data, n = self.batch.take()
            held.append(bytes(data))
        r = self.reader
        if r is not None and r.end > r.start:
            if r.end > r.cut:
                r.terminate()  # a part line is kept too: the spill file is read by a person
            held.append(bytes(r.view(r.start, r.end)))
            n += held[-1].count(b"\n")
        out = self.writer.path
        saved = ""
        if held:
            note = WriteError(f"{out}: records held when the stream stopped", path=out)
            try:
                sidefiles.save(self.writer, note, b"".join(held))
                saved = (
                    f"; the {n} records read and not yet written were saved to {note.spill_path}"
                )
            except ZotsinkError as se:
                saved = f"; the {n} records read and not yet written were lost: {se.message}"
        with contextlib.suppress(ZotsinkError):  # the error below is what the caller must see
            if self.long is not None:
                self._long_done(f"{INCOMPLETE} (the stream stopped on an error)")
            if self.blocks.rejects:
                self._reject(self.blocks.rejects, stopping=True)
        if not isinstance(e, Exception):
            if saved:  # an interrupt goes on as it came, but not in silence
                msg = f"{out}: stopped by {type(e).__name__}{saved}"
                warnings.warn(ZotsinkWarning(msg), stacklevel=3)
            raise e
        if isinstance(e, ZotsinkError):
            e.message += saved
            raise e
        raise WriteError(
            f"{out}: the stream stopped on an unexpected error ({type(e).__name__}: {e}){saved}",
            path=out,
            spill_path=note.spill_path if held else None,
        ) from e
