"""Streaming records from a pipe into OUT: ``producer | zotsink out.tsv``.

Input is read into one reused buffer (:class:`~zotsink._core.pump.LineReader`, which also
enlarges the pipe) and appended in batches of whole lines: when a batch reaches
``batch_bytes``, when its oldest line is ``flush_interval`` old, and at the end. Lines that
pass through unchanged wait in the read buffer itself and are checked and written from it
(no copy in Python); stamped or key:value lines are encoded as they arrive (a stamp's time
is when its line was read) and wait in a :class:`~zotsink._core.batch.Batch`. Refused lines go to
``OUT.rejects``, batches that cannot be appended to spill files. Every wait (for input, for
the lock) looks at the stop flag and the batch's age; an unexpected error after reading
began first saves what was held.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import warnings
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from ._core import sidefiles
from ._core.blocks import BlockEncoder, LongLine, lines_of
from ._core.header import make_encoder
from ._core.options import BATCH_BYTES, WriteOptions, write_options
from ._core.outcheck import check_input_not_out
from ._core.outlet import Outcome, Outlet
from ._core.pump import LineReader
from ._core.records import MAX_LINE, Encoder, format_for
from ._core.stop import Stopper
from ._core.writer import Writer
from .errors import UsageError, WriteError, ZotsinkError, ZotsinkWarning

__all__ = ["StreamReport", "append_stream"]

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
    outcomes: tuple[Outcome, ...] = ()  # OUT's, as every record writer reports it

    def to_dict(self) -> dict[str, object]:
        d = self._asdict()
        d["spill_paths"] = list(self.spill_paths)
        d["error"] = None if self.error is None else str(self.error)
        d["outcomes"] = [o.to_dict() for o in self.outcomes]
        return d


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
    opts = write_options(
        format=format,
        columns=columns,
        kv=kv,
        stamp=stamp,
        lock=lock,
        sync=sync,
        timeout=timeout,
        batch_bytes=batch_bytes,
        flush_interval=flush_interval,
    )
    if data is None:
        assert infd is not None
        check_input_not_out(infd, out)
    return _stream(out, infd, data, opts, whole=whole, stopper=stopper, count=count)


def _stream(
    out: str,
    infd: int | None,
    data: bytes | None,
    opts: WriteOptions,
    *,
    whole: bool,
    stopper: Stopper | None,
    count: bool,
) -> StreamReport:
    fmt = format_for(out, opts.format)
    kv, columns = opts.kv, opts.columns
    # Stamped raw lines into a tsv/csv OUT need the data columns for the header: without
    # them OUT would get no header at all, and verify would call its first record damaged.
    stamped_raw = bool(opts.stamp) and kv is None and columns is None and fmt != "lines"
    enc = make_encoder(out, fmt, columns, opts.stamp, adopt=kv is not None or stamped_raw)
    if stamped_raw and enc.columns is None:
        raise UsageError(
            f"--stamp into {out} ({fmt}) needs the names of the data columns for its header: "
            "give --columns NAME,... (or --kv for key:value input), or append to a .txt "
            "file (lines format, no header)"
        )
    outlet = Outlet(
        Writer(out, lock=opts.lock, sync=opts.sync, header=enc.header_line()),
        timeout=opts.timeout,
        batch_bytes=math.inf if whole else opts.batch_bytes,
        flush_interval=math.inf if whole else opts.flush_interval,
        stopper=stopper,
    )
    eng = _Engine(outlet, enc, kv, whole, stopper, count)
    try:
        if data is not None:
            eng.take_data(data)
        else:
            assert infd is not None
            eng.pump(LineReader(infd, MAX_LINE))
    except BaseException as e:
        eng.rescue(e)  # saves what was read; raises what the caller should see
    finally:
        outlet.close()
    outlet.repeated_headers = eng.blocks.repeats
    o = outlet.outcome()
    return StreamReport(
        records=o.records,
        rejected=o.rejected,
        spilled=o.spilled,
        spill_paths=o.spill_paths,
        rejects_path=o.rejects_path,
        signal=eng.signum,
        lock_wait=o.lock_wait,
        error=o.error,
        unterminated=eng.unterminated,
        appended=o.appended,
        outcomes=(o,),
    )


class _Engine:
    """The read loop and what it holds: the read buffer, the outlet's batch, refused lines."""

    def __init__(
        self,
        outlet: Outlet,
        enc: Encoder,
        kv: str | None,
        whole: bool,
        stopper: Stopper | None,
        count: bool = False,
    ) -> None:
        self.outlet = outlet
        self.batch = outlet.batch
        self.enc = enc
        self.stopper = stopper
        self.whole = whole
        # Lines wait in the read buffer until their batch is due, then are checked and
        # stamped (one time: when appended) as one block. key:value lines are parsed at once.
        self.raw = kv is None
        self.blocks = BlockEncoder(enc, kv, count)
        self.reader: LineReader | None = None
        self.signum: int | None = None
        self.unterminated = False
        self.long: LongLine | None = None

    def take_data(self, data: bytes) -> None:
        if data and not data.endswith(b"\n"):
            data += b"\n"
        block, n = self._encode(data)
        # Lines given at once are few (command-line arguments): counted, even when plain.
        self._add(block, lines_of(block, n))
        self.flush()

    def pump(self, reader: LineReader) -> None:
        self.reader = reader
        poller = select.poll()
        poller.register(reader.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        if self.stopper is not None:
            poller.register(self.stopper.wakeup_fd, select.POLLIN)
        while not self._stopped():
            wait = None if self.whole else self.batch.wait()
            ms = None if wait is None else int(wait * 1000) + 1
            events = dict(poller.poll(ms))
            if self._stopped():
                break
            if reader.fd in events:
                if not reader.fill():
                    break  # end of input
                self._after_read(reader)
            if not self.whole and self.batch.due():
                self.flush()
        self._finish(reader)

    def _stopped(self) -> bool:
        if self.stopper is not None:
            self.signum = self.stopper.signum
        return self.signum is not None

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
            self.long = LongLine(self.outlet.writer.path, self.blocks.take_line())
            with r.drain_tail() as head:
                self.long.add(head)

    def _take_ready(self, r: LineReader) -> None:
        """New whole lines: parsed now when they are key:value, else left in the buffer."""
        if self.raw:
            self.batch.hold(r.ready())  # they count toward the batch's size and age
            return
        self._each_block(r, self._parse_block)

    def _each_block(
        self, r: LineReader, take: Callable[[LineReader, memoryview, int], None]
    ) -> None:
        """Hand the reader's whole lines to ``take`` in blocks of about a batch, each a view
        and its offset in the buffer, released only once ``take`` is done with it (if it
        raises, the lines stay held and the rescue saves them)."""
        while r.ready():
            at = r.start
            stop = r.batch_end(self.batch.max_bytes)
            with r.view(at, stop) as view:
                take(r, view, at)
            r.release(stop)

    def _parse_block(self, r: LineReader, view: memoryview, at: int) -> None:
        self._add(*self._encode(view, r.buf, at))  # parsed: new bytes, no view

    def _write_block(self, r: LineReader, view: memoryview, at: int) -> None:
        # Lines that pass through are written from the read buffer itself (one copy less
        # per byte); they are copied only if they must be saved elsewhere.
        self.outlet.write(*self._encode(view, r.buf, at))

    def _finish(self, r: LineReader) -> None:
        stopping = self.signum is not None
        if self.long is not None:
            why = f"over the {MAX_LINE}-byte line limit"
            self._long_done(f"{INCOMPLETE} ({why})" if stopping else why)
        if r.tail_size():
            if stopping:
                # A producer stopped mid-line: the part is not a record. OUT.rejects keeps it.
                self.flush()
                where = self.blocks.take_line()
                self.blocks.rejects.append((f"{where}: {INCOMPLETE}", r.take_tail()))
            else:
                # Many producers omit the last newline: the line is a record; say so.
                self.unterminated = True
                r.terminate()
                self._take_ready(r)
        self.flush()

    def _add(self, data: bytes | memoryview, n: int) -> None:
        if n:
            self.outlet.add(data, n)

    def flush(self) -> None:
        """Append everything held (the batch, then the read buffer's lines), then the
        refused lines."""
        self.outlet.flush()
        r = self.reader
        if self.raw and r is not None:
            self._each_block(r, self._write_block)
            self.batch.hold(0)
        if self.blocks.rejects:
            items, self.blocks.rejects = self.blocks.rejects, []
            self.outlet.reject(items)

    def _long_done(self, why: str) -> None:
        long, self.long = self.long, None
        assert long is not None
        self.blocks.skip(long.size + 1)  # the line and its newline
        self.outlet.reject_long(long, why)

    def _encode(
        self, block: bytes | memoryview, buf: bytearray | None = None, at: int = 0
    ) -> tuple[bytes | memoryview, int]:
        encoded = self.blocks.encode(block, buf, at)
        self.outlet.follow(self.enc)  # the first key:value line may have named the columns
        return encoded

    def rescue(self, e: BaseException) -> None:
        """An error escaped the loop (a bug, an I/O error on the input, an interrupt without
        a stopper): save every line held to a spill file, then raise, saying where."""
        self.outlet.stopping = True  # no long waits from here on
        held, n = [], 0
        if self.batch:
            data, n = self.batch.take()
            held.append(bytes(data))
        r = self.reader
        if r is not None and (r.ready() or r.tail_size()):
            if r.tail_size():
                r.terminate()  # a part line is kept too: the spill file is read by a person
            held.append(bytes(r.view(r.start, r.cut)))
            n += held[-1].count(b"\n")
        writer = self.outlet.writer
        out = writer.path
        saved = ""
        if held:
            note = WriteError(f"{out}: records held when the stream stopped", path=out)
            try:
                sidefiles.save(writer, note, b"".join(held))
                saved = (
                    f"; the {n} records read and not yet written were saved to {note.spill_path}"
                )
            except ZotsinkError as se:
                saved = f"; the {n} records read and not yet written were lost: {se.message}"
        with contextlib.suppress(ZotsinkError):  # the error below is what the caller must see
            if self.long is not None:
                self._long_done(f"{INCOMPLETE} (the stream stopped on an error)")
            if self.blocks.rejects:
                self.outlet.reject(self.blocks.rejects)
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
