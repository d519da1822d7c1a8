"""Splitting OUT's bytes into records and checking each one's shape (for ``verify``).

A record is one line in tsv and lines formats. In csv a quoted value may hold a newline, so
a record may span lines; the stdlib ``csv`` module decides where it ends. A csv record
that spans lines and is not well formed (an unclosed quote swallowed the lines after it)
gives up only its first line: the lines after it are read again as records of their own,
so one stray quote cannot take a whole file down with it.

Duplicates are not found here: that needs memory across the file (see :mod:`.check`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import NamedTuple, Optional

from .._core.fileio import line_blocks, lines_with_ends
from .._core.records import csv_module, header_fault, line_fault, lines_ok

__all__ = ["Unit", "Why", "scan"]

#: (kind, detail) of a problem, or None.
Why = Optional[tuple[str, str]]


class Unit(NamedTuple):
    """Records of OUT: one record, or a run of consecutive well-formed one-line records."""

    line: int  # 1-based number of the first line
    last: int  # and of the last line
    raw: bytes  # with the newlines; a final fragment lacks its own
    header: bool = False
    why: Why = None  # the problem of a single record
    run: list[bytes] | None = None  # a run: each record without its newline


def _shape(content: bytes, complete: bool, fmt: str, ref: int | None, nfields: int | None) -> Why:
    """The problem of a data record (``content`` without its final newline): records' one
    valid-line rule (:func:`line_fault`, the rule ``append`` refuses lines by), worded for
    a reader of OUT, and the problems only a file has (a fragment, an empty line)."""
    why = line_fault(content, fmt, ref, nfields)
    if why is not None and why[0] == "nul":
        at = content.index(b"\0") + 1
        return ("nul", f"NUL byte at byte {at} of the line")
    if not complete:
        return ("fragment", "no newline at the end of the file: a write that was cut short")
    if why is not None and why[0] == "long":
        return why
    if content in (b"", b"\r"):
        return ("empty", "empty line")
    if why is not None and why[0] == "fields" and ref is not None and nfields is not None:
        fields = f"{nfields} field{'s' if nfields != 1 else ''} where the header has {ref}"
        if ref < nfields < 2 * ref:
            return ("glued", f"{fields}: the start of a torn record glued to the record after it")
        return ("fields", fields)
    return why


def _header_problem(content: bytes, complete: bool, names: list[str]) -> Why:
    if not complete:
        return ("fragment", "the header line has no newline: a write that was cut short")
    why = line_fault(content)
    if why is not None:
        return ("header", f"{why[1]} in the header line")
    if content in (b"", b"\r"):
        return ("header", "the header line is empty")
    bad = header_fault(names)
    if bad >= 0 and not names[bad]:
        return ("header", f"column {bad + 1} of the header has no name")
    if bad >= 0:
        return ("header", f"the header names column {names[bad]!r} twice")
    return None


def _clean(lines: list[bytes], raw: bytes, ref: int | None, header: bytes | None) -> bool:
    """Whether every line of a block is a well-formed record (the fast path: C loops only):
    records' one valid-line check, and none of verify's own problems (empty, header again)."""
    if b"" in lines or b"\r" in lines or (header is not None and header in lines):
        return False
    return lines_ok(raw, lines, -1 if ref is None else ref - 1)


def scan(chunks: Iterator[bytes], fmt: str, has_header: bool) -> Iterator[Unit]:
    """OUT's records: the header, runs of well-formed records, and each damaged one alone."""
    if fmt == "csv":
        yield from _scan_csv(chunks, has_header)
        return
    ref: int | None = None
    header: bytes | None = None
    no = 0  # lines before this block
    for lines, complete in line_blocks(chunks):
        nl = b"\n" if complete else b""
        skip = 0
        if no == 0 and fmt == "tsv":
            ref = lines[0].count(b"\t") + 1  # headerless: the first record sets the count
            if has_header:
                header = lines[0]
                if header in (b"", b"\r"):
                    ref = None  # an empty header gives no field count to hold records to
                names = header.rstrip(b"\r").decode("utf-8", "surrogateescape").split("\t")
                yield Unit(1, 1, header + nl, True, _header_problem(header, complete, names))
                skip = 1
        seg = lines[skip:] if skip else lines
        first = no + skip + 1
        no += len(lines)
        if not seg:
            continue
        if complete:
            raw = b"\n".join(seg) + b"\n"
            if _clean(seg, raw, ref, header):
                yield Unit(first, first + len(seg) - 1, raw, run=seg)
                continue
        for i, content in enumerate(seg, first):
            why = _shape(content, complete, fmt, ref, content.count(b"\t") + 1)
            if why is None and content == header:
                why = ("header", "the header line again, as a record")
            yield Unit(i, i, content + nl, why=why)


class _Feed:
    """The line source of a csv reader, with lines that can be pushed back.

    Not a generator: a generator that ended stays ended, but lines pushed back after the
    last record must still reach the reader.
    """

    def __init__(self, lines: Iterator[bytes]) -> None:
        self._lines = lines
        self._next_no = 1
        self.back: deque[tuple[int, bytes]] = deque()
        self.taken: list[tuple[int, bytes]] = []

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        if self.back:
            item = self.back.popleft()
        else:
            raw = next(self._lines, None)
            if raw is None:
                raise StopIteration
            item = (self._next_no, raw)
            self._next_no += 1
        self.taken.append(item)
        return item[1].decode("utf-8", "surrogateescape")


def _scan_csv(chunks: Iterator[bytes], has_header: bool) -> Iterator[Unit]:
    feed = _Feed(lines_with_ends(chunks))
    # strict: text after a closing quote is an error, not glued on (a stray quote
    # would otherwise swallow the lines after it into a record that looks valid)
    csv = csv_module()  # with zotsink's one field limit
    reader = csv.reader(feed, strict=True)
    ref: int | None = None
    header = b""
    while True:
        feed.taken = []
        error = None
        try:
            row = next(reader)
        except StopIteration:
            if not feed.taken:
                return
            row = []  # lines read but no record made of them
            error = "the csv reader stopped in the middle of a record"
        except csv.Error as e:
            row, error = [], str(e)
        taken = feed.taken
        raw = b"".join(r for _, r in taken)
        first, last = taken[0][0], taken[-1][0]
        complete = raw.endswith(b"\n")
        content = raw[:-1] if complete else raw
        is_header = first == 1 and has_header
        if is_header:
            # Never split the header: moving its first line would promote a record.
            why = ("header", f"csv: {error}") if error else _header_problem(content, complete, row)
        elif error is not None:
            why = _shape(content, complete, "csv", None, 0) or ("malformed", f"csv: {error}")
        else:
            why = _shape(content, complete, "csv", ref, len(row))
            if why is None and has_header and content == header:
                why = ("header", "the header line again, as a record")
        if first == 1:
            ref, header = (len(row) if row else None), content
        if why is not None and len(taken) > 1 and not is_header:
            # Keep the damage to one line: read the others again on their own.
            feed.back.extendleft(reversed(taken[1:]))
            raw, last = taken[0][1], first
            why = (
                "malformed",
                f"an open quote joins lines {first}-{taken[-1][0]} into one record "
                f"that is not valid ({why[1]})",
            )
        yield Unit(first, last, raw, is_header, why)
