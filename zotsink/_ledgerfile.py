"""The ledger's file format, and its readers: one TSV of task events, read as a snapshot.

Each row is an event of one task: ``start`` when it starts, ``end`` when it ends, with the
end's ``status`` (``ok``, ``failed``, ``killed``, ``timeout``, ``interrupted``). A ``run``
row (task number 0, no key) records how a run was called: its settings, a JSON object of
text values in ``note``. Control rows, task number 0 too, say what the runs of the ledger
are to do (:data:`CONTROL_EVENTS`: ``close``, ``open``, ``stop``; see
:mod:`zotsink._run.control`); like a ``run`` row they are no task's history, and a reader
that knows them not skips them. ``zotsink run`` writes the ledger (:mod:`zotsink._run.ledger`);
this module is what every reader shares, as :mod:`zotsink._core.records` is for OUT: the
columns, :class:`LedgerRow`, the one cutter of the ledger's bytes into rows with its
torn-row rule (:func:`row_blocks`), :class:`LedgerScan` (a pass over a snapshot, with a
C-speed search for the rows of some tasks), :func:`read_ledger`, and :func:`claims` (the
parts of OUT that ``ok`` rows claim, which ``_read`` shows readers). What the rows mean for
a task is :mod:`zotsink._run.states`.

A ledger is read only when it can be trusted: a regular file of the user's own, that no
one else may write (a group member's forged ``ok`` row would make the owner's runs skip a
task); :class:`LedgerScan` refuses any other with :class:`~zotsink.errors.UsageError`.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import warnings
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Final, NamedTuple

from ._core.fileio import (
    fresh_stat,
    line_blocks,
    pread_chunks,
    shared_write_problem,
    side_file_problem,
)
from ._core.fsinfo import wants_fsync
from ._core.records import MAX_LINE, decode_row
from ._core.snapshot import snapshot
from ._core.stop import Stopper
from .errors import InputError, UsageError, ZotsinkWarning

__all__ = [
    "CLOSE_EVENT",
    "CONTROL_EVENTS",
    "END_STATES",
    "LATER_COLUMNS",
    "LEDGER_COLUMNS",
    "OPEN_EVENT",
    "RUN_EVENT",
    "RUN_TASKNUM",
    "STOP_EVENT",
    "TASK_EVENTS",
    "AndRunRows",
    "Claims",
    "LedgerRow",
    "LedgerScan",
    "OutFile",
    "Piece",
    "claims",
    "ledger_time",
    "out_file",
    "parse_row",
    "piece_problem",
    "read_ledger",
    "row_blocks",
    "rows_in",
    "tasknum_of",
]

#: The ledger's header, in order.
LEDGER_COLUMNS: Final = (
    "event",
    "time",
    "tasknum",
    "key",
    "attempt",
    "job",
    "array_task",
    "host",
    "pid",
    "status",
    "exit",
    "signal",
    "seconds",
    "records",
    "bytes",
    "note",
)
#: Columns after LEDGER_COLUMNS, in ledgers that have them (older ledgers end at ``note``,
#: or after fewer of these, and are still read and appended to as they are): ``out_offset``
#: is where the records of the attempt begin in OUT, so that with ``bytes`` it names the
#: part of OUT that attempt wrote; ``out_header`` is the length of OUT's header line (0:
#: OUT has none); ``out_ino`` the inode of the file the piece was appended to (OUT then:
#: a file renamed or replaced since is another one) and ``out_crc`` the piece's CRC-32, so
#: a reader can tell that the piece is still there, whole and the same. Columns a newer
#: release adds after these are kept as they are, and read for what they share.
LATER_COLUMNS: Final = ("out_offset", "out_header", "out_ino", "out_crc")
#: The row kinds of a task's history (beside ``run`` rows of settings); a row of another
#: kind (a newer release's) is passed over by every reader: it says nothing this release
#: can act on, and is neither a failure nor a success.
TASK_EVENTS: Final = ("start", "end")
#: ``status`` values of ``end`` rows.
END_STATES: Final = ("ok", "failed", "killed", "timeout", "interrupted")
#: The ``event`` of the row that records a run's settings, and its task number.
RUN_EVENT: Final = "run"
RUN_TASKNUM: Final = 0
#: The ``event`` of the control rows (task number :data:`RUN_TASKNUM`): the task list is
#: closed (no more lines will come), open again, and the runs live now are to stop.
CLOSE_EVENT: Final = "close"
OPEN_EVENT: Final = "open"
STOP_EVENT: Final = "stop"
CONTROL_EVENTS: Final = (CLOSE_EVENT, OPEN_EVENT, STOP_EVENT)


class LedgerRow(NamedTuple):
    """One row of the ledger, values as text (``tasknum`` as int)."""

    event: str
    time: str
    tasknum: int
    key: str
    attempt: str
    job: str
    array_task: str
    host: str
    pid: str
    status: str
    exit: str
    signal: str
    seconds: str
    records: str
    bytes: str
    note: str
    out_offset: str = ""  # "" in an older ledger, in a start row, and for no records
    out_header: str = ""
    out_ino: str = ""
    out_crc: str = ""


def read_ledger(
    path: str | os.PathLike[str],
    *,
    tasknums: Collection[int] | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[LedgerRow]:
    """The rows of a ledger, from a consistent snapshot; nothing when it does not exist yet.

    With ``tasknums`` only the rows of those tasks: a chunk of an array (``run --index``)
    finds its rows with one C-speed search per block of the ledger, and no other row is even
    split, so reading stays flat in memory and fast however many tasks the ledger holds.
    A torn row (a ``run`` killed mid-append, see :class:`LedgerScan`) is left out with a
    warning.
    """
    scan = LedgerScan(path, lock=lock, timeout=timeout)
    try:
        for lineno, _at, line in scan.lines(tasknums):
            if tasknum_of(line) != RUN_TASKNUM:  # settings: read_begin and LedgerTally
                yield scan.row(lineno, line)
    finally:
        scan.close()


class AndRunRows(Collection[int]):
    """Task numbers and the run rows' 0, without a copy of a million numbers."""

    def __init__(self, keys: Collection[int]) -> None:
        self._keys = keys

    def __contains__(self, num: object) -> bool:
        return num == RUN_TASKNUM or num in self._keys

    def __iter__(self) -> Iterator[int]:
        yield RUN_TASKNUM
        yield from self._keys

    def __len__(self) -> int:
        return len(self._keys) + 1


