"""``ARCHIVE.tar.idx``: one TSV row per committed member, the archive's commit log.

Columns: ``offset`` (where the member's first header starts), ``size`` (its data bytes),
``name``, ``sha256`` (of its data), ``time`` (UTC, when it was appended), ``host``, ``job``,
``task``, ``tasknum`` and ``attempt`` (the task of ``zotsink run`` that appended it, and which
start of that task: empty outside ``run``). The first line names them. An index written
before the last two columns existed has eight columns (:data:`OLD_HEADER`); it is read as
before, with those two empty, and the next append rewrites it with all ten.

Fields are escaped by tsv records' own escape (:func:`zotsink._core.records.escape_tsv`:
``\\\\``, ``\\t``, ``\\n``, ``\\r``). A row is appended under the archive's lock only after
the member's data was written (and fsynced, per the sync policy), so a row means the member
is whole.

The index is an accelerator, never the only truth: every field but the provenance is in
the archive's own headers, and pack also records sha256 and provenance in each member's
PAX ``comment``, so a lost or stale index is rebuilt from the archive alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final, NamedTuple

from .._core.fileio import file_kind, fresh_stat, line_blocks, open_regular
from .._core.outcheck import PACK_INDEX_HEADER
from .._core.records import escape_tsv, unescape_tsv

__all__ = [
    "COLUMNS",
    "HEADER",
    "OLD_HEADER",
    "IndexCache",
    "MemberRow",
    "Row",
    "format_rows",
    "index_path",
    "is_pack_archive",
    "parse_index",
    "run_attempt",
]

#: The first line of an index of eight columns, defined in _core: record writers look for
#: its columns to refuse an archive as OUT. Indexes written before ``tasknum`` and
#: ``attempt`` were recorded start with it.
OLD_HEADER: Final = PACK_INDEX_HEADER
#: The first line of an index: the eight columns, then the task of ``run`` and its attempt.
HEADER: Final = PACK_INDEX_HEADER[:-1] + b"\ttasknum\tattempt\n"
COLUMNS: Final = tuple(HEADER.decode().rstrip("\n").split("\t"))
#: Fields of a row of an eight-column index.
_OLD_WIDTH: Final = OLD_HEADER.count(b"\t") + 1


def index_path(archive: str) -> str:
    return archive + ".idx"


def is_pack_archive(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is (or is to be) a pack archive: a ``.tar`` name, or an index beside it.

    For commands that take either a record file or an archive (verify, cat, recover).
    """
    path = os.fspath(path)
    return path.endswith(".tar") or os.path.isfile(index_path(path))


class Row(NamedTuple):
    """One member of a pack archive: its index row."""

    offset: int
    size: int
    name: str
    sha256: str
    time: str = ""
    host: str = ""
    job: str = ""
    task: str = ""
    tasknum: str = ""  #: the task of ``zotsink run`` that appended it ("" outside run)
    attempt: str = ""  #: which start of that task (1, 2, ...)

    def run_attempt(self) -> tuple[int, int] | None:
        """``(tasknum, attempt)`` when a task of ``zotsink run`` appended the member, else None."""
        return run_attempt(self.tasknum, self.attempt)

    def to_dict(self) -> dict[str, object]:
        return self._asdict()


def run_attempt(tasknum: str, attempt: str) -> tuple[int, int] | None:
    """The recorded task and attempt of ``zotsink run`` as numbers; None when either is not
    a number (a member packed outside run, or by a version that did not record them)."""
    if tasknum.isdigit() and attempt.isdigit():
        return int(tasknum), int(attempt)
    return None


#: The public name of :class:`Row` (``zotsink.MemberRow``); inside the package it stays Row.
MemberRow = Row


def format_rows(rows: Iterable[Row]) -> bytes:
    return "".join(
        "\t".join((str(r.offset), str(r.size), *(escape_tsv(v) for v in r[2:]))) + "\n"
        for r in rows
    ).encode("utf-8", "surrogateescape")


