"""``zotsink pack ARCHIVE FILE ...``: files (or stdin) as members, named so nothing collides.

Every FILE is checked and read before anything is appended: a directory, FIFO, device or
unreadable file is an error that appends nothing. The members of one command are appended
adjacent, under one lock hold.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import BinaryIO

from .._core.fileio import file_kind, open_regular, same_file
from .._core.options import write_options
from .._core.sidefiles import spill_name_problem
from .._core.stamp import parse_stamp, stamp_values
from ..errors import InputError, RecordError, UsageError
from .append import MAX_MEMBER, Pending, append_pending
from .index import Row, index_path

__all__ = ["default_prefix", "pack_files", "read_file"]


def default_prefix(stamp: str | Sequence[str] | None = None) -> str:
    """``<job>_<task>/`` where a scheduler is seen (or the ``stamp`` fields), else ``""``."""
    fields = parse_stamp(stamp) if stamp is not None else ("job", "task")
    values = [v.replace("/", "_") for v in stamp_values(fields) if v]
    return "_".join(values) + "/" if values else ""


def read_file(path: str, max_member: int = MAX_MEMBER) -> Pending:
    """A regular file as a member (base name, mode, mtime, owner); InputError otherwise."""
    try:
        fd, st = open_regular(path)  # a FIFO given as FILE must not hang the open
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}; nothing was appended") from e
    if fd < 0:
        raise InputError(
            f"{path} is {file_kind(st.st_mode)}: pack takes regular files only; "
            "nothing was appended"
        )
    try:
        if st.st_size > max_member:
            raise RecordError(
                f"{path} has {st.st_size} bytes, over the --max-member limit of {max_member}; "
                "nothing was appended"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_member + 1)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}; nothing was appended") from e
    finally:
        os.close(fd)
    if len(data) > max_member:  # it grew while we read
        raise RecordError(f"{path} is over the --max-member limit of {max_member}")
    return Pending(
        os.path.basename(path), data, st.st_mode & 0o7777, int(st.st_mtime), st.st_uid, st.st_gid
    )


def _read_stdin(stream: BinaryIO, max_member: int) -> bytes:
    data = stream.read(max_member + 1)
    if len(data) > max_member:
        raise RecordError(
            f"stdin has more than the --max-member limit of {max_member} bytes; nothing "
            "was appended"
        )
    return data


def pack_files(
    archive: str | os.PathLike[str],
    files: Sequence[str],
    *,
    name: str | None = None,
    prefix: str | None = None,
    stamp: str | Sequence[str] | None = None,
    replace: bool = False,
    seal: bool = False,
    max_member: int = MAX_MEMBER,
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
    stdin: BinaryIO | None = None,
) -> list[Row]:
    """Append FILEs (``-``: stdin, which needs ``name``) as members; their index rows.

    A member is called ``name`` when given (one FILE only), else ``prefix`` + the file's base
    name; ``prefix`` defaults to :func:`default_prefix` (``<job>_<task>/`` in a job array).
    """
    archive = os.fspath(archive)
    opts = write_options(lock=lock, sync=sync, timeout=timeout)  # before anything is read
    if not files:
        raise UsageError("give at least one FILE, or - for stdin")
    if name is not None and len(files) != 1:
        raise UsageError("--name names one member: give exactly one FILE with it")
    if "-" in files and name is None:
        raise UsageError("stdin (-) needs --name for its member")
    if files.count("-") > 1:
        raise UsageError("stdin (-) can be given once")
    if prefix is None:
        prefix = default_prefix(stamp)
    elif prefix and not prefix.endswith("/"):
        prefix += "/"
    _refuse_own(archive, files)
    items: list[Pending] = []
    for f in files:
        if f == "-":
            stream = stdin if stdin is not None else sys.stdin.buffer
            item = Pending("", _read_stdin(stream, max_member))
        else:
            item = read_file(f, max_member)
        items.append(item._replace(name=name if name is not None else prefix + item.name))
    return append_pending(archive, items, opts, replace=replace, max_member=max_member, seal=seal)


def _refuse_own(archive: str, files: Sequence[str]) -> None:
    """The archive, its index and its spill tars are never members of it: each is a typo
    or a mix-up (a spill tar's members go back with ``zotsink recover``, whole)."""
    own = (
        (archive, "cannot be packed into itself"),
        (index_path(archive), f"is the index of {archive}"),
    )
    for f in files:
        if f == "-":
            continue
        why = next((w for name, w in own if same_file(f, name)), None)
        if why is None and spill_name_problem(archive, f) is None:
            why = f"is a spill tar of {archive}: `zotsink recover {archive}` adds its members"
        if why is not None:
            raise UsageError(f"{f} {why}; nothing was appended")