def row_blocks(
    chunks: Iterable[bytes], *, torn: list[int] | None = None, start: int = 0
) -> Iterator[tuple[int, int, bytes]]:
    """The ledger's one cutter: ``(number of the block's first line, its offset, whole
    rows)`` of ledger bytes read from offset ``start`` (line numbers count from 1 there).

    Each block ends with a newline. A final piece with no newline (a row being written, or
    torn by a run killed mid-append) is not a row. A line longer than any record may be
    (``MAX_LINE``: a crash can leave a run of zero bytes where a row was being written) is
    never held whole: it is skipped to its newline, and its line number noted in ``torn``.
    Every reader of the ledger's bytes (:class:`LedgerScan`, a run's look at the rows other
    runs appended) cuts them here; :func:`rows_in` cuts a block into its rows.
    """
    lineno, offset = 1, start
    rest: list[bytes] = []
    held = 0  # bytes in ``rest``: the start of a line whose newline is still to come
    skipping = False
    for chunk in chunks:
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                offset += len(chunk)
                continue
            if torn is not None:
                torn.append(lineno)
            lineno += 1
            offset += nl + 1
            chunk = chunk[nl + 1 :]
            skipping = False
        nl = chunk.rfind(b"\n")
        if nl < 0:
            rest.append(chunk)
            held += len(chunk)
            if held > MAX_LINE:
                offset += held
                rest, held, skipping = [], 0, True
            continue
        block = b"".join([*rest, chunk[: nl + 1]]) if rest else chunk[: nl + 1]
        rest = [chunk[nl + 1 :]] if nl + 1 < len(chunk) else []
        held = len(chunk) - nl - 1
        yield lineno, offset, block
        lineno += block.count(b"\n")
        offset += len(block)


def rows_in(block: bytes) -> list[bytes]:
    """The rows (no newlines) of a block :func:`row_blocks` gave, by the one line splitter."""
    return next(line_blocks((block,)), ([], True))[0]


def parse_row(line: bytes, later: Sequence[int] = (16, 17, 18, 19)) -> LedgerRow | None:
    """A whole row decoded; None when it is no task row (torn: fewer fields than the
    columns; or its task number is not a number). ``later``: where LATER_COLUMNS are in
    this ledger's rows (-1: not there)."""
    text = line.decode("utf-8", "surrogateescape")
    # A row holds an escape only where a key has a tab, a newline or a backslash: every
    # other row is its fields as they stand, and a run folds every row other runs append
    # (under the lock, once per row per run), so the common case skips the per-field pass.
    row = decode_row(text, "tsv") if "\\" in text else text.split("\t")
    if len(row) < len(LEDGER_COLUMNS) or not row[2].isdigit():
        return None
    rest = [row[i] if 0 <= i < len(row) else "" for i in later]
    return LedgerRow(row[0], row[1], int(row[2]), *row[3 : len(LEDGER_COLUMNS)], *rest)


