"""Reading a ledger's bytes: the one cutter into rows, a snapshot's rows, the last row.

Every reader of a ledger cuts its bytes here (:func:`row_blocks`: whole lines only; a piece
with no newline is a row being written, or torn; a line longer than any row is skipped to
its newline, never held whole), decodes rows with :func:`~zotsink._ledger.format.parse_row`
(a row whose CRC does not match is no row) and gets format 1 rows translated into format 2
ones (:mod:`zotsink._ledger.v1`): one row view, whatever wrote the ledger.

:class:`Snapshot` is a reader's pass: the ledger opened, checked to be the user's own
(a ledger planted with forged ``ok`` rows would make every task be skipped), its size taken
under a shared lock, its header's format known. :func:`tail_state` is a claim's look, under
the exclusive lock: the state the last whole row carries, read from the ledger's end (and,
on a network filesystem whose client has not yet caught up with the server's size, read
again until it has: rows passed by unread would let two runs claim one task).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import warnings
from collections.abc import Iterable, Iterator

from .._core.backoff import HEADER_SETTLE, tries
from .._core.fileio import (
    ShortRead,
    fresh_stat,
    line_blocks,
    lines_backwards,
    pread_chunks,
    shared_write_problem,
    side_file_problem,
)
from .._core.records import MAX_LINE
from .._core.snapshot import snapshot
from .._core.stop import Stopper
from ..errors import InputError, UsageError, WriteError, ZotsinkWarning
from .format import (
    FIELDS,
    FORMAT,
    INITIAL,
    Row,
    State,
    crc_cut,
    header_format,
    parse_row,
    row_state,
)

__all__ = [
    "Snapshot",
    "first_line",
    "last_rows",
    "restamp",
    "row_blocks",
    "rows_in",
    "tail_state",
    "too_new",
]


def row_blocks(
    chunks: Iterable[bytes], *, torn: list[int] | None = None, start: int = 0
) -> Iterator[tuple[int, bytes]]:
    """The ledger's one cutter: ``(offset of the block, whole lines)`` of ledger bytes read
    from offset ``start``. Each block ends with a newline. A final piece with no newline (a
    row being written, or torn) is not a row. A line longer than any row may be (a crash can
    leave a run of zero bytes where a row was being written) is never held whole: it is
    skipped to its newline, its offset noted in ``torn``."""
    offset = start
    rest: list[bytes] = []
    held = 0
    skipping = False
    for chunk in chunks:
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                offset += len(chunk)
                continue
            if torn is not None:
                torn.append(offset)
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
        yield offset, block
        offset += len(block)


def rows_in(block: bytes) -> list[bytes]:
    """The lines (no newlines) of a block :func:`row_blocks` gave."""
    return next(line_blocks((block,)), ([], True))[0]


def first_line(fd: int, size: int) -> bytes:
    """A ledger's first line, with its newline (b"" when it has none yet)."""
    data = os.pread(fd, min(size, 4096), 0)
    nl = data.find(b"\n")
    return data[: nl + 1] if nl >= 0 else b""


def too_new(path: str, fmt: int, needs: str) -> InputError:
    """The refusal of a ledger of a format this release does not read."""
    from .. import __version__

    return InputError(
        f"{path} is a ledger of format {fmt}, written by a newer zotsink "
        f"({needs or 'a newer release'} reads it); this zotsink ({__version__}) reads "
        f"formats 1 to {FORMAT}: run a newer zotsink on it, and keep this ledger as it is",
        path=path,
    )


class Snapshot:
    """A reader's pass over a consistent snapshot of a ledger (nothing when it does not
    exist yet): its rows in order, format 1 translated, torn rows passed by with a
    warning naming how many and where the first was."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock: str = "auto",
        timeout: float = 600.0,
        stopper: Stopper | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.fd = -1
        self.size = 0
        self.format = FORMAT
        self.torn: list[int] = []  # offsets of the rows passed by
        self.end = 0  # after the last whole row read
        if not os.path.lexists(self.path):
            return
        self.fd, self.size = snapshot(self.path, lock=lock, timeout=timeout, stopper=stopper)
        st = os.fstat(self.fd)
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
        if self.size:
            head = first_line(self.fd, self.size)
            found = header_format(head) if head else None
            if found is None:
                self.close()
                raise InputError(
                    f"{self.path} is not a zotsink ledger (its first line is not a ledger's "
                    "header); give the ledger with --ledger",
                    path=self.path,
                )
            if found[0] > FORMAT:
                self.close()
                raise too_new(self.path, *found)
            self.format = found[0]

    @classmethod
    def under_lock(cls, path: str, fd: int, size: int, start: int, fmt: int = FORMAT) -> Snapshot:
        """A pass over the rows from ``start`` to ``size`` of the ledger (of format ``fmt``)
        open at ``fd``, which its caller holds (locked, or as its own snapshot) and closes."""
        snap = cls.__new__(cls)
        snap.path, snap.fd, snap.size, snap.format = path, fd, size, fmt
        snap.torn, snap.end = [], start
        return snap

    @property
    def exists(self) -> bool:
        return self.fd >= 0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lines(self, start: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(offset, row)`` of every whole line after the header (raw, not checked)."""
        if self.fd < 0:
            return
        chunks = pread_chunks(self.fd, self.size, 1 << 22, start)
        first = start == 0
        for offset, block in row_blocks(chunks, torn=self.torn, start=start):
            pos = offset
            for line in rows_in(block):
                at, pos = pos, pos + len(line) + 1
                if first:
                    first = False
                    continue  # the header
                yield at, line
            self.end = offset + len(block)

    def rows(self, start: int = 0) -> Iterator[tuple[int, Row]]:
        """``(offset, row)`` of every row, in the ledger's order (format 1 translated)."""
        if self.format == 1:
            from .v1 import translate

            yield from translate(self.path, first_line(self.fd, self.size), self.lines(start))
        else:
            torn = 0
            first_torn = -1
            for at, line in self.lines(start):
                row = parse_row(line)
                if row is None:
                    if line and not _newer_kind(line):
                        torn += 1
                        first_torn = at if first_torn < 0 else first_torn
                    continue
                yield at, row
            if torn or self.torn:
                where = first_torn if first_torn >= 0 else self.torn[0]
                warnings.warn(
                    ZotsinkWarning(
                        f"{self.path}: passed by {torn + len(self.torn)} torn row(s), the "
                        f"first at byte {where} (a run killed while writing it, or damage; "
                        "what it would have said is said again by the runs after it)"
                    ),
                    stacklevel=2,
                )


