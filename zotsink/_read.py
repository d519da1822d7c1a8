"""Reading OUT: its records from a consistent snapshot (see :mod:`zotsink._core.snapshot`).

When ``zotsink run`` wrote OUT, the ledger beside it (``OUT.ledger``) says which part of
OUT each task's latest ``ok`` attempt wrote. Readers then see that committed view: each
task's records exactly once, and nothing of attempts that failed, were interrupted or
crashed before their row was written. A piece is shown only while it is what its row
says: inside OUT, in the same file, with the same checksum; the tasks whose pieces are not
are named in a warning. ``every=True`` (``zotsink cat --all``) reads every line. An OUT
with no ledger, or a ledger begun by a release that did not record where each attempt's
records are, is read whole.
"""

from __future__ import annotations

import os
import warnings
import zlib
from collections.abc import Iterator

from ._core.fileio import pread_chunks, split_lines
from ._core.records import csv_module, decode_row, format_for
from ._core.snapshot import iter_snapshot, snapshot
from ._ledger.pieces import Claims, OutFile, Piece, out_file
from ._ledger.read import Snapshot
from ._ledger.view import LedgerView
from .errors import RecordError, ZotsinkWarning

__all__ = [
    "Blocks",
    "committed_chunks",
    "committed_parts",
    "iter_snapshot",
    "piece_chunks",
    "read_records",
    "snapshot",
    "warn_untrusted",
]


def committed_parts(
    path: str | os.PathLike[str],
    size: int,
    *,
    ledger: str | os.PathLike[str] | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
    out: OutFile | int | None = None,
) -> Claims | None:
    """The committed view of OUT's first ``size`` bytes (its snapshot): OUT's header and
    the parts each task's latest ``ok`` attempt wrote, as the ledger beside OUT (``ledger``,
    default ``OUT.ledger``) claims them. None when there is no such ledger: every byte
    counts.

    ``out``: OUT as its snapshot's descriptor finds it now (its inode and size), or that
    descriptor, looked at once the ledger is read (default: the file at ``path`` then). A
    part in another file (OUT renamed or replaced since its row), or beyond OUT's end now
    (OUT emptied or cut), is not to be trusted: it is left out and named in ``untrusted``.
    A part beyond ``size`` but within OUT now was claimed after the snapshot: left out (OUT
    is looked at after the ledger, so that such a part is never taken for one cut off)."""
    p = os.fspath(path)
    book = p + ".ledger" if ledger is None else os.fspath(ledger)
    if not os.path.lexists(book):
        return None
    view = LedgerView(pieces=True)
    with Snapshot(book, lock=lock, timeout=timeout) as snap:
        view.feed(snap.rows())
    if isinstance(out, int):
        st = os.fstat(out)
        now: OutFile | None = OutFile(st.st_ino, st.st_size)
    else:
        now = out if out is not None else out_file(p)
    c = view.claims(now)
    parts = [piece for piece in c.parts if piece.offset + piece.length <= size]
    return Claims(min(c.header, size), parts, c.untrusted)


class Blocks:
    """The blocks of OUT that a read has checked by their CRC: each read (and checked) once,
    however many tasks' pieces lie in it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._checked: dict[tuple[int, int], bool] = {}

    def whole(self, piece: Piece) -> bool:
        """Whether the block the piece lies in holds the bytes its end row wrote."""
        block = piece.block
        if block.crc < 0:
            return True  # a row of a release before checksums: taken as it is
        known = (block.offset, block.length)
        got = self._checked.get(known)
        if got is None:
            crc = 0
            end = block.offset + block.length
            for chunk in pread_chunks(self.fd, end, start=block.offset):
                crc = zlib.crc32(chunk, crc)
            got = self._checked[known] = crc == block.crc
        return got


def piece_chunks(fd: int, piece: Piece, blocks: Blocks | None = None) -> Iterator[bytes] | None:
    """A claimed piece's bytes, once the CRC of its block says they are the ones its task
    wrote; None when they are not (OUT was changed in place since: edited, or emptied and
    written again)."""
    if not (blocks or Blocks(fd)).whole(piece):
        return None
    return pread_chunks(fd, piece.offset + piece.length, start=piece.offset)


def warn_untrusted(path: str, untrusted: list[tuple[int, str]]) -> None:
    """Say which tasks' ``ok`` rows claim records OUT does not hold as they wrote them."""
    if not untrusted:
        return
    whys = sorted({why for _n, why in untrusted})
    nums = sorted(n for n, _why in untrusted)
    shown = ", ".join(map(str, nums[:10])) + (", ..." if len(nums) > 10 else "")
    warnings.warn(
        ZotsinkWarning(
            f"{path}: the ok rows of {len(nums)} task(s) ({shown}) claim records that OUT "
            f"does not hold as those tasks wrote them ({'; '.join(whys)}): left out of the "
            "view; `zotsink status` and `zotsink missing` count such tasks as lost, and the "
            "next `zotsink run` runs them again when OUT is another file or shorter"
        ),
        stacklevel=3,
    )


def committed_chunks(
    path: str | os.PathLike[str],
    *,
    ledger: str | os.PathLike[str] | None = None,
    every: bool = False,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[bytes]:
    """OUT's bytes as readers see them: the committed view when a ledger is beside OUT
    (``ledger``, default ``OUT.ledger``), every byte with ``every`` or without one. A
    claimed piece that is not there, or not the same (see :func:`committed_parts` and
    :func:`piece_chunks`), is left out with a warning naming its task."""
    p = os.fspath(path)
    fd, size = snapshot(p, lock=lock, timeout=timeout)
    if every:
        yield from iter_snapshot(fd, size)
        return
    try:
        # Read after OUT's snapshot: a part claimed since lies beyond it and is left out
        c = committed_parts(p, size, ledger=ledger, lock=lock, timeout=timeout, out=fd)
        if c is None:
            yield from pread_chunks(fd, size)
            return
        yield from pread_chunks(fd, c.header)
        untrusted = list(c.untrusted)
        blocks = Blocks(fd)
        for piece in c.parts:
            chunks = piece_chunks(fd, piece, blocks)
            if chunks is None:
                untrusted.append((piece.tasknum, "OUT was changed in place since"))
                continue
            yield from chunks
        warn_untrusted(p, untrusted)
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
