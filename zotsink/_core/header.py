"""OUT's header: read from an existing OUT, and the encoder that matches it.

A header is only ever written into an empty OUT (under the lock), so once OUT has a first
line it never changes: reading it needs no lock.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Union

from ..errors import UsageError
from .backoff import STALE_HANDLE, tries
from .fileio import open_regular
from .records import Encoder, decode_row

__all__ = ["Columns", "column_names", "existing_header", "first_is_header", "make_encoder"]

Columns = Union[str, Sequence[str], None]


def column_names(columns: Columns) -> list[str] | None:
    """``columns`` as a list: a comma-separated str (as ``--columns`` takes it) or names."""
    if columns is None:
        return None
    if isinstance(columns, str):
        return [c.strip() for c in columns.split(",")]
    if isinstance(columns, (bytes, bytearray)):
        raise UsageError("columns must be a str such as 'a,b' or a sequence of str, not bytes")
    return [str(c) for c in columns]


def existing_header(path: str) -> bytes | None:
    """OUT's first line when OUT exists and is not empty (read without a lock).

    Safe without a lock: a header is only ever written into an empty file, so once OUT has a
    first line it no longer changes.
    """
    for last in tries(STALE_HANDLE):
        try:
            # A FIFO planted at OUT's name must not hang the start (the writer refuses it at
            # open, saving the records), nor is a device read for a header.
            fd, _st = open_regular(path)
            if fd < 0:
                return None
            with os.fdopen(fd, "rb") as f:
                line = f.readline(1 << 20)
            break
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as e:
            # OUT replaced through another client of a network filesystem (verify --repair
            # on another node): this client's cached handle is stale until its cache lets go.
            if e.errno != errno.ESTALE or last:
                raise
    return line if line.endswith(b"\n") else None


def make_encoder(
    path: str, fmt: str, columns: Columns, stamp: Sequence[str], *, adopt: bool
) -> Encoder:
    """An encoder for OUT; with ``adopt`` and no ``columns``, OUT's existing header is used.

    A tsv/csv OUT's header that the encoder does not write itself (no ``columns``, none
    adopted) is read once for :class:`~.blocks.BlockEncoder`: ``out_header`` (OUT's first
    line) and ``out_new`` (OUT is empty or missing)."""
    columns = column_names(columns)
    enc = Encoder(fmt, columns, stamp)
    if columns is None and fmt != "lines":
        line = existing_header(path)
        if line is not None and adopt:
            names = decode_row(line.rstrip(b"\n").decode("utf-8", "surrogateescape"), fmt)
            if tuple(names[: len(enc.stamp)]) == enc.stamp and len(names) > len(enc.stamp):
                enc.set_columns(names[len(enc.stamp) :])
        if enc.columns is None and not enc.stamp:
            # Raw lines into a header this encoder does not write: a line equal to OUT's
            # header is that header again; into an empty OUT, the first line becomes it.
            size = _size(path)
            enc.out_header = line if line is not None and first_is_header(line, size) else None
            enc.out_new = size == 0
    return enc


def first_is_header(first: bytes, size: int) -> bool:
    """Whether a table's first line (tsv, csv) is a header, from what the file holds: a
    header is only ever written together with records, so it is one when records follow
    it; a file that is its first line alone holds one record, and a record equal to it is
    a record too. ``recover`` decides a spilled first line the same way."""
    return size > len(first)


def _size(path: str) -> int:
    """OUT's size: 0 when it is missing, -1 when it cannot be known."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
    except OSError:
        return -1