def parse_row(line: bytes) -> Row:
    """One row (without its newline); ValueError when it is not a well-formed row."""
    fields = line.decode("utf-8", "surrogateescape").split("\t")
    if len(fields) not in (_OLD_WIDTH, len(COLUMNS)):
        raise ValueError(f"{len(fields)} fields, not {len(COLUMNS)} (or {_OLD_WIDTH})")
    offset, size = int(fields[0]), int(fields[1])
    if offset < 0 or size < 0 or offset % 512:
        raise ValueError("offset or size out of range")
    return Row(offset, size, *(unescape_tsv(f) for f in fields[2:]))


def parse_index(data: bytes, start: int = 0) -> tuple[list[Row], list[str], int]:
    """Rows of index bytes (from byte ``start`` of the file); problems; end of the last line.

    A final line without its newline is a row a writer was killed while appending: it is
    not counted (its member is not committed) and is reported as a problem.
    """
    rows: list[Row] = []
    problems: list[str] = []
    pos = 0  # bytes of whole lines so far
    for lines, complete in line_blocks((data,)):
        if not complete:
            problems.append(
                f"index ends in a torn row at byte {start + pos} "
                f"({len(lines[0])} bytes without a newline)"
            )
            break
        for line in lines:
            at = start + pos
            pos += len(line) + 1
            if at == 0 and line + b"\n" in (HEADER, OLD_HEADER):
                continue
            try:
                rows.append(parse_row(line))
            except ValueError as e:
                problems.append(f"index line at byte {at}: not a row ({e})")
    return rows, problems, start + pos


class IndexCache:
    """What one process knows of an index, read incrementally under the archive's lock.

    Each append reads only the rows added since its last look (the index grows at the end
    only, always under the lock), unless the index file was replaced or shrank.
    """

    def __init__(self) -> None:
        self.reset()

    def refresh(self, fd: int, coherent: bool = False) -> int:
        """Read what was added to the index open as ``fd``; its size in bytes.

        ``coherent``: ask the server for the size (see :func:`zotsink._core.fileio.fresh_stat`).
        """
        dev, ino, size = fresh_stat(fd, coherent)
        ident = (dev, ino)
        if ident != self.ident or size < self.consumed:
            self.reset()
            self.ident = ident
        if size > self.consumed:
            data = _pread_all(fd, self.consumed, size - self.consumed)
            if self.consumed == 0:
                self.old_columns = data.startswith(OLD_HEADER)
            rows, problems, end = parse_index(data, self.consumed)
            base = len(self.rows)
            self.rows.extend(rows)
            for i, r in enumerate(rows, base):
                self.names[r.name] = i
            self.problems.extend(problems)
            self.consumed = end
        return size

    def reset(self) -> None:
        """Forget everything: the next refresh reads the index from its first byte."""
        self.ident: tuple[int, int] | None = None
        self.consumed = 0  # bytes of the file parsed, always the end of a whole line
        self.rows: list[Row] = []
        self.names: dict[str, int] = {}  # name -> position in rows of its last row
        self.problems: list[str] = []
        #: the index has the eight columns of an older version (its first line is OLD_HEADER)
        self.old_columns = False
        #: (device, inode, size) of the archive as this process left it: when it is still
        #: so, nobody wrote since, and the last member need not be checked again
        self.archive_end: tuple[int, int, int] | None = None

    def add(self, rows: Iterable[Row], new_end: int) -> None:
        """Note rows this process appended itself, ending the file at ``new_end``."""
        for r in rows:
            self.names[r.name] = len(self.rows)
            self.rows.append(r)
        self.consumed = new_end


def _pread_all(fd: int, offset: int, length: int) -> bytes:
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, min(length, 1 << 24), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def read_index(path: str) -> tuple[list[Row], list[str]]:
    """All rows of an index file and its problems; ([], []) when there is none."""
    try:
        fd, st = open_regular(path)  # a FIFO planted there must not hang verify or cat
    except FileNotFoundError:
        return [], []
    if fd < 0:
        return [], [
            f"{path} is {file_kind(st.st_mode)}, not an index: `zotsink verify --repair` "
            "puts an index rebuilt from the archive in its place"
        ]
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    rows, problems, _ = parse_index(data)
    return rows, problems
