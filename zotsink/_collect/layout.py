"""The layout of a collection under ``--input auto``: records with named fields, or plain lines.

Each file is sniffed alone (:func:`zotsink._collect.parse.sniff`): ``key:value`` tokens, TSV,
CSV and JSON give records whose fields are named, and they mix freely (their fields join one
column union). Text that is none of these falls back to ``lines``: one record per line in a
column ``line``. In a directory of results, such a file is nearly always a stray (a README, a
note, an error message), and taken as records it would add a ``line`` column and a row of
empty cells to the whole table.

So collect decides the layout for the whole collection: the one most of its files have. Until
every file has been read the two layouts are kept in two tables (:class:`Layout`); then the
files of the other layout are skipped, counted and named, as a file ``--input kv`` cannot
parse is. A tie goes to the records with named fields, since any text at all can be read as
lines. A file that gives no record (empty, blank, a header alone) has no vote and fits either
layout: it adds nothing to the table. An OUT that holds rows already has decided: its
columns tell which layout it holds (one column ``line``: plain lines), whatever the files of
a resumed collect say. ``--input`` other than ``auto`` names one format for every file, and
nothing is voted on.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Final

from .spool import Spool
from .table import Table

__all__ = ["FIELDS", "LINES", "Layout", "NameLog", "held", "misfit", "winner"]

FIELDS: Final = "fields"
LINES: Final = "lines"
#: Names gathered before one write to the log's spool.
_BATCH: Final = 4096


class NameLog:
    """Names in order, spooled (a million names would not fit in memory); NUL ends each, as
    no file or archive member name holds one."""

    def __init__(self, temp_dir: str | None) -> None:
        self._spool = Spool(temp_dir)
        self._batch: list[str] = []
        #: Add a name: the list's own append, as it runs once a file; call :meth:`spill`
        #: now and then to move the names gathered to the spool.
        self.append = self._batch.append

    def spill(self, least: int = _BATCH) -> None:
        """Move the names gathered to the spool, if there are ``least`` of them."""
        batch = self._batch
        if batch and len(batch) >= least:
            self._spool.write(("\0".join(batch) + "\0").encode("utf-8", "surrogateescape"))
            batch.clear()  # in place: self.append stays bound to it

    def __iter__(self) -> Iterator[str]:
        self.spill(1)
        rest = b""
        for chunk in self._spool.chunks():
            names = (rest + chunk).split(b"\0")
            rest = names.pop()
            for n in names:
                yield n.decode("utf-8", "surrogateescape")

    def close(self) -> None:
        self._spool.close()


class Layout:
    """The files of one layout with records, in their own table, until the vote is known.

    A file is counted by :meth:`add`, or where that call would cost too much (the quick
    lane's files, never a layout's first) by ``numbers.append`` and ``names.append``.
    """

    def __init__(self, kind: str, table: Table, temp_dir: str | None) -> None:
        self.kind = kind
        self.table = table
        self.first = ""  # its first file (its path, or its name), for --strict
        self.names = NameLog(temp_dir)  # the names of its files: skipped if it loses
        self.numbers = array("Q")  # the read order of its files: never archived if it loses

    @property
    def files(self) -> int:
        return len(self.numbers)

    def add(self, n: int, name: str, where: str) -> None:
        """Count one file of this layout: ``n`` its place in the read order."""
        if not self.numbers:
            self.first = where
        self.numbers.append(n)
        self.names.append(name)

    def close(self) -> None:
        self.names.close()


def held(columns: list[str]) -> str | None:
    """The layout an existing OUT holds, by its data columns; None for no OUT."""
    if not columns:
        return None
    return LINES if columns == ["line"] else FIELDS


def winner(
    fields: Layout, lines: Layout | None, out: str | None = None
) -> tuple[Layout, Layout | None]:
    """(the layout kept, the other one or None): ``out``'s (what OUT holds already, see
    :func:`held`), else the one most files have; a tie goes to the fields."""
    if lines is None:
        return fields, None
    if out == LINES or (out is None and lines.files > fields.files):
        return lines, fields
    return fields, lines


def misfit(loser: Layout, won: Layout, out: str | None = None) -> str:
    """Why a file of the losing layout is skipped, and what to do about it; ``out``: the
    layout OUT holds already (it decided)."""
    most = f"most files ({won.files} of {won.files + loser.files})"
    if loser.kind == LINES:
        where = "OUT holds" if out is not None else most + " hold"
        return (
            f"plain text, no key:value, TSV, CSV or JSON records, where {where} such "
            "records; to read every file as lines give --input lines"
        )
    where = "OUT holds" if out is not None else most + " are"
    return (
        f"records with named fields (key:value, TSV, CSV or JSON) where {where} plain text "
        "lines; collect it apart, or give --input to read every file in one format"
    )
