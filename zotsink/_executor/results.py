"""How an Executor's client learns what the elements did: the one place that reads the
engine's files (the ledger, OUT) for it. ONE function, :func:`news_since`, with a contract
the engine's new ledger will meet natively (an incremental reader: the rows after the
cursor's offset and the pieces of OUT they claim); and :func:`committed_records`, the whole
committed view at once, for a client that takes up every call of a directory.

Today it is built on the readers of the current ledger: a pass over a snapshot of the whole
ledger that finds the rows of the tasks the client waits for at C speed
(:class:`~zotsink._ledgerfile.LedgerScan` with task numbers); of those, only the ``end``
rows after the last pass's end are parsed (and every end row of a task asked about for the
first time), and folded with the one fold of rows into a task's state
(:func:`zotsink._run.states.fold`); the piece of OUT a new ``ok`` row claims is read and
checked as the committed view checks it (in OUT as snapshotted, in the same file, with the
same checksum). A look so reads the whole ledger's bytes, but parses only the news, and its
memory grows with the tasks waited for, not with all the tasks; a ledger that did not
change since the last look is not read again (for :data:`REREAD_AFTER` seconds: a network
filesystem's cached size may hide a change).

Only ``end`` rows are folded: a task is told of as committed when its latest end is ``ok``,
and as given up when its failed ends reached ``max_attempts``, after which the run starts
it no more (so no later ``start`` can make it running again).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from typing import Final, NamedTuple

from .._core.fileio import split_lines
from .._ledgerfile import LedgerRow, LedgerScan, OutFile, Piece, piece_problem, tasknum_of
from .._read import piece_chunks
from .._run.states import TaskState, fold, given_up
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
    asked: TaskSet  # the tasks whose rows before ``offset`` were folded
    offset: int  # where the last pass over the ledger ended
    ends: dict[int, TaskState]  # the folded ends of tasks asked about and not told yet
    signature: tuple[int, int, int] | None  # the ledger at the last pass: inode, size, mtime
    at: float  # time.monotonic() of the last pass

    def unchanged(self, ledger: str) -> bool:
        """The ledger looks as it did at the last pass, and that pass is recent."""
        return time.monotonic() - self.at < REREAD_AFTER and _signature(ledger) == self.signature

    def again(self, num: int) -> None:
        """Tell of task ``num`` again when it is asked about, read from its first row."""
        self.told.discard(num)
        self.asked.discard(num)
        self.ends.pop(num, None)


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

    - ``committed``: the records of the tasks whose ``ok`` rows were committed, as
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
    - Only tasks of ``waiting`` are told of; the memory a call takes grows with them, not
      with the tasks of the ledger.
    """
    from .. import snapshot

    book, o = os.fspath(ledger), os.fspath(out)
    if cursor is not None and cursor.unchanged(book):
        return News([], [], cursor)
    signature = _signature(book)
    if (
        cursor is None
        or cursor.signature is None
        or signature is None
        or (
            cursor.signature[0] != signature[0]  # another ledger at the name: read it whole
        )
    ):
        cursor = Cursor(TaskSet(), TaskSet(), 0, {}, None, 0.0)
    told, asked_before, ends = cursor.told, cursor.asked, cursor.ends
    asked = {num: line for num, line in waiting.items() if num not in told}
    if not asked or signature is None:
        return News([], [], cursor._replace(signature=signature, at=time.monotonic()))
    fd = -1
    if os.path.exists(o):
        # OUT before the ledger: a piece claimed after this snapshot lies beyond its end and
        # waits for the next pass
        fd, size = snapshot(o, lock=lock, timeout=timeout)
    scan = LedgerScan(book, lock=lock, timeout=timeout)
    try:
        for lineno, at, line in scan.lines(asked.keys()):
            if not line.startswith(b"end\t"):
                continue
            num = tasknum_of(line)
            if at < cursor.offset and num in asked_before:
                continue  # folded by an earlier pass
            row = scan.row(lineno, line)
            if asked.get(num) == row.key:  # a row of this very line
                ends[num] = fold(row, ends.get(num))
        offset = scan.size
        now = OutFile(os.fstat(fd).st_ino, size) if fd >= 0 else None
        committed: list[tuple[int, str]] = []
        gone: list[tuple[int, str]] = []
        for num in asked:
            state = ends.get(num)
            if state is None or state.last is None:
                continue
            row = state.last
            if state.state == "ok":
                lines = _piece_lines(fd, row, now)
                if lines is None:
                    continue  # its piece is not in OUT as snapshotted: the next pass
                committed += [(num, line) for line in lines]
            elif given_up(state, max_attempts):
                gone.append((num, row.status + (f" ({row.note})" if row.note else "")))
            else:
                continue
            told.add(num)
            del ends[num]
    finally:
        scan.close()
        if fd >= 0:
            os.close(fd)
    for num in asked:
        asked_before.add(num)
    fresh = Cursor(told, asked_before, offset, ends, signature, time.monotonic())
    return News(committed, gone, fresh)


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


def _piece_lines(fd: int, row: LedgerRow, now: OutFile | None) -> list[str] | None:
    """The record lines an ``ok`` row claims, once they are in OUT as snapshotted and are
    what the row says; None while they are not (claimed after the snapshot; or OUT was cut
    or replaced, when the run takes the task as lost and runs it again)."""
    if not row.bytes.isdigit() or int(row.bytes) == 0:
        return []
    if not row.out_offset.isdigit():  # a row that does not say where: never the view's
        return None
    if fd < 0 or piece_problem(row.out_offset, row.bytes, row.out_ino, now) is not None:
        return None
    piece = Piece(
        int(row.out_offset), int(row.bytes), row.tasknum, row.key, row.out_ino, row.out_crc
    )
    chunks = piece_chunks(fd, piece)
    if chunks is None:
        return None
    return [line.decode("utf-8", "surrogateescape") for line in split_lines(chunks)]
