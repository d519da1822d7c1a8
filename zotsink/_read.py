"""Reading OUT: its records from a consistent snapshot (see :mod:`zotsink._core.snapshot`).

When ``zotsink run`` wrote OUT, the ledger beside it (``OUT.ledger``) says which part of
OUT each task's latest ``ok`` attempt wrote. Readers then see that committed view: each
task's records exactly once, and nothing of attempts that failed, were interrupted or
crashed before their row was written. ``every=True`` (``zotsink cat --all``) reads every
line. An OUT with no ledger, or a ledger begun by a release that did not record where each
attempt's records are, is read whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ._core.fileio import pread_chunks, split_lines
from ._core.records import csv_module, decode_row, format_for
from ._core.snapshot import iter_snapshot, snapshot
from ._ledgerfile import Claims, claims
from .errors import RecordError

__all__ = ["committed_chunks", "committed_parts", "iter_snapshot", "read_records", "snapshot"]


def committed_parts(
    path: str | os.PathLike[str],
    size: int,
    *,
    ledger: str | os.PathLike[str] | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Claims | None:
    """The committed view of OUT's first ``size`` bytes (its snapshot): OUT's header and
    the parts each task's latest ``ok`` attempt wrote, as the ledger beside OUT (``ledger``,
    default ``OUT.ledger``) claims them; parts that lie beyond ``size`` (claimed after the
    snapshot) are left out. None when there is no such ledger: every byte counts."""
    p = os.fspath(path)
    c = claims(p + ".ledger" if ledger is None else ledger, lock=lock, timeout=timeout)
    if c is None:
        return None
    return Claims(min(c.header, size), [(at, n) for at, n in c.parts if at + n <= size])


def committed_chunks(
    path: str | os.PathLike[str],
    *,
    ledger: str | os.PathLike[str] | None = None,
    every: bool = False,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[bytes]:
    """OUT's bytes as readers see them: the committed view when a ledger is beside OUT
    (``ledger``, default ``OUT.ledger``), every byte with ``every`` or without one."""
    p = os.fspath(path)
    fd, size = snapshot(p, lock=lock, timeout=timeout)
    if every:
        yield from iter_snapshot(fd, size)
        return
    try:
        # Read after OUT's snapshot: a part claimed since lies beyond it and is left out.
        c = committed_parts(p, size, ledger=ledger, lock=lock, timeout=timeout)
        if c is None:
            yield from pread_chunks(fd, size)
            return
        yield from pread_chunks(fd, c.header)
        for at, length in c.parts:
            yield from pread_chunks(fd, at + length, start=at)
    finally:
        os.close(fd)


def read_records(
    path: str | os.PathLike[str],
    *,
    header: bool = False,
    format: str | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
    ledger: str | os.PathLike[str] | None = None,
    every: bool = False,
) -> Iterator[list[str] | dict[str, str]]:
    """The records of OUT as lists of values (dicts keyed by the first line with ``header``).

    Taken from a consistent snapshot (see :func:`snapshot`). A final line without its
    newline (a writer that died mid-write) is not a record and is left out. When ``zotsink
    run`` wrote OUT, only what each task's latest ``ok`` attempt wrote, once (see the module
    text; ``ledger`` names a ledger given to run with ``--ledger``, ``every`` reads all).
    """
    p = os.fspath(path)
    fmt = format_for(p, format)
    chunks = committed_chunks(p, ledger=ledger, every=every, lock=lock, timeout=timeout)
    rows = _rows(chunks, fmt)
    if not header:
        yield from rows
        return
    names = next(rows, None)
    if names is None:
        return
    for row in rows:
        if len(row) != len(names):
            raise RecordError(
                f"{p}: a row has {len(row)} fields where the header has "
                f"{len(names)}: {row[:5]!r}; run `zotsink verify {p}`",
                path=p,
            )
        yield dict(zip(names, row))


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    # A torn final fragment (no newline) is not a record: split_lines leaves it out.
    for ln in split_lines(chunks):
        yield ln.decode("utf-8", "surrogateescape")


def _rows(chunks: Iterator[bytes], fmt: str) -> Iterator[list[str]]:
    if fmt == "csv":
        yield from csv_module().reader(ln + "\n" for ln in _lines(chunks))
    elif fmt == "tsv":
        for ln in _lines(chunks):
            yield decode_row(ln, "tsv")
    else:
        for ln in _lines(chunks):
            yield [ln]
