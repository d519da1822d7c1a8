"""The Python API for writers of one shared OUT: append_record, append_records, Sink."""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

from ._core.header import Columns, make_encoder
from ._core.options import Stamp, WriteOptions, write_options
from ._core.outlet import Outlet
from ._core.records import Record, format_for, text_ok
from ._core.stamp import utc_now
from ._core.writer import Writer

__all__ = ["Sink", "append_record", "append_records"]


class _Target:
    """An encoder and an outlet for one OUT, cached per process for ``append_record``."""

    def __init__(self, path: str, opts: WriteOptions) -> None:
        f = format_for(path, opts.format)
        self.encoder = make_encoder(path, f, opts.columns, opts.stamp, adopt=True)
        self.outlet = Outlet(
            Writer(path, lock=opts.lock, sync=opts.sync, header=self.encoder.header_line()),
            timeout=opts.timeout,
            batch_bytes=opts.batch_bytes,
            flush_interval=opts.flush_interval,
        )

    def append(self, data: bytes, count: int) -> None:
        """Append encoded lines; on failure they are saved and the error says where."""
        self.outlet.put(data, count)

    def encode_one(self, record: Record) -> bytes:
        """One record as a bytes line: what ``encode((record,))`` returns, without the
        generator, list and join."""
        enc = self.encoder
        had_header = enc.columns is not None
        line = enc.encode(record)  # takes the time itself when the stamp has one
        if not had_header and enc.columns is not None:
            self.outlet.follow(enc)  # the first mapping named the columns
        return line

    def encode(self, records: Iterable[Record]) -> tuple[bytes, int]:
        now = None
        if "time" in self.encoder.stamp:
            now = utc_now()  # one time for all the records of one call: one lock hold
        parts = [self.encoder.encode(r, now) for r in records]
        self.outlet.follow(self.encoder)  # the first mapping may have named the columns
        return b"".join(parts), len(parts)


_targets: dict[tuple[Any, ...], _Target] = {}


def _forget_targets() -> None:
    # A forked child shares the parent's open file descriptions, and a flock held through a
    # shared description does not exclude the other process: the child opens its own.
    _targets.clear()


def _mark_forked() -> None:
    _forget_targets()
    for s in list(_live_sinks):
        s._forked = True


os.register_at_fork(after_in_child=_mark_forked)


def _target(
    path: str | os.PathLike[str],
    format: str | None,
    columns: Columns,
    stamp: Stamp,
    lock: str,
    sync: str,
    timeout: float,
) -> _Target:
    p = os.fspath(path)
    key = (
        p,
        format,
        columns if columns is None or isinstance(columns, str) else tuple(columns),
        stamp if not isinstance(stamp, list) else tuple(stamp),
        lock,
        sync,
        timeout,
    )
    t = _targets.get(key)
    if t is None:
        opts = write_options(
            format=format, columns=columns, stamp=stamp, lock=lock, sync=sync, timeout=timeout
        )
        t = _targets[key] = _Target(p, opts)
    return t


def append_record(
    path: str | os.PathLike[str],
    record: Record,
    *,
    format: str | None = None,
    columns: Columns = None,
    stamp: Stamp = None,
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
) -> None:
    """Append one record to ``path`` under an exclusive lock.

    ``record``: a str or bytes line, a sequence of values, or a mapping by column name.
    Raises :class:`RecordError` (nothing written) for a record zotsink refuses,
    :class:`LockTimeout` or :class:`WriteError` when it could not be appended; the record
    is then in the file named by the exception's ``spill_path``: do not append it again,
    run ``zotsink recover`` later.
    """
    # Not through append_records: one record needs no batch (see _Target.encode_one).
    t = _target(path, format, columns, stamp, lock, sync, timeout)
    t.outlet.put(t.encode_one(record), 1)


def append_records(
    path: str | os.PathLike[str],
    records: Iterable[Record],
    *,
    format: str | None = None,
    columns: Columns = None,
    stamp: Stamp = None,
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
) -> int:
    """Append records in one lock hold, as one contiguous block; returns how many.

    All records are encoded before anything is written: one bad record raises
    :class:`RecordError` and nothing is written.
    """
    t = _target(path, format, columns, stamp, lock, sync, timeout)
    data, n = t.encode(records)
    t.append(data, n)
    return n


