"""The parts of OUT that ``ok`` ends claim, and the cheap check that one is still there.

An ``end`` row names where its tasks' records went: each contiguous block of them in OUT
(offset, length, CRC-32) in the file OUT was then (its inode), each task's piece a part of
a block in the order of the row's items. :class:`Piece` is one task's; :func:`piece_problem`
says, on sizes and identity alone, why a piece is not in OUT as found now; a reader that
reads the bytes (``cat``, ``verify``) also checks the block's CRC. A piece is judged by its
whole block (:meth:`Piece.problem`): one CRC covers the block, so a block cut short is
no task's, whichever pieces lie before the cut.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

from .._core.fileio import fresh_stat
from .._core.fsinfo import wants_fsync
from .format import Block

__all__ = ["Claims", "OutFile", "Piece", "out_file", "piece_problem"]


class Piece(NamedTuple):
    """The part of OUT one task's ``ok`` end claims, and the block it lies in."""

    offset: int
    length: int
    tasknum: int
    ino: str  # the inode of the file it was appended to ("": not recorded)
    block: Block  # its block: checked whole by its CRC (-1: a piece of a release before it)

    def problem(self, out: OutFile | None) -> str | None:
        """Why it is not in OUT as ``out`` finds it (None: it may be): its whole block must
        be, when the block has a CRC to check."""
        if self.length <= 0:
            return None
        if self.block.crc >= 0:
            return piece_problem(self.block.offset, self.block.length, self.ino, out)
        return piece_problem(self.offset, self.length, self.ino, out)


class OutFile(NamedTuple):
    """OUT as a reader finds it: which file, and how many bytes."""

    ino: int
    size: int


class Claims(NamedTuple):
    """The parts of OUT that a ledger's ``ok`` ends claim: what OUT holds exactly once."""

    header: int  # bytes of OUT's header line (0: OUT has none)
    parts: list[Piece]  # each task's latest ok attempt's piece, in OUT's order
    #: (task number, why) of the tasks whose latest ok piece is not to be trusted
    untrusted: list[tuple[int, str]]


def out_file(path: str | os.PathLike[str]) -> OutFile | None:
    """OUT's identity and size now, as the server has it; None when no such file exists.

    A network client (GlusterFS) may report the size it cached before another node
    appended, for a moment: the pieces of tasks that node just committed would look cut
    off, their tasks lost, and a run would start them again while they are done. So on a
    network or FUSE filesystem a regular file's size is asked of the server
    (:func:`fresh_stat`)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or not wants_fsync(path):
        # a local disk's stat is the truth; a FIFO or device is no OUT and never opened
        return OutFile(st.st_ino, st.st_size)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return OutFile(st.st_ino, st.st_size)  # not readable here: its stat is all there is
    try:
        _dev, ino, size = fresh_stat(fd, True)
    except OSError:
        return OutFile(st.st_ino, st.st_size)
    finally:
        os.close(fd)
    return OutFile(ino, size)


def piece_problem(offset: int, length: int, ino: str, out: OutFile | None) -> str | None:
    """Why a claimed piece (its offset, length and the inode it was appended to) is not in
    OUT as ``out`` finds it; None when it may be (or it claims no bytes)."""
    if length <= 0:
        return None
    if out is None:
        return "OUT does not exist" if ino else None
    if ino and ino != str(out.ino):
        return "OUT is another file now (renamed, replaced or removed since)"
    if offset + length > out.size:
        return "OUT is shorter than the piece's end (emptied or cut since)"
    return None
