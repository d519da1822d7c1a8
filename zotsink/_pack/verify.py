"""``zotsink verify ARCHIVE.tar``: walk the headers, check the index, and ``--repair``.

The walk is pack's own (:func:`.tarfmt.walk`): every header's checksum and ``ustar`` magic,
every member's data within the file, no zero blocks before the end, and each member's data
against the sha256 in its PAX comment. Then every index row must name a member at its
offset, with the same name, size and sha256, and every member must have a row.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .._core.fileio import fresh_stat, open_created, pread_chunks, side_bits, write_all
from .._core.fsinfo import wants_fsync
from .._core.locking import Locker
from .._core.wholefile import whole_file
from ..errors import InputError
from . import tarfmt
from .archive import check_adoptable, member_row, rewrite_index, settle, sha256_of
from .index import IndexCache, Row, index_path, read_index
from .locked import locked_archive
from .tarfmt import TarDamage

__all__ = ["ArchiveReport", "cut_path", "verify_archive"]


class ArchiveReport(NamedTuple):
    """What :func:`verify_archive` found (and, with ``repair``, did)."""

    path: str
    members: int  #: whole members found by walking the headers
    size: int  #: bytes of the archive
    indexed: int  #: rows in the index
    problems: list[str]  #: each names an offset; empty when all is well
    repaired: list[str]  #: what ``repair`` changed
    sealed: bool  #: the archive ends with zero blocks (ready for export)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {**self._asdict(), "ok": self.ok}


def cut_path(archive: str, offset: int) -> str:
    """Where ``--repair`` keeps bytes it cut that were not a torn member."""
    return f"{archive}.cut.{offset}"


def _scan(fd: int, size: int, indexed: bool = True) -> tuple[list[Row], list[str], bool]:
    """Rows of every whole member, problems of the archive, whether it ends sealed (in zero
    blocks). ``indexed``: the archive has its index (without one, no writer of zotsink tore
    it)."""
    read = tarfmt.file_reader(fd)
    rows: list[Row] = []
    problems: list[str] = []
    end = 0
    try:
        for m in tarfmt.walk(read, 0, size):
            digest = sha256_of(read, m.data_offset, m.size)
            row = member_row(read, m, strict=False, digest=digest)
            if digest != row.sha256:
                problems.append(
                    f"offset {m.offset}: the data of {m.name!r} does not match its recorded sha256"
                )
            rows.append(row)
            end = m.end
    except TarDamage as e:
        hint = (
            "a writer was killed mid-append; `zotsink verify --repair` cuts it"
            if e.tail and indexed
            else "not written by zotsink"
        )
        problems.append(f"{e} ({hint})")
        return rows, problems, False
    return rows, problems, end < size  # the walk ended at zero blocks that run to the end


def _check_index(
    path: str, found: list[Row], rows: list[Row], problems: list[str], have_index: bool
) -> None:
    by_offset = {r.offset: r for r in found}
    if found and not have_index:
        problems.append(f"{index_path(path)} is missing: `zotsink verify --repair` rebuilds it")
        return
    indexed: set[int] = set()
    for r in rows:
        m = by_offset.get(r.offset)
        if m is None:
            problems.append(f"index row {r.name!r}: no member starts at offset {r.offset}")
        elif (m.name, m.size) != (r.name, r.size):
            problems.append(
                f"index row {r.name!r} ({r.size} bytes) at offset {r.offset}: the archive has "
                f"{m.name!r} ({m.size} bytes) there"
            )
        elif m.sha256 != r.sha256:
            problems.append(f"offset {r.offset}: the data of {r.name!r} does not match its sha256")
        indexed.add(r.offset)
    missing = [m for m in found if m.offset not in indexed]
    if missing:
        problems.append(
            f"{len(missing)} member(s) have no index row, the first {missing[0].name!r} at "
            f"offset {missing[0].offset} (a writer died before committing them)"
        )


def verify_archive(
    path: str | os.PathLike[str],
    *,
    repair: bool = False,
    lock: str = "auto",
    timeout: float = 600.0,
) -> ArchiveReport:
    """Check a pack archive and its index; with ``repair``, fix what can be fixed.

    Reads under a shared lock, so a member being appended is never taken for a torn one.
    ``repair`` (exclusive lock) cuts a torn tail, keeps other bytes after the last member in
    ``ARCHIVE.cut.<offset>`` before cutting them, and rebuilds the index from the archive.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"{path}: no such archive", path=path)
    locker = Locker(lock, path)
    remote = wants_fsync(path)  # network or FUSE: ask the server for sizes
    repaired: list[str] = []
    with locked_archive(path, locker, timeout, shared=not repair) as fd:
        if repair:
            repaired = _repair(path, fd, remote)
        size = fresh_stat(fd, remote)[2]
        found, problems, sealed = _scan(fd, size, os.path.lexists(index_path(path)))
        rows, idx_problems = read_index(index_path(path))
        problems.extend(idx_problems)
        _check_index(path, found, rows, problems, os.path.exists(index_path(path)))
    return ArchiveReport(path, len(found), size, len(rows), problems, repaired, sealed)


def _repair(path: str, fd: int, remote: bool) -> list[str]:
    mode = os.fstat(fd).st_mode & 0o666  # kept bytes are the archive's: its mode
    idx_mode = side_bits(mode)  # the index is a side file: no write for group or others
    notes: list[str] = []
    if not os.path.lexists(index_path(path)):
        # no index: nothing says a zotsink writer made (and tore) what would be cut
        check_adoptable(fd, path, "nothing was changed")

    def save_cut(offset: int) -> None:
        size = os.fstat(fd).st_size
        dest = cut_path(path, offset)
        # whole or not at all, and never over a file of that name: kept bytes are the user's
        with whole_file(dest, replace=False, mode=mode | 0o600) as w:
            for chunk in pread_chunks(fd, size, start=offset):
                w.write(chunk)
        notes.append(f"kept the {size - offset} bytes from offset {offset} in {dest}")

    idx_fd = open_created(
        index_path(path),
        os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
        idx_mode,
    )
    try:
        settled = settle(
            fd,
            idx_fd,
            IndexCache(),
            archive=path,
            mode=idx_mode,
            fsync=True,
            coherent=remote,
            save_cut=save_cut,
        )
    except TarDamage as e:
        raise InputError(
            f"{path}: damage at {e} lies before members the index has committed; zotsink "
            "will not cut committed members: copy them out with `zotsink cat` first",
            path=path,
        ) from e
    finally:
        os.close(idx_fd)
    notes.extend(settled.notes(path))
    if settled.cut and settled.damage is None:  # only zero blocks were cut: keep the seal
        write_all(fd, bytes(2 * tarfmt.BLOCK))
        os.fsync(fd)
    # settle checks the last row only; a row wrong in the middle needs the whole index anew.
    size = fresh_stat(fd, remote)[2]
    found, _problems, _sealed = _scan(fd, size)
    rows, idx_problems = read_index(index_path(path))
    check: list[str] = list(idx_problems)
    _check_index(path, found, rows, check, os.path.exists(index_path(path)))
    if check:
        rewrite_index(path, found, mode=idx_mode)
        notes.append(f"rebuilt {index_path(path)} from the archive ({len(found)} members)")
    return notes