def _newer_kind(line: bytes) -> bool:
    """Whether a line that is no row this release reads is a whole row of a kind a newer
    release writes (passed by in silence), not a torn one."""
    kind = line.split(b"\t", 1)[0].decode("ascii", "replace")
    return kind not in FIELDS and crc_cut(line) >= 0


def tail_state(path: str, fd: int, size: int, *, settle: bool, coherent: bool) -> State:
    """The state the ledger's last whole row carries (:data:`INITIAL` when it has none),
    read from its end under the exclusive lock. ``size`` is the server's, when
    ``coherent``: a client that reads fewer bytes, or zero bytes where rows are, has not
    caught up yet and reads again after pauses. One that never reads zero bytes away
    raises :class:`WriteError` (nothing is claimed); one whose reads stay short of the
    server's size gets the state of the last row it can read, as a client that was not
    told the server's size would. Without ``settle`` the first read counts."""
    if size == 0:
        return INITIAL
    for last in tries(HEADER_SETTLE):
        state, whole, short = _tail(fd, size)
        if whole or not settle or not coherent:
            return state
        if last:
            if short:
                return state
            raise WriteError(
                f"{path}: this client cannot read the ledger's last rows up to the "
                f"{size} bytes the server has (a network filesystem's cache); nothing was "
                f"claimed: run again, and if it happens again run `zotsink doctor "
                f"{os.path.dirname(path) or '.'}`",
                path=path,
            )
        fresh_stat(fd, True)  # the server's answer refreshes what this client caches
    raise AssertionError("unreachable")  # pragma: no cover


def _tail(fd: int, size: int) -> tuple[State, bool, bool]:
    """(the state of the last whole row before ``size``, whether the read reached ``size``
    with no zero bytes in its last line, whether it fell short of ``size``)."""
    lines = lines_backwards(fd, size, MAX_LINE)
    try:
        tail = next(lines, None)  # after the last newline: nothing, or a row being written
    except ShortRead:
        # a client that knows the server's size may still read only up to the size it
        # cached (GlusterFS, for a moment): its read ends at an older row, whose state
        # would claim again what the rows after it claimed: read again first
        cached = os.fstat(fd).st_size
        if not 0 < cached < size:
            return INITIAL, False, True
        state, _whole, _short = _tail(fd, cached)
        return state, False, True
    first = True
    whole = True
    for line in lines:
        if first:
            first = False
            whole = line is not None and b"\0" not in line and b"\0" not in (tail or b"")
        state = row_state(line) if line else None
        if state is not None:
            return state, whole, False
    return INITIAL, whole, False


def last_rows(fd: int, size: int, limit: int) -> list[Row]:
    """The whole rows in the last ``limit`` bytes of the ledger open at ``fd`` (of ``size``
    bytes), oldest first: what a run reads of the latest ends (a hint, not a count)."""
    rows: list[Row] = []
    seen = 0
    with contextlib.suppress(ShortRead):  # a client behind the server: no hint this time
        for line in lines_backwards(fd, size, MAX_LINE):
            if line is None:
                continue
            seen += len(line) + 1
            if seen > limit:
                break
            row = parse_row(line)
            if row is not None:
                rows.append(row)
    rows.reverse()
    return rows


def restamp(path: str, fd: int, size: int, data: bytes, *, coherent: bool) -> bytes:
    """Rows saved to a spill file of the ledger (stamped with no state: written without the
    lock), stamped anew with the states after the ledger's last row, under its lock, for
    ``zotsink recover`` to append. A line that is no row is kept as it is (readers pass it
    by)."""
    from .format import advance, make_row

    state = tail_state(path, fd, size, settle=True, coherent=coherent) if size else INITIAL
    out: list[bytes] = []
    for line in (ln for lines, _whole in line_blocks((data,)) for ln in lines):
        if not line:
            continue
        row = parse_row(line)
        if row is None:
            out.append(line + b"\n")
            continue
        fields = [row.fields[name] for name in FIELDS[row.kind]]
        state = advance(state, row.kind, fields)  # the one stamping rule
        out.append(make_row(row.kind, row.time, row.run, fields, state))
    return b"".join(out)
