"""The record outlet: the one corridor every record walks to OUT.

A block of encoded lines is appended to OUT, or, when OUT cannot take it, saved where the
user will look: a batch that OUT's header refuses goes to ``OUT.rejects`` (the records are
fine, OUT is the wrong place for them), one that met a lock timeout, a failed lock call or
an I/O error goes to a spill file for ``zotsink recover``. Either way it is counted, the
first error is kept, and :meth:`Outlet.outcome` tells it all as one :class:`Outcome`.

The stream (``producer | zotsink OUT``), ``zotsink run`` (OUT, the log and the ledger),
``Sink``, ``append_record`` and ``collect`` all append through an :class:`Outlet`; nothing
else calls :meth:`Writer.append` for records, nor :meth:`Writer.append_chunks` at all.

Waiting for the lock looks at the stop signal (:func:`.backoff.wait_for_lock`): a job told
to stop (walltime warning, ``scancel``) may get SIGKILL within seconds, so the wait ends
:data:`.stop.STOP_LOCK_TIMEOUT` after a stop was seen, and the block is spilled. Once a
wait has timed out, the lock's holder is stuck: later batches wait no longer than
:data:`HURRIED_WAIT` before they are spilled, until an append goes through again (a run of
a hundred tasks must not wait the whole ``--timeout`` a hundred times).

A block is a bytes object, a view of a read buffer, or a :class:`~.blocks.Chunked` block
(a run attempt's held output, a line over the limit with its reason), which is appended
in pieces under one lock hold and saved in pieces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, NamedTuple, Union

from ..errors import HeaderMismatch, LockError, LockTimeout, WriteError, ZotsinkError
from .backoff import wait_for_lock
from .batch import Batch
from .blocks import UNCOUNTED, Chunked, LongLine, lines_of
from .fileio import split_lines
from .records import Encoder
from .sidefiles import rejects_path, save, side_mode
from .stop import Stopper
from .writer import Writer

__all__ = ["Block", "Outcome", "Outlet", "reject"]

#: What the outlet appends: encoded lines in memory (a view of a read buffer too), or a
#: :class:`~.blocks.Chunked` block read in pieces.
Block = Union[bytes, memoryview, Chunked]
#: The longest wait for the lock once a wait of this outlet timed out, until an append goes
#: through again: the holder is stuck, and each later batch is better spilled at once.
HURRIED_WAIT: Final = 1.0


class Outcome(NamedTuple):
    """What became of the records meant for one file."""

    path: str  # the file they were meant for
    records: int | None  # appended; None when some lines were not counted
    rejected: int  # written to the rejects file (or its spill file)
    spilled: int  # saved to spill files instead
    spill_paths: tuple[str, ...]
    rejects_path: str | None  # where the refused records are, when some were
    error: Exception | None  # the first LockError/WriteError/HeaderMismatch, if any
    lock_wait: float  # seconds spent waiting for the lock
    appended: int  # bytes appended
    # lines equal to OUT's header, printed again by the producer: not written, nothing lost
    repeated_headers: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = self._asdict()
        d["spill_paths"] = list(self.spill_paths)
        d["error"] = None if self.error is None else str(self.error)
        return d


def _reject_lines(items: Iterable[tuple[str, bytes]]) -> tuple[bytes, int]:
    """``reason<TAB>record`` lines for the rejects file, and how many."""
    lines = [
        reason.replace("\t", " ").replace("\n", " ").encode() + b"\t" + rec.rstrip(b"\n") + b"\n"
        for reason, rec in items
    ]
    return b"".join(lines), len(lines)


class Outlet:
    """One writer's records: a batch in front of it, appended, spilled or rejected.

    ``timeout`` bounds each wait for the lock; ``batch_bytes`` and ``flush_interval`` say
    when :meth:`add`'s batch is due; ``stopper`` cuts waits short once a stop signal came.
    """

    def __init__(
        self,
        writer: Writer,
        *,
        timeout: float,
        batch_bytes: int = 1 << 20,
        flush_interval: float = math.inf,
        stopper: Stopper | None = None,
    ) -> None:
        self.writer = writer
        self.timeout = timeout
        self.stopper = stopper
        self.batch = Batch(batch_bytes, flush_interval)
        self.records = self.rejected = self.spilled = self.appended = 0
        self.uncounted = False  # some lines were appended without being counted
        self.spill_paths: list[str] = []
        self.rejects_file: str | None = None
        self.error: Exception | None = None
        #: Lines equal to OUT's header that the encoder dropped (its owner adds them up).
        self.repeated_headers = 0
        self._hurry = False  # a wait for the lock timed out and no append went through since
        self._stopping = False
        self._plain = stopper is None  # no stop to look for, no hurry: one call per block
        self._rejects: Outlet | None = None

    # -- the batch ------------------------------------------------------------------------
    def add(self, data: bytes | memoryview, count: int, now: float | None = None) -> None:
        """Buffer ``count`` encoded records; append the batch when it is due."""
        if data and self.batch.add(data, count, now):
            self.flush()

    def due(self, now: float | None = None) -> bool:
        return self.batch.due(now)

    def due_in(self, now: float | None = None) -> float | None:
        """Seconds until the batch is due by age; None when nothing is held."""
        return self.batch.wait(now)

    def flush(self) -> Exception | None:
        """Append the batch now (see :meth:`write`)."""
        if not self.batch:
            return None
        data, n = self.batch.take()
        try:
            return self.write(data, n)
        except (KeyboardInterrupt, SystemExit):
            # Raised by a signal handler, most likely while this batch waited for the lock:
            # keep it, so that a flush or close on the way out appends or spills it. Should
            # the interrupt land after the write itself, the batch appears twice (verify
            # shows the duplicates) rather than not at all.
            self.batch.put_back(data, n)
            raise

    def follow(self, enc: Encoder) -> None:
        """OUT's header, once the encoder's first mapping or key:value line named it."""
        if self.writer.header is None and enc.columns is not None:
            self.writer.set_header(enc.header_line())

    # -- appending ------------------------------------------------------------------------
    def write(self, data: Block, count: int) -> ZotsinkError | None:
        """Append a block of ``count`` records (:data:`UNCOUNTED` when not counted) now.

        None when it is in OUT (``writer.last_at`` says where it begins); else the error,
        after the block was saved to the rejects file or a spill file (the error's
        ``spill_path`` and message say where). Raises only when the block could be saved
        nowhere. ``data`` may be a view of a read buffer (copied only when it has to be
        saved elsewhere) or a :class:`~.blocks.Chunked` block, appended in pieces under one
        lock hold unless it is small.
        """
        if not isinstance(data, (bytes, memoryview)):
            small = data.in_memory()
            if small is None:
                return self._write_chunked(data, count)
            data = small
        if not data:
            return None
        try:
            if self._plain:
                self.writer.append(data, timeout=self.timeout)  # the usual case, one call
            else:
                block = data
                self._attempt(lambda t: self.writer.append(block, timeout=t))
                self._hurried(False)
        except (HeaderMismatch, LockError, WriteError) as e:  # LockTimeout is a LockError
            return self._saved(data, count, e)
        self.appended += len(data)
        if count == UNCOUNTED:
            self.uncounted = True
        else:
            self.records += count
        return None

    def put(self, data: bytes, count: int) -> None:
        """:meth:`write` for a caller that reports by raising (``append_record``): the error
        is raised, after the block was saved; no counts are kept, nobody reads them."""
        if self._plain:
            try:
                self.writer.append(data, timeout=self.timeout)
            except (HeaderMismatch, LockError, WriteError) as e:
                self._saved(data, count, e)  # says where on the error itself
                raise
            return
        err = self.write(data, count)
        if err is not None:
            raise err

    def _write_chunked(self, block: Chunked, count: int) -> ZotsinkError | None:
        """A block too large for memory, appended in pieces under one lock hold."""
        try:
            self._attempt(lambda t: self.writer.append_chunks(block.chunks(), timeout=t))
        except (HeaderMismatch, LockError, WriteError) as e:
            return self._saved(block, count, e)
        self._hurried(False)
        self.appended += block.size
        self.records += count
        return None

    def repeated(self, n: int = 1) -> None:
        """``n`` repeats of OUT's header were dropped from what came to it (counted)."""
        self.repeated_headers += n

    def saved(self, block: Block, count: int, e: ZotsinkError) -> ZotsinkError:
        """Save a block its caller could not append (``e`` says why) where the user will
        look, as :meth:`write` does; the error, saying where."""
        return self._saved(block, count, e)

    def _saved(self, block: Block, count: int, e: ZotsinkError) -> ZotsinkError:
        """Save a block OUT did not take where the user will look; the error, saying where."""
        whole = isinstance(block, (bytes, memoryview))
        if isinstance(e, HeaderMismatch):
            # Nothing was written to OUT: the records go to OUT.rejects, as they are.
            pieces = (bytes(block),) if whole else block.chunks()
            items = [("header mismatch", ln) for ln in split_lines(pieces)]
            self._reject_items(items, e)
            e.message += f"; the {len(items)} records were saved to {e.spill_path}"
            return self._kept(e)
        if isinstance(e, LockTimeout):
            self._hurried(True)
        # raises when no place could take it
        save(self.writer, e, bytes(block) if whole else block.chunks)
        self.spilled += lines_of(block, count) if whole else count
        assert e.spill_path is not None
        if e.spill_path not in self.spill_paths:
            self.spill_paths.append(e.spill_path)
        return self._kept(e)

    def write_or_raise(self, data: bytes) -> None:
        """Append now with this outlet's wait, or raise; nothing is saved elsewhere: for
        lines that must be in the file or nowhere (a ledger's ``start`` rows, whose tasks
        are not run when they cannot be recorded)."""
        self._attempt(lambda t: self.writer.append(data, timeout=t))
        self._hurried(False)
        self.appended += len(data)

    @property
    def stopping(self) -> bool:
        """The caller is ending (a stop, an error): no wait is longer than STOP_LOCK_TIMEOUT."""
        return self._stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        self._stopping = value
        self._hurried(self._hurry)

    def _hurried(self, value: bool) -> None:
        self._hurry = value
        self._plain = self.stopper is None and not value and not self._stopping

    def _kept(self, e: ZotsinkError) -> ZotsinkError:
        if self.error is None:
            self.error = e
        return e

    def _attempt(self, append: Callable[[float], object]) -> None:
        """``append(timeout)`` (one locked append) with the wait that looks at the stop
        signal, or, after a timeout, a short one (see the module's text)."""
        wait_for_lock(
            append,
            min(self.timeout, HURRIED_WAIT) if self._hurry else self.timeout,
            path=self.writer.path,
            stopper=self.stopper,
            stopping=self._stopping,
        )

    # -- refused records ------------------------------------------------------------------
    def reject(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Append refused lines (``(reason, line)``) to ``OUT.rejects``, or its spill file."""
        if items:
            self._reject_items(items, None)

    def reject_long(self, long: LongLine, why: str) -> None:
        """A line over the limit, read back from its temporary file into OUT.rejects (or its
        spill file), with the same wait as every block; the temporary file is closed."""
        try:
            self._to_rejects(long.refused(f"{long.where}: {why}"), 1, None)
        finally:
            long.close()

    def _reject_items(self, items: Sequence[tuple[str, bytes]], cause: Exception | None) -> None:
        data, n = _reject_lines(items)
        self._to_rejects(data, n, cause)

    def _to_rejects(self, block: Block, n: int, cause: Exception | None) -> None:
        rej = self._rejects_outlet()
        err = rej.write(block, n)
        if err is not None:
            self.error = self.error or err
        where = rej.writer.path if err is None else err.spill_path
        self.rejects_file = where
        if cause is not None:
            cause.spill_path = where
        self.rejected += n

    def _rejects_outlet(self) -> Outlet:
        if self._rejects is None:
            w = self.writer
            self._rejects = Outlet(
                Writer(
                    rejects_path(w.path),
                    lock=w.locker.requested,
                    sync="auto",
                    side_file=True,
                    mode=side_mode(w.path),
                ),
                timeout=self.timeout,
                stopper=self.stopper,
            )
        self._rejects.stopping = self.stopping
        return self._rejects

    # -- the end --------------------------------------------------------------------------
    def outcome(self) -> Outcome:
        return Outcome(
            path=self.writer.path,
            records=None if self.uncounted else self.records,
            rejected=self.rejected,
            spilled=self.spilled,
            spill_paths=tuple(self.spill_paths),
            rejects_path=self.rejects_file if self.rejected else None,
            error=self.error,
            lock_wait=self.writer.lock_wait,
            appended=self.appended,
            repeated_headers=self.repeated_headers,
        )

    def close(self) -> None:
        try:
            self.writer.close()
        finally:
            if self._rejects is not None:
                self._rejects.close()

    def __enter__(self) -> Outlet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reject(
    out: str,
    items: Iterable[tuple[str, bytes]],
    *,
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
) -> str:
    """Append refused records to ``OUT.rejects`` as ``reason<TAB>record`` lines; its path.

    When OUT.rejects cannot take them they go to its spill file, and the error raised
    names it (``spill_path``).
    """
    path = rejects_path(out)
    data, n = _reject_lines(items)
    writer = Writer(path, lock=lock, sync=sync, side_file=True, mode=side_mode(out))
    with Outlet(writer, timeout=timeout) as o:
        err = o.write(data, n)
    if err is not None:
        raise err
    return path
