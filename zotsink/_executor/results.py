"""How an Executor's client learns what the elements did: the one place that reads the
engine's files (the ledger, OUT) for it. ONE function, :func:`news_since`, an incremental
reader; and :func:`committed_records`, the whole committed view at once, for a client that
takes up every call of a directory.

A look reads the ledger's rows after the cursor's offset only (the news), from a snapshot
under a shared lock, and folds them into the cursor's view of the ledger
(:class:`~zotsink._ledger.view.LedgerView`: a few dozen bytes per task of the directory,
whatever the runs wrote); the piece of OUT a task's latest ``ok`` end claims is read and
checked as the committed view checks it (in OUT as snapshotted, in the same file, its
block's checksum). A ledger that did not change since the last look is not read again (for
:data:`REREAD_AFTER` seconds: a network filesystem's cached size may hide a change); a
ledger replaced at the name, or one of format 1, is read whole.

A task is told of as committed when its latest end is ``ok``, and as given up when its
failed ends reached ``max_attempts``, after which the run starts it no more.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from typing import Final, NamedTuple

from .._core.fileio import split_lines
from .._core.snapshot import snapshot
from .._ledger.pieces import OutFile
from .._ledger.read import Snapshot
from .._ledger.view import FAILING, LedgerView
from .._read import piece_chunks
from .calls import record_task

__all__ = [
    "REREAD_AFTER",
    "Cursor",
    "News",
    "TaskSet",
    "committed_records",
    "news_since",
]

#: Seconds after which the ledger is read again even if it looks the same.
REREAD_AFTER: Final = 2.0


class TaskSet:
    """A set of task numbers, one bit each: the tasks a reader has told of."""

    __slots__ = ("_bits", "count")

    def __init__(self) -> None:
        self._bits = bytearray()
        self.count = 0

    def __contains__(self, num: object) -> bool:
        if not isinstance(num, int) or num < 0:
            return False
        byte = num >> 3
        return byte < len(self._bits) and bool(self._bits[byte] & (1 << (num & 7)))

    def discard(self, num: int) -> None:
        if num in self:
            self._bits[num >> 3] &= ~(1 << (num & 7)) & 0xFF
            self.count -= 1

    def add(self, num: int) -> None:
        byte = num >> 3
        if byte >= len(self._bits):
            self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
        if not self._bits[byte] & (1 << (num & 7)):
            self._bits[byte] |= 1 << (num & 7)
            self.count += 1


def _signature(ledger: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(ledger)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class Cursor(NamedTuple):
    """Where a reader is (opaque to the caller: pass back the one returned; its parts are
    shared with the cursors after it)."""

    told: TaskSet  # the tasks told of already
    view: LedgerView  # the ledger's rows up to ``offset``, folded
    offset: int  # where the last pass over the ledger ended
    signature: tuple[int, int, int] | None  # the ledger at the last pass: inode, size, mtime
    at: float  # time.monotonic() of the last pass

    def unchanged(self, ledger: str) -> bool:
        """The ledger looks as it did at the last pass, and that pass is recent."""
        return time.monotonic() - self.at < REREAD_AFTER and _signature(ledger) == self.signature

    def again(self, num: int) -> None:
        """Tell of task ``num`` again when it is asked about."""
        self.told.discard(num)


class News(NamedTuple):
    """What :func:`news_since` found."""

    committed: list[tuple[int, str]]  # (task number, record line), a task's lines together
    given_up: list[tuple[int, str]]  # (task number, how its last attempt ended)
    cursor: Cursor


def news_since(
    out: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    waiting: Mapping[int, str],
    max_attempts: int,
    cursor: Cursor | None = None,
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> News:
    """What became of the tasks ``waiting`` (task number -> its line) since ``cursor``
    (None: since the beginning), and the cursor to pass next.

    The contract:

    - ``committed``: the records of the tasks whose ``ok`` ends were committed, as
      ``(task number, record line)``: only what a task's latest ``ok`` attempt committed
      (never a failed or crashed attempt's lines), all of a task's records in one call and
      in the order its function returned them; tasks in no promised order.
    - ``given_up``: the tasks whose latest attempt failed, was killed or timed out after
      ``max_attempts`` such attempts, with how the last one ended.
    - Across a chain of calls, each given the cursor the last one returned, a task is told
      of once (committed or given up), however often it is asked about, and whenever it
      is first asked about (before its rows, or long after). A call may tell nothing
      although something happened (it may look only when the ledger changed); a later one
      tells it. The cursor is spent once passed: keep only the one returned.
    - Only tasks of ``waiting`` are told of; a look reads only the rows since the last.
    """
    book, o = os.fspath(ledger), os.fspath(out)
    if cursor is not None and cursor.unchanged(book):
        return News([], [], cursor)
    signature = _signature(book)
    if (
        cursor is None
        or cursor.signature is None
        or signature is None
        or cursor.signature[0] != signature[0]  # another ledger at the name: read it whole
    ):
        cursor = Cursor(TaskSet(), LedgerView(pieces=True), 0, None, 0.0)
    told, view = cursor.told, cursor.view
    asked = [num for num in waiting if num not in told]
    if not asked or signature is None:
        return News([], [], cursor._replace(signature=signature, at=time.monotonic()))
    fd = -1
    if os.path.exists(o):
        # OUT before the ledger: a piece claimed after this snapshot lies beyond its end and
        # waits for the next pass
        fd, size = snapshot(o, lock=lock, timeout=timeout)
    offset = cursor.offset
    try:
        with Snapshot(book, lock=lock, timeout=timeout) as snap:
            if snap.format == 1:  # no offset to go on from: the whole of it, each time
                view, offset = LedgerView(pieces=True), 0
            view.feed(snap.rows(offset))
            offset = snap.end
        now = OutFile(os.fstat(fd).st_ino, size) if fd >= 0 else None
        committed: list[tuple[int, str]] = []
        gone: list[tuple[int, str]] = []
        for num in asked:
            state = view.state(num)
            if state == "ok":
                lines = _piece_lines(fd, view, num, now)
                if lines is None:
                    continue  # its piece is not in OUT as snapshotted: the next pass
                committed += [(num, line) for line in lines]
            elif state in FAILING and view.failures[num] >= max_attempts:
                got = view.latest_fail(num)
                how = "failed" if got is None else got[0].status
                note = "" if got is None else got[3]
                gone.append((num, how + (f" ({note})" if note else "")))
            else:
                continue
            told.add(num)
    finally:
        if fd >= 0:
            os.close(fd)
    return News(committed, gone, Cursor(told, view, offset, signature, time.monotonic()))


def committed_records(
    out: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[tuple[int, str]]:
    """Every record of OUT's committed view, as ``(task number, record line)``: each
    task's latest ``ok`` attempt's records once; lines that are no Executor's record are
    passed over. Nothing when OUT does not exist yet."""
    from .. import read_records

    if not os.path.exists(out):
        return
    for (line,) in read_records(out, format="lines", ledger=ledger, lock=lock, timeout=timeout):
        task = record_task(line)
        if task is not None:
            yield task, line


def _piece_lines(fd: int, view: LedgerView, num: int, now: OutFile | None) -> list[str] | None:
    """The record lines task ``num``'s latest ``ok`` end claims, once they are in OUT as
    snapshotted and are what the row says; None while they are not (claimed after the
    snapshot; or OUT was cut or replaced, when the run takes the task as lost and runs it
    again)."""
    piece = view.piece(num)
    if piece is None:
        return []  # it printed nothing
    if fd < 0 or piece.problem(now) is not None:
        return None
    chunks = piece_chunks(fd, piece)
    if chunks is None:
        return None
    return [line.decode("utf-8", "surrogateescape") for line in split_lines(chunks)]
