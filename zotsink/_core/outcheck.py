"""What OUT may be: the refusals made before anything is read.

A record writer (``zotsink OUT``, ``append``, ``run``, ``collect``, ``append_record``,
``Sink``) calls :func:`check_out` when it is made, so that a wrong OUT costs an error
message, not a stream read for nothing or records where they do not belong.
"""

from __future__ import annotations

import os
import stat
from typing import Final

from ..errors import UsageError
from .fileio import file_kind, is_tar_name, open_regular

__all__ = [
    "PACK_INDEX_HEADER",
    "check_input_not_out",
    "check_out",
    "check_side_file",
    "pack_index_beside",
]


#: The first line of ``ARCHIVE.idx``, the index ``zotsink pack`` keeps beside an archive of
#: any name: what shows that a file is a pack archive when its name does not. Later versions
#: add columns after ``task`` (see ``_pack/index.py``), so a first line that starts with
#: these columns and goes on with a tab is an index too.
PACK_INDEX_HEADER: Final = b"offset\tsize\tname\tsha256\ttime\thost\tjob\ttask\n"


def pack_index_beside(path: str) -> str | None:
    """The name of the pack index beside ``path`` (``path.idx``, a regular file that starts
    with :data:`PACK_INDEX_HEADER`), or None. A record writer refuses such an OUT: its lines
    would read as a torn member, which the next ``zotsink pack`` cuts away."""
    idx = path + ".idx"
    try:
        fd, _st = open_regular(idx)
    except OSError:
        return None
    if fd < 0:
        return None
    try:
        head = os.read(fd, len(PACK_INDEX_HEADER))
    except OSError:
        return None
    finally:
        os.close(fd)
    same = head[:-1] == PACK_INDEX_HEADER[:-1] and head[-1:] in (b"\n", b"\t")
    return idx if same else None


def check_out(path: str) -> None:
    """Refuse, before anything is read, an OUT that records must never go to (UsageError).

    ``-`` (a file named ``-``, where a user meant standard output); a tar archive by its
    name, or a pack archive of any name by the index beside it (lines in an archive read
    as a torn member, which the next ``zotsink pack`` cuts); a device (``/dev/null``: every
    batch would be refused at open and spilled into ``/dev``, the whole stream read for
    nothing). Anything else that is not a regular file is refused at open, with the
    records saved: a FIFO can be planted at any time.
    """
    if path == "-":
        raise UsageError(
            "OUT - would be a file named '-': zotsink appends to a named, shared file; name "
            "it (to print a table: zotsink cat OUT)"
        )
    if is_tar_name(path):
        raise UsageError(
            f"{path} is named as a tar archive: records go to a table (.tsv, .csv, .txt), "
            f"files into an archive with `zotsink pack {path} FILE...`"
        )
    kind = _device(path)
    if kind:
        raise UsageError(
            f"{path} is {file_kind(kind)}: zotsink appends records to regular files only; "
            "name a file as OUT"
        )
    idx = pack_index_beside(path)
    if idx is not None:
        raise UsageError(
            f"{path} is a pack archive ({idx} is its index): records go to a table (.tsv, "
            f".csv, .txt), files into the archive with `zotsink pack {path} FILE...`"
        )


def check_side_file(path: str) -> None:
    """Refuse, before anything runs, a side file (the log, the ledger, ``OUT.rejects``)
    that is a device: :func:`check_out`'s rule for the files written beside OUT. Lines
    for ``--log /dev/null`` would be refused at open, then spilled beside it, into
    ``/dev``. As for OUT, a FIFO or socket is refused at open, with the lines saved."""
    kind = _device(path, follow=False)  # a link planted there is refused at open
    if kind:
        raise UsageError(
            f"{path} is {file_kind(kind)}: zotsink keeps the log, the ledger and rejected "
            "records in regular files of your own, and reads them back (`zotsink status "
            "--failed` shows the tasks' stderr from the log); name a file instead, for "
            "the log one on scratch space if it is not to stay beside OUT"
        )


def _device(path: str, follow: bool = True) -> int:
    """``path``'s mode when it is a character or block device, else 0."""
    try:
        kind = os.stat(path, follow_symlinks=follow).st_mode
    except OSError:
        return 0  # not there yet (or not reachable): open() will say
    return kind if stat.S_ISCHR(kind) or stat.S_ISBLK(kind) else 0


def check_input_not_out(infd: int, out: str) -> None:
    """Refuse standard input that is OUT itself: every record read would be appended again
    and read again, and OUT would grow until the disk is full."""
    try:
        a, b = os.fstat(infd), os.stat(out)
    except OSError:
        return  # no OUT yet (or no such input): they cannot be the same file
    if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
        raise UsageError(
            f"standard input is {out} itself: its records would be appended to it again "
            f"without end; read from a copy (cp {out} {out}.copy)"
        )
