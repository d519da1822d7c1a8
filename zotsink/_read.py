"""Reading OUT: a consistent snapshot under a shared lock, and its records.

Writers only ever append whole batches under the exclusive lock (and ``verify --repair``
replaces the inode instead of changing it), so the first ``size`` bytes seen under the
shared lock are a consistent copy that stays valid after the lock is released. Holding the
lock only for the fstat keeps a slow reader (``zotsink cat out | less``) from stalling
every writer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ._core.fileio import file_kind, open_regular, pread_chunks, split_lines
from ._core.locking import Locker, open_locked
from ._core.records import csv_module, decode_row, format_for
from .errors import InputError, RecordError

__all__ = ["iter_snapshot", "read_records", "snapshot"]


def _open_for_reading(p: str) -> int:
    try:
        fd, st = open_regular(p)
    except FileNotFoundError:
        raise InputError(f"{p} does not exist", path=p) from None
    except IsADirectoryError:
        raise InputError(f"{p} is a directory, not a zotsink output", path=p) from None
    if fd < 0:  # open(2) of a directory or a FIFO for reading succeeds
        raise InputError(f"{p} is {file_kind(st.st_mode)}, not a zotsink output", path=p)
    return fd


def snapshot(
    path: str | os.PathLike[str], *, lock: str = "auto", timeout: float = 600.0
) -> tuple[int, int]:
    """Open OUT and read its size under a shared lock: ``(fd, size)``; the caller closes fd."""
    p = os.fspath(path)
    locker = Locker(lock, p)
    (fd, _dev, _ino), st, _waited = open_locked(
        p, lambda: _open_for_reading(p), locker, timeout, shared=True
    )
    try:
        locker.release()
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def iter_snapshot(fd: int, size: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The first ``size`` bytes of ``fd`` in chunks; closes ``fd`` at the end."""
    try:
        yield from pread_chunks(fd, size, chunk)
    finally:
        os.close(fd)


def read_records(
    path: str | os.PathLike[str],
    *,
    header: bool = False,
    format: str | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[list[str] | dict[str, str]]:
    """The records of OUT as lists of values (dicts keyed by the first line with ``header``).

    Taken from a consistent snapshot (see :func:`snapshot`). A final line without its
    newline (a writer that died mid-write) is not a record and is left out.
    """
    p = os.fspath(path)
    fmt = format_for(p, format)
    fd, size = snapshot(p, lock=lock, timeout=timeout)
    rows = _rows(iter_snapshot(fd, size), fmt)
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