class Sink:
    """A buffered writer for many records: batches by size and age, one lock hold each.

    ``write(record)`` buffers; a batch is appended when it reaches ``batch_bytes`` or its
    oldest record is ``flush_interval`` seconds old (checked on each write), on ``flush()``,
    on ``close()``, on leaving a ``with`` block, and at interpreter exit. On failure the
    batch is in a spill file and the exception says where (see :func:`append_record`).

    One Sink may be shared by threads: each record goes into exactly one batch. A child
    made by ``os.fork()`` starts with an empty buffer: the records the parent had buffered
    are the parent's to write, and writing them from the child too would duplicate them.

    Signals: zotsink installs no signal handlers in your process; they belong to the
    application. A signal left at its default action (SIGTERM from a walltime limit or
    ``scancel``, SIGHUP, SIGUSR1/2) ends the process at once and the buffered records are
    lost. Have the handler only note the signal and let the loop leave the ``with`` block::

        stop = []
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(s, lambda signum, frame: stop.append(signum))
        with Sink("results.tsv") as sink:
            for record in work():
                if stop:
                    break
                sink.write(record)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        columns: Columns = None,
        stamp: Stamp = None,
        lock: str = "auto",
        sync: str = "auto",
        timeout: float = 600.0,
        batch_bytes: int = 65536,
        flush_interval: float = 1.0,
    ) -> None:
        opts = write_options(
            format=format,
            columns=columns,
            stamp=stamp,
            lock=lock,
            sync=sync,
            timeout=timeout,
            batch_bytes=batch_bytes,
            flush_interval=flush_interval,
        )
        self.path = os.fspath(path)
        self._target = _Target(self.path, opts)
        self._outlet = self._target.outlet
        self._batch = self._outlet.batch
        # ASCII str records checked by the fast path wait here, not encoded: the batch
        # counts them (Batch.hold) until _settle encodes them all at once.
        self._strs: list[str] = []
        self._strs_size = 0
        self._tabs = self._fast_tabs()
        self._mutex = threading.Lock()
        self._forked = False  # set in a child made by os.fork(): see _mark_forked
        self.records_written = 0
        self.closed = False
        _live_sinks.add(self)

    @property
    def batch_bytes(self) -> int:
        return self._batch.max_bytes

    @property
    def flush_interval(self) -> float:
        return self._batch.max_age

    def _fast_tabs(self) -> int:
        """What the fast path of write() checks: the tabs a line must have (-1: any), or
        _NO_FAST when every record needs the encoder (stamps, csv rows to count)."""
        enc = self._target.encoder
        if enc.stamp:
            return _NO_FAST
        if enc.columns is None or enc.fmt == "lines":
            return -1
        return len(enc.columns) - 1 if enc.fmt == "tsv" else _NO_FAST

    def write(self, record: Record) -> None:
        """Buffer one record (encoded and checked now: a bad one raises RecordError)."""
        with self._mutex:
            if self.closed:
                raise ValueError(f"write to a closed Sink for {self.path}")
            if self._forked:
                self._forget_parents_batch()
            tabs = self._tabs
            now = time.monotonic()
            if (
                type(record) is str
                and tabs != _NO_FAST
                and record.isascii()
                and text_ok(record, tabs)
            ):
                # A plain ASCII line that passes the valid-line check encodes to itself:
                # encoding waits for the batch, one join and one encode for all (about a
                # third of the cost of encoding each; see BENCHMARKS.md).
                self._strs.append(record)
                self._strs_size += len(record) + 1
                due = self._batch.hold(self._strs_size, now)
            else:
                data, _ = self._target.encode((record,))
                self._settle()
                due = self._batch.add(data, 1, now)
                self._tabs = self._fast_tabs()  # a first mapping record may have set columns
            if due:
                self._flush_locked()

    def _settle(self) -> None:
        """Encode the fast path's lines into the batch, keeping their place before any
        later record (and the age of the oldest of them)."""
        if self._strs:
            data = ("\n".join(self._strs) + "\n").encode("ascii")
            # added while they are still held: the batch keeps the age of the oldest
            self._batch.add(data, len(self._strs), self._batch.oldest)
            self._batch.hold(0)
            self._strs = []
            self._strs_size = 0

    def flush(self) -> None:
        """Append the buffered records now."""
        with self._mutex:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._forked:
            self._forget_parents_batch()
        self._settle()
        n = len(self._batch)
        err = self._outlet.flush()  # an interrupt while it waits puts the batch back
        if err is not None:
            raise err
        self.records_written += n

    def _forget_parents_batch(self) -> None:
        # In a forked child: what is buffered was buffered by the parent, which writes it.
        self._batch.take()
        self._batch.hold(0)
        self._strs, self._strs_size = [], 0
        self._forked = False

    def close(self) -> None:
        """Flush and release OUT."""
        with self._mutex:
            if self.closed:
                return
            try:
                self._flush_locked()
            finally:
                self.closed = True
                self._outlet.close()
                _live_sinks.discard(self)

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: ``Sink._tabs`` when every record must go through the encoder.
_NO_FAST = -2

_live_sinks: weakref.WeakSet[Sink] = weakref.WeakSet()


@atexit.register
def _flush_sinks_at_exit() -> None:
    for s in list(_live_sinks):
        if s._forked:
            continue  # a forked child's copy: the parent writes those records
        try:
            s.close()
        except Exception as e:  # at exit there is nobody left to raise to: say it
            import sys

            print(f"zotsink: {e}", file=sys.stderr)
