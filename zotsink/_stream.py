"""Streaming records from a pipe into OUT: ``producer | zotsink out.tsv``.

Lines are read in large chunks and appended in batches (``batch_bytes``, or when the oldest
buffered line is ``flush_interval`` old, or at end of input). Refused lines go to
``OUT.rejects``; a batch that cannot be appended goes to a spill file.

Stopping on a signal never loses what was read: the handler only notes the signal and wakes
the ``select`` through a wakeup pipe; the loop then writes (or spills) everything it holds.
Nothing is raised from a signal handler, so no chunk can be dropped between a ``read`` and
the line that keeps it.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Iterator, Sequence
from typing import Final, NamedTuple

from ._append import make_encoder
from ._core import sidefiles
from ._core.kv import parse_kv
from ._core.records import MAX_LINE, Encoder, format_for
from ._core.stamp import utc_now
from ._core.writer import Writer
from ._signals import Stopper
from .errors import HeaderMismatch, LockError, LockTimeout, RecordError, UsageError, WriteError

__all__ = ["StreamReport", "append_stream"]

#: Longest wait for the lock once a stop signal came: then the rest is spilled.
STOP_LOCK_TIMEOUT: Final = 5.0
#: While a batch waits for the lock, how often the wait looks for a stop signal (seconds).
_STOP_CHECK: Final = 1.0
_READ_SIZE: Final = 1 << 17


class StreamReport(NamedTuple):
    """What one stream did."""

    records: int  # appended to OUT
    rejected: int  # written to OUT.rejects
    spilled: int  # saved to spill files instead of OUT
    spill_paths: tuple[str, ...]
    rejects_path: str | None
    signal: int | None  # the stop signal, if one came
    lock_wait: float  # seconds spent waiting for the lock
    error: Exception | None  # the first LockTimeout/WriteError/HeaderMismatch, if any


class _Batcher:
    """Turns chunks of input into encoded batches; refused lines are set aside."""

    def __init__(self, encoder: Encoder, kv: str | None, stamp_time: bool) -> None:
        self.enc = encoder
        self.kv = kv
        self.stamp_time = stamp_time
        self.rejects: list[tuple[str, bytes]] = []
        self.line_no = 0
        # Plain pass-through needs no per-line work unless a NUL byte shows up.
        # (In csv every line is parsed: a quote left open would swallow later records.)
        self.plain = (
            kv is None
            and not encoder.stamp
            and (encoder.fmt == "lines" or (encoder.columns is None and encoder.fmt == "tsv"))
        )

    def encode(self, block: bytes) -> tuple[bytes, int]:
        """Encode a block of whole lines (ending in ``\\n``); returns bytes and record count."""
        n = block.count(b"\n")
        if self.plain and b"\0" not in block and len(block) <= MAX_LINE:
            self.line_no += n
            return block, n
        now = utc_now() if self.stamp_time else None
        prefix = self.enc.stamp_prefix(now) if self.enc.stamp and self.kv is None else b""
        if (
            prefix
            and (self.enc.columns is None or self.enc.fmt == "lines")
            and b"\0" not in block
            and len(block) <= MAX_LINE
        ):
            # Nothing to check line by line: stamp the whole block with one C-speed replace
            # (the same bytes as the loop below; --stamp streaming 0.26 -> 0.64 of plain).
            self.line_no += n
            return prefix + block[:-1].replace(b"\n", b"\n" + prefix) + b"\n", n
        out: list[bytes] = []
        good = 0
        for line in block.split(b"\n")[:-1]:
            self.line_no += 1
            if self.kv is not None:
                try:
                    if b"\0" in line:
                        raise RecordError("NUL byte")
                    text = line.decode("utf-8", "surrogateescape").rstrip("\r")
                    if not text.strip():
                        continue  # a blank line is no record in key:value input
                    out.append(self.enc.encode(parse_kv(text, self.kv), now))
                    good += 1
                except RecordError as e:
                    self.rejects.append((f"line {self.line_no}: {e.message}", line))
                continue
            why = self.enc.check_raw(line)
            if why:
                self.rejects.append((f"line {self.line_no}: {why}", line))
                continue
            out.append(prefix + line + b"\n")
            good += 1
        return b"".join(out), good


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
    batch_bytes: int = 65536,
    flush_interval: float = 1.0,
    whole: bool = False,
    stopper: Stopper | None = None,
) -> StreamReport:
    """Append the lines read from ``infd`` until end of input (or a stop signal).

    With ``data`` (lines given at once, e.g. command-line arguments) ``infd`` is not read.
    """
    out = os.fspath(path)
    fmt = format_for(out, format)
    if kv is not None and kv not in (":", "="):
        raise UsageError(f"--kv separator must be ':' or '=', not {kv!r}")
    if batch_bytes <= 0 or flush_interval < 0:
        raise UsageError("--batch-bytes must be positive and --flush-interval not negative")
    enc = make_encoder(out, fmt, columns, stamp, adopt=kv is not None)
    if not timeout >= 0:
        raise UsageError(f"--timeout must be a number of seconds >= 0, not {timeout!r}")
    writer = Writer(out, lock=lock, sync=sync, header=enc.header_line())
    batcher = _Batcher(enc, kv, "time" in enc.stamp)
    st = _State()
    try:
        if data is not None:
            if data and not data.endswith(b"\n"):
                data += b"\n"
            _take(batcher, st, data, writer)
            _flush(writer, st, timeout)
            if batcher.rejects:
                _write_rejects(writer, batcher, st, timeout)
        else:
            assert infd is not None
            _pump(infd, writer, batcher, st, batch_bytes, flush_interval, whole, stopper, timeout)
    finally:
        writer.close()
    return StreamReport(
        records=st.records,
        rejected=st.rejected,
        spilled=st.spilled,
        spill_paths=tuple(st.spills),
        rejects_path=(st.rejects_file or sidefiles.rejects_path(out)) if st.rejected else None,
        signal=stopper.signum if stopper else None,
        lock_wait=writer.lock_wait,
        error=st.error,
    )


class _State:
    def __init__(self) -> None:
        self.buf: list[bytes] = []
        self.size = 0
        self.count = 0
        self.oldest = 0.0
        self.records = self.rejected = self.spilled = 0
        self.spills: list[str] = []
        self.rejects_file: str | None = None  # where refused lines went, when not OUT.rejects
        self.error: Exception | None = None


def _pump(
    infd: int,
    writer: Writer,
    batcher: _Batcher,
    st: _State,
    batch_bytes: int,
    interval: float,
    whole: bool,
    stopper: Stopper | None,
    timeout: float,
) -> None:
    out = writer.path
    # The unfinished last line. A bytearray grows in place: a long line arriving in many
    # chunks is not copied again for each one (that was quadratic: a 100 MB line took 2 s
    # and 48 MiB where it now takes 0.3 s and 31 MiB).
    pending = bytearray()
    poller = select.poll()
    poller.register(infd, select.POLLIN | select.POLLHUP | select.POLLERR)
    if stopper is not None:
        poller.register(stopper.wakeup_fd, select.POLLIN)
    eof = False
    while not eof:
        if stopper is not None and stopper.signum is not None:
            break
        wait_ms = None
        if st.buf and not whole:
            wait_ms = max(0, int((st.oldest + interval - time.monotonic()) * 1000) + 1)
        events = dict(poller.poll(wait_ms))
        if stopper is not None and (stopper.signum is not None or stopper.wakeup_fd in events):
            break
        if infd in events:
            chunk = os.read(infd, _READ_SIZE)
            if not chunk:
                eof = True
            else:
                nl = chunk.rfind(b"\n")
                if nl < 0:
                    pending += chunk
                else:
                    data = bytes(pending) + chunk[: nl + 1] if pending else chunk[: nl + 1]
                    pending = bytearray(chunk[nl + 1 :])
                    _take(batcher, st, data, writer)
                if len(pending) > MAX_LINE:
                    rest = _reject_overlong(infd, out, batcher, st, pending, timeout)
                    # What followed the long line may hold whole lines: taken now, or the
                    # final-newline rule below would add an empty record after them.
                    nl = rest.rfind(b"\n")
                    if nl >= 0:
                        _take(batcher, st, rest[: nl + 1], writer)
                    pending = bytearray(rest[nl + 1 :])
        if (
            st.buf
            and not whole
            and (st.size >= batch_bytes or time.monotonic() - st.oldest >= interval)
        ):
            _flush(writer, st, timeout, stopper)
    if pending:
        _take(batcher, st, bytes(pending) + b"\n", writer)  # a missing final newline is added
    stopping = stopper is not None and stopper.signum is not None
    if stopping:
        timeout = min(timeout, STOP_LOCK_TIMEOUT)
    _flush(writer, st, timeout)
    if batcher.rejects:
        _write_rejects(writer, batcher, st, timeout)


def _take(batcher: _Batcher, st: _State, block: bytes, writer: Writer) -> None:
    data, n = batcher.encode(block)
    if writer.header is None and batcher.enc.columns is not None:
        writer.set_header(batcher.enc.header_line())  # the first key:value line named them
    if n:
        if not st.buf:
            st.oldest = time.monotonic()
        st.buf.append(data)
        st.size += len(data)
        st.count += n


def _flush(writer: Writer, st: _State, timeout: float, stopper: Stopper | None = None) -> None:
    if not st.buf:
        return
    data, n = b"".join(st.buf), st.count
    st.buf, st.size, st.count = [], 0, 0
    try:
        _append_until_stopped(writer, data, timeout, stopper)
        st.records += n
    except (LockError, WriteError) as e:  # LockTimeout is a LockError
        st.spilled += n
        if e.spill_path and e.spill_path not in st.spills:
            st.spills.append(e.spill_path)
        st.error = st.error or e
        if e.spill_path is None:
            raise  # saved nowhere: the caller must say so loudly
    except HeaderMismatch as e:
        # Nothing was written to OUT; the records went to OUT.rejects.
        st.rejects_file = e.spill_path
        st.rejected += n
        st.error = st.error or e


def _append_until_stopped(
    writer: Writer, data: bytes, timeout: float, stopper: Stopper | None
) -> None:
    """Append ``data`` waiting up to ``timeout`` for the lock, cut short by a stop.

    A batch may be waiting for a lock held elsewhere when the walltime signal comes, and
    the scheduler's SIGKILL follows within seconds: so the wait runs in slices that look at
    the stopper, and ends :data:`STOP_LOCK_TIMEOUT` after a stop was seen. A slice that
    merely timed out has lost nothing; only the end of the whole wait spills.
    """
    start = now = time.monotonic()
    deadline = start + timeout
    slices = 0
    while True:
        if stopper is not None and stopper.signum is not None:
            deadline = min(deadline, now + STOP_LOCK_TIMEOUT)
            stopper = None  # seen: from now on one last wait up to the deadline
        left = max(0.0, deadline - now)
        if stopper is None or left <= _STOP_CHECK:
            break
        try:
            writer.append(data, timeout=_STOP_CHECK)
            return
        except LockTimeout:
            writer.lock_wait += time.monotonic() - now
            slices += 1
            now = time.monotonic()
        except (LockError, WriteError) as e:
            sidefiles.save(writer, e, data)
            raise
        except HeaderMismatch:
            break  # the last call below sends the batch to OUT.rejects and says so
    try:
        sidefiles.append_or_save(writer, data, left)
    except LockTimeout as e:
        if not slices:
            raise
        # the message gives the whole wait, not the last slice's
        waited = round(time.monotonic() - start, 1)
        err = LockTimeout(
            f"{writer.path}: the lock was still held by another writer after {waited:g} s",
            path=writer.path,
            spill_path=e.spill_path,
        )
        err.message += f"; the records were saved to {e.spill_path}"
        raise err from None


def _reject(writer: Writer, items: list[tuple[str, bytes]], st: _State, timeout: float) -> None:
    """Append refused lines to OUT.rejects (or, if that fails, to its spill file)."""
    try:
        st.rejects_file = sidefiles.reject(
            writer.path, items, lock=writer.locker.requested, timeout=timeout
        )
    except (LockError, WriteError) as e:
        if e.spill_path is None:
            raise  # saved nowhere: the caller must say so loudly
        st.rejects_file = e.spill_path
        st.error = st.error or e


def _write_rejects(writer: Writer, batcher: _Batcher, st: _State, timeout: float) -> None:
    _reject(writer, batcher.rejects, st, timeout)
    st.rejected += len(batcher.rejects)
    batcher.rejects = []


def _reject_overlong(
    infd: int, out: str, batcher: _Batcher, st: _State, head: bytes | bytearray, timeout: float
) -> bytes:
    """Stream a line over MAX_LINE to OUT.rejects whole, holding only one chunk at a time.

    Returns what followed the line's newline in the last chunk read.
    """
    batcher.line_no += 1
    line_no = batcher.line_no
    rest = b""

    def chunks() -> Iterator[bytes]:
        nonlocal rest
        yield f"line {line_no}: over the {MAX_LINE}-byte line limit\t".encode()
        yield head
        while True:
            chunk = os.read(infd, _READ_SIZE)
            if not chunk:
                break
            nl = chunk.find(b"\n")
            if nl >= 0:
                yield chunk[:nl]
                rest = chunk[nl + 1 :]
                break
            yield chunk
        yield b"\n"

    # Like every side file: permissions no wider than OUT's (see sidefiles.reject).
    with sidefiles.rejects_writer(out) as w:
        w.append_chunks(chunks(), timeout=timeout)
    st.rejected += 1
    return rest