#: A search per block instead of a look at every row, up to this many task numbers.
_SEARCH_MAX: Final = 5000


class LedgerScan:
    """One pass over a ledger's snapshot: its whole rows as bytes, the header checked.

    A row with fewer fields than the header is a torn row: a ``run`` died while appending
    it, and the next writer started a fresh line after it (as in OUT). It is left out, and
    the pass ends with a warning naming how many and the first line; a row with more
    fields, or whose task number is not a number, is damage and raises :class:`InputError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock: str = "auto",
        timeout: float = 600.0,
        stopper: Stopper | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.torn: list[int] = []  # line numbers of the torn rows seen
        self._fd = -1
        self._size = 0
        self._end: int | None = None  # after the last whole row read (None: no pass yet)
        self._owned = True  # the descriptor is this scan's to close
        self.width = 0
        self._later: list[int] = []  # where LATER_COLUMNS are in this ledger (-1: not)
        if not os.path.lexists(self.path):
            return
        self._fd, self._size = snapshot(self.path, lock=lock, timeout=timeout, stopper=stopper)
        st = os.fstat(self._fd)
        problem = side_file_problem(st)
        if problem:
            self.close()
            raise UsageError(
                f"the ledger {self.path} is not to be trusted ({problem}): a ledger is only "
                "ever your own, and another user may have put this one there to make your "
                "runs skip their tasks; remove it, or give --ledger a path of your own",
                path=self.path,
            )
        shared = shared_write_problem(st)
        if shared:
            self.close()
            raise UsageError(
                f"the ledger {self.path} is not to be trusted: {shared}, and a row anyone "
                "appends decides which tasks run (a forged ok row makes your runs skip its "
                "task); if only you should write it, see that its rows are your runs' and "
                f"run: chmod go-w {shlex.quote(self.path)}",
                path=self.path,
            )

    @classmethod
    def under_lock(cls, path: str, fd: int, size: int) -> LedgerScan:
        """A pass over the first ``size`` bytes of the ledger open at ``fd``, which its
        caller holds (locked) and closes: the claim reads the ledger under its own lock."""
        scan = cls.__new__(cls)
        scan.path, scan.torn, scan.width, scan._later = path, [], 0, []
        scan._fd, scan._size, scan._owned, scan._end = fd, size, False, None
        return scan

    @property
    def exists(self) -> bool:
        return self._fd >= 0

    @property
    def size(self) -> int:
        """Where a later look at the ledger starts: after the last whole row this scan read
        (the snapshot's size before a pass). A network client (GlusterFS) may read fewer
        bytes than the size it reports: rows it did not read are never passed by."""
        return self._size if self._end is None else self._end

    def close(self) -> None:
        if self._fd >= 0 and self._owned:
            os.close(self._fd)
        self._fd = -1

    def _blocks(self) -> Iterator[tuple[int, int, bytes]]:
        self._end = 0
        for lineno, offset, block in row_blocks(
            pread_chunks(self._fd, self._size, 1 << 22), torn=self.torn
        ):
            self._end = offset + len(block)
            yield lineno, offset, block

    def _header(self, block: bytes) -> int:
        nl = block.find(b"\n")
        head = decode_row(block[:nl].decode("utf-8", "surrogateescape"), "tsv")
        if tuple(head[: len(LEDGER_COLUMNS)]) != LEDGER_COLUMNS:
            raise InputError(
                f"{self.path} is not a zotsink ledger (its first line is not the ledger "
                "header); give the ledger with --ledger",
                path=self.path,
            )
        self.width = len(head)
        self._later = [head.index(c) if c in head else -1 for c in LATER_COLUMNS]
        return nl + 1

    def lines(self, tasknums: Collection[int] | None = None) -> Iterator[tuple[int, int, bytes]]:
        """``(line number, offset, row)`` of every whole row (of ``tasknums`` only, when
        given), the row without its newline."""
        if self._fd < 0:
            return
        search = None
        if tasknums is not None and len(tasknums) <= _SEARCH_MAX:
            if not tasknums:
                return
            nums = sorted({str(int(n)).encode() for n in tasknums})
            # The numbers as one trie-shaped pattern after the time (which utc_now always
            # ends in "Z": what makes the search selective) and between two tabs: the
            # regular expression engine finds the candidates at C speed, and only their
            # rows are looked at (the tabs before a candidate say whether it is the task
            # number).
            search = re.compile(rb"Z\t" + _alternation(nums) + rb"\t")
        tabs = -1
        for lineno, offset, block in self._blocks():
            start = 0
            if tabs < 0:
                start = self._header(block)
                tabs = self.width - 1
                lineno += 1
            if search is not None:
                seen = -1
                pos, n = start, lineno  # line number ``n`` starts at ``pos``
                for m in search.finditer(block, start):
                    at = block.rfind(b"\n", 0, m.start()) + 1
                    if at == seen or at < start or block.count(b"\t", at, m.start()) != 1:
                        continue  # the same row again, or the number in another field
                    seen = at
                    line = block[at : block.find(b"\n", m.start())]
                    n += block.count(b"\n", pos, at)
                    pos = at
                    if line.count(b"\t") != tabs:
                        self._bad(n, line)
                    else:
                        yield n, offset + at, line
                continue
            lines = rows_in(block[start:])
            pos = offset + start
            for n, line in enumerate(lines, lineno):
                at = pos
                pos += len(line) + 1
                if line.count(b"\t") != tabs:
                    self._bad(n, line)
                    continue
                if tasknums is not None and tasknum_of(line) not in tasknums:
                    continue
                yield n, at, line
        if self.torn:
            warnings.warn(
                ZotsinkWarning(
                    f"{self.path}: left out {len(self.torn)} torn row(s), the first at line "
                    f"{self.torn[0]} (a run killed while writing it; the task's next row "
                    "counts)"
                ),
                stacklevel=2,
            )

    def places_missing(self) -> bool:
        """Whether this ledger lacks ``out_offset`` or ``out_header`` (a release that did
        not record where each attempt's records are began it); known once :meth:`lines`
        has read the header."""
        return len(self._later) < 2 or -1 in self._later[:2]

    def later_index(self, column: str) -> int:
        """Where a column of LATER_COLUMNS is in this ledger's rows (-1: not there)."""
        return self._later[LATER_COLUMNS.index(column)] if self._later else -1

    def _bad(self, lineno: int, line: bytes) -> None:
        if line.count(b"\t") < self.width - 1:
            self.torn.append(lineno)
            return
        raise InputError(
            f"{self.path} line {lineno} is not a ledger row; run `zotsink verify {self.path} "
            "-f tsv`",
            path=self.path,
        )

    def row(self, lineno: int, line: bytes) -> LedgerRow:
        """A whole row from :meth:`lines`, decoded."""
        row = parse_row(line, self._later)
        if row is None:
            raise InputError(
                f"{self.path} line {lineno} is not a ledger row; run `zotsink verify "
                f"{self.path} -f tsv`",
                path=self.path,
            )
        return row

    def row_at(self, offset: int) -> LedgerRow:
        """The row that starts at byte ``offset`` of the snapshot, one :meth:`lines` gave."""
        for _n, _at, block in row_blocks(pread_chunks(self._fd, self._size, 4096, offset)):
            return self.row(0, block[: block.index(b"\n")])
        return self.row(0, b"")  # no whole row there: raises


class Piece(NamedTuple):
    """The part of OUT one ``ok`` row claims, and what the row says it is."""

    offset: int
    length: int
    tasknum: int
    key: str
    ino: str  # the inode of the file it was appended to ("": an older release's row)
    crc: str  # its CRC-32 in hex ("": an older release's row)


class OutFile(NamedTuple):
    """OUT as a reader finds it: which file, and how many bytes."""

    ino: int
    size: int


def out_file(path: str | os.PathLike[str]) -> OutFile | None:
    """OUT's identity and size now, as the server has it; None when no such file exists.

    A network client (GlusterFS) may report the size it cached before another node
    appended, for a moment: the pieces of tasks that node just committed would look cut
    off, their tasks lost, and a run would start them again while they are done. So on a
    network or FUSE filesystem a regular file's size is asked of the server
    (:func:`fresh_stat`)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or not wants_fsync(path):
        # a local disk's stat is the truth; a FIFO or device is no OUT and never opened
        return OutFile(st.st_ino, st.st_size)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return OutFile(st.st_ino, st.st_size)  # not readable here: its stat is all there is
    try:
        _dev, ino, size = fresh_stat(fd, True)
    except OSError:
        return OutFile(st.st_ino, st.st_size)
    finally:
        os.close(fd)
    return OutFile(ino, size)


def piece_problem(offset: str, length: str, ino: str, out: OutFile | None) -> str | None:
    """Why an ``ok`` row's piece (its ``out_offset``, ``bytes`` and ``out_ino`` as text) is
    not in OUT as ``out`` finds it; None when it may be (or the row claims no bytes). The
    cheap check, on sizes and identity only: :func:`zotsink._read.committed_chunks` also
    compares the piece's checksum."""
    if not length.isdigit() or length == "0" or not offset.isdigit():
        return None
    if out is None:
        return "OUT does not exist" if ino else None
    if ino and ino != str(out.ino):
        return "OUT is another file now (renamed, replaced or removed since)"
    if int(offset) + int(length) > out.size:
        return "OUT is shorter than the piece's end (emptied or cut since)"
    return None


class Claims(NamedTuple):
    """The parts of OUT that the ledger's ``ok`` rows claim: what OUT holds exactly once."""

    header: int  # bytes of OUT's header line (0: OUT has none)
    parts: list[Piece]  # each task's latest ok attempt's piece, in OUT's order
    #: (task number, why) of the tasks whose latest ok piece is not to be trusted (see
    #: :func:`piece_problem`); filled by the view that checks them
    untrusted: list[tuple[int, str]]


def claims(
    path: str | os.PathLike[str], *, lock: str = "auto", timeout: float = 600.0
) -> Claims | None:
    """What the ledger at ``path`` says OUT holds once; None when there is no ledger, or it
    was begun by a release that did not record where each attempt's records are.

    Each task counts with its latest ``ok`` attempt: an attempt that failed, was
    interrupted, or ended in a crash before its row was written claims nothing, and its
    lines in OUT are left out of the view. A task is its number and its line: a piece
    counts only while its line is the one its number last ran as (the latest row of that
    number, any run's). After a line was inserted into the task list and the tasks ran
    again, the pieces of the lines' old numbers so count no more, and each line is in the
    view once.
    """
    p = os.fspath(path)
    if not os.path.lexists(p):
        return None
    scan = LedgerScan(p, lock=lock, timeout=timeout)
    try:
        latest: dict[tuple[int, str], Piece] = {}
        current: dict[int, str] = {}  # the line each task number last ran as
        header = 0
        known = False
        for lineno, _at, line in scan.lines():
            if not known:
                if scan.places_missing():
                    return None
                known = True
            end = line.startswith(b"end\t")
            if not end and not line.startswith(b"start\t"):
                continue  # a run row, or a kind of row a newer release writes
            row = scan.row(lineno, line)
            current[row.tasknum] = row.key
            if not end:
                continue
            if row.out_header.isdigit():
                header = int(row.out_header)
            if row.status != "ok":
                continue
            if row.out_offset.isdigit() and row.bytes.isdigit() and int(row.bytes):
                latest[(row.tasknum, row.key)] = Piece(
                    int(row.out_offset),
                    int(row.bytes),
                    row.tasknum,
                    row.key,
                    row.out_ino,
                    row.out_crc,
                )
            else:
                latest.pop((row.tasknum, row.key), None)  # its latest ok attempt printed none
        if not known and scan.places_missing():
            return None
    finally:
        scan.close()
    parts = [piece for (num, key), piece in latest.items() if current.get(num) == key]
    return Claims(header, sorted(parts), [])


def _alternation(words: Sequence[bytes]) -> bytes:
    """A pattern that matches exactly the sorted, distinct ``words``, shaped as a trie
    (``12|13`` becomes ``1(?:2|3)``), which the engine tries far faster than a flat list."""
    groups: dict[bytes, list[bytes]] = {}
    optional = False
    for w in words:
        if w:
            groups.setdefault(w[:1], []).append(w[1:])
        else:
            optional = True
    parts = [re.escape(k) + _alternation(rest) for k, rest in groups.items()]
    if not parts:
        return b""
    if len(parts) == 1 and not optional:
        return parts[0]
    group = b"(?:" + b"|".join(parts) + b")"
    return group + b"?" if optional else group


def ledger_time(stamp: str) -> float | None:
    """A ledger row's time as seconds since the epoch (None when it is not one)."""
    from datetime import datetime, timezone

    try:
        t = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return None
    return t.replace(tzinfo=timezone.utc).timestamp()


def tasknum_of(line: bytes) -> int:
    """The task number of a whole row, without decoding it (-1: not a number)."""
    parts = line.split(b"\t", 3)
    try:
        return int(parts[2])
    except ValueError:
        return -1
