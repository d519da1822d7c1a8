"""``zotsink verify``: an integrity report on OUT, and ``--repair``.

A check reads a consistent snapshot (taken under a shared lock, see :func:`zotsink._read.snapshot`)
and streams it: memory stays bounded except for one 16-byte digest per distinct good line,
kept to find exact duplicates. Each line (each record, for csv, where a quoted value may
hold a newline) gets at most one problem, checked in this order. A record is judged by
the same rule ``append`` refuses lines by (:func:`zotsink._core.records.line_fault`):

``header``    the first line of a tsv/csv OUT is damaged (empty, NUL, empty or repeated
              column names), or the header line shows up again further down
``nul``       a NUL byte (what unlocked appends on NFS leave behind)
``fragment``  the last line has no newline: a writer died in the middle of it
``long``      a line over the length limit that ``append`` holds every record to
``glued``     more fields than the header, but fewer than twice as many: the start of a torn
              record glued to the record after it
``fields``    any other field count that differs from the header's
``malformed`` a csv record the csv module cannot parse
``empty``     an empty line
``duplicate`` the exact bytes of an earlier good line

A ledger of ``zotsink run`` (format 2: its first line names the format) is checked row by
row instead: a line that is no whole row (its CRC does not match) is a ``torn`` row, one
that ends the ledger without a newline a ``fragment``; every reader passes both by, and no
repair is made (every whole row carries what it says on its own).

A repair (``--repair``) is made by :mod:`.repair`.
"""

from __future__ import annotations

import os
from typing import Any

from .._core.records import format_for
from .._core.snapshot import snapshot
from .._ledger.pieces import OutFile
from .._read import Blocks, committed_parts, piece_chunks
from ..errors import InputError, UsageError
from .check import check
from .repair import repair_locked
from .report import KEEP, KEPT_KINDS, VerifyReport

__all__ = ["repair", "verify"]


def verify(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    header: bool | None = None,
    allow_duplicates: bool = False,
    repair: bool = False,
    lock: str = "auto",
    timeout: float = 600.0,
    keep: int = KEEP,
) -> VerifyReport:
    """Check OUT; with ``repair``, move every bad line to ``OUT.rejects``.

    ``header``: whether line 1 is a header (default: yes for tsv and csv, no for lines).
    ``allow_duplicates``: exact duplicate lines are not problems. A repair is only made when
    the check finds something it can move; the report returned is then the repair's.
    """
    p = os.fspath(path)
    if format in (None, "auto") and _ledger_format(p) >= 2:
        if repair:
            raise UsageError(
                f"{p} is a ledger of zotsink run: every whole row says what it says on its "
                "own and readers pass torn ones by; it needs no repair (nothing was changed)",
                path=p,
            )
        return _verify_ledger(p, lock=lock, timeout=timeout, keep=keep)
    fmt = format_for(p, format)
    if format in (None, "auto") and p.endswith(".ledger"):
        fmt = "tsv"  # a ledger of `zotsink run`: a TSV whose first line is its header
    has_header = fmt != "lines" if header is None else header
    if os.path.isdir(p):  # open(2) of a directory for reading succeeds: say it here
        raise InputError(f"{p} is a directory, not a zotsink output", path=p)
    fd, size = snapshot(p, lock=lock, timeout=timeout)
    try:
        # An OUT of `zotsink run` holds every attempt's lines: a retry's records repeat the
        # failed attempt's. Its ledger says which lines count; repeats are no damage there.
        st = os.fstat(fd)
        c = committed_parts(p, size, lock=lock, timeout=timeout, out=OutFile(st.st_ino, st.st_size))
        report = VerifyReport(p, fmt, allow_duplicates=allow_duplicates or c is not None)
        for _ in check(fd, size, report, has_header, keep):
            pass
        if c is not None:
            claimed = c.header > 0 and has_header
            report.untrusted = list(c.untrusted)
            blocks = Blocks(fd)
            for piece in c.parts:
                chunks = piece_chunks(fd, piece, blocks)
                if chunks is None:
                    report.untrusted.append((piece.tasknum, "OUT was changed in place since"))
                    continue
                claimed += sum(b.count(b"\n") for b in chunks)
            report.untrusted.sort()
            report.unclaimed = max(0, report.lines - claimed)
    finally:
        os.close(fd)
    if repair and any(k not in KEPT_KINDS for k in report.counts):
        if c is not None:
            raise UsageError(refuse_repair(p), path=p)
        return repair_locked(p, fmt, has_header, allow_duplicates, lock, timeout, keep)
    return report


def refuse_repair(p: str) -> str:
    """Why a repair is not made to an OUT of ``zotsink run``, and what to do instead."""
    return (
        f"{p} was written by `zotsink run` (its ledger {p}.ledger is beside it): the ledger "
        "names each task's records by where they are in OUT, and a repair would move them; "
        "nothing was changed. Repair a copy instead, which holds each ok task's records "
        f"once: `zotsink cat {p} > COPY{os.path.splitext(p)[1]}`, then `zotsink verify "
        f"--repair COPY{os.path.splitext(p)[1]}`"
    )


def repair(path: str | os.PathLike[str], **options: Any) -> VerifyReport:
    """Same as ``verify(path, repair=True, **options)``."""
    return verify(path, repair=True, **options)


def _ledger_format(path: str) -> int:
    """The format of a ledger at ``path`` by its first line (0: none, or not a ledger)."""
    from .._ledger.format import header_format

    try:
        with open(path, "rb") as f:
            found = header_format(f.readline(4096))
    except OSError:
        return 0
    return found[0] if found is not None else 0


def _verify_ledger(path: str, *, lock: str, timeout: float, keep: int) -> VerifyReport:
    """A format 2 ledger checked row by row: each line after the header a whole row."""
    from .._core.fileio import pread_chunks
    from .._ledger.format import crc_cut
    from .._ledger.read import row_blocks, rows_in
    from .report import Problem

    report = VerifyReport(path, "ledger")
    fd, size = snapshot(path, lock=lock, timeout=timeout)
    try:
        report.bytes = size
        lineno = 0
        end = 0
        for offset, block in row_blocks(pread_chunks(fd, size, 1 << 22)):
            for line in rows_in(block):
                lineno += 1
                if lineno > 1 and crc_cut(line) < 0:
                    report.add(Problem(lineno, "torn", "not a whole row: passed by"), keep)
                elif lineno > 1:
                    report.records += 1
            end = offset + len(block)
        report.lines = lineno
        if end < size:  # a last line without its newline: a row being written, or torn
            report.lines += 1
            report.add(Problem(lineno + 1, "fragment", "no newline at the end"), keep)
    finally:
        os.close(fd)
    return report
