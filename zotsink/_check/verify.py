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

A repair (``--repair``) is made by :mod:`.repair`.
"""

from __future__ import annotations

import os
from typing import Any

from .._core.records import format_for
from .._core.snapshot import snapshot
from .._ledgerfile import OutFile
from .._read import committed_parts, piece_chunks
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
            for piece in c.parts:
                chunks = piece_chunks(fd, piece)
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
