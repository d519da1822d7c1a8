"""Bringing an archive and its index into agreement, under the archive's lock.

Both the writer (before every append) and ``verify --repair`` use :func:`settle`:

* the last indexed member is checked against the header at its offset; an index that is
  missing, empty while the archive is not, or that does not match (a foreign or stale
  index) is rebuilt from the archive's headers;
* members after the last indexed one that are whole, with data matching the sha256 in
  their PAX comment, are adopted (a writer died after writing them, before its index row);
* whatever follows them (a torn member of a killed writer, or the zero blocks of a sealed
  archive) is cut off with ``ftruncate``, so the next member starts on the grid.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Callable
from typing import NamedTuple

from .._core.fileio import fresh_stat, write_all
from .._core.wholefile import whole_file
from ..errors import UsageError
from . import tarfmt
from .index import HEADER, IndexCache, Row, format_rows, index_path
from .tarfmt import Member, Reader, TarDamage

__all__ = [
    "SaveCut",
    "Settled",
    "check_adoptable",
    "indexed_end",
    "member_row",
    "rewrite_index",
    "settle",
    "sha256_of",
]


def sha256_of(read: Reader, offset: int, size: int) -> str:
    h = hashlib.sha256()
    pos, end = offset, offset + size
    while pos < end:
        chunk = read(pos, min(1 << 20, end - pos))
        if not chunk:
            break
        h.update(chunk)
        pos += len(chunk)
    return h.hexdigest()


def member_row(read: Reader, m: Member, *, strict: bool = True, digest: str = "") -> Row:
    """The index row of a member found in the archive.

    The sha256 is the one pack recorded in the member's PAX comment, else computed from the
    data; provenance comes from the comment too (empty for members another tool wrote).
    Data that does not match its recorded sha256 raises TarDamage, unless not ``strict``
    (``verify`` reports it, and a rebuilt index keeps the sha256 the data should have).
    ``digest``: the data's sha256 when the caller has it already.
    """
    digest = digest or sha256_of(read, m.data_offset, m.size)
    fields = tarfmt.parse_comment(m.pax.get("comment"))
    recorded = fields.get("sha256", digest)
    if strict and recorded != digest:
        raise TarDamage(m.offset, f"the data of {m.name!r} does not match its recorded sha256")
    return Row(
        m.offset,
        m.size,
        m.name,
        recorded,
        fields.get("time", ""),
        fields.get("host", ""),
        fields.get("job", ""),
        fields.get("task", ""),
        fields.get("tasknum", ""),
        fields.get("attempt", ""),
    )


class Settled(NamedTuple):
    """What :func:`settle` found and did."""

    end: int  #: the archive's size afterwards: the end of its last whole member
    cut: int  #: bytes cut off the end
    damage: TarDamage | None  #: why they were cut (None: zero blocks of a sealed archive)
    adopted: int  #: whole members that had no index row and got one
    rebuilt: bool  #: the index was rebuilt from the archive
    torn_index: int  #: bytes of a torn last index row that were cut

    def notes(self, path: str) -> list[str]:
        """Lines for the user about anything that was not plain sailing."""
        out: list[str] = []
        if self.rebuilt:
            out.append(f"{index_path(path)} was missing or did not match; rebuilt from the archive")
        if self.torn_index:
            out.append(f"{index_path(path)}: cut a torn last row ({self.torn_index} bytes)")
        if self.adopted:
            out.append(
                f"{path}: indexed {self.adopted} whole member(s) that a writer killed before "
                "its index row had written"
            )
        if self.cut and self.damage is not None:
            why = "a writer died mid-append" if self.damage.tail else "not a tar member"
            out.append(
                f"{path}: cut {self.cut} bytes at offset {self.end} ({why}: {self.damage.why})"
            )
        return out


def _verified_end(read: Reader, size: int, last: Row) -> int | None:
    """End of the last indexed member when the archive has it at its offset, else None."""
    if last.offset + 512 > size:
        return None
    try:
        m = tarfmt.member_at(read, last.offset, size)
    except TarDamage:
        return None
    if m is None or m.name != last.name or m.size != last.size:
        return None
    recorded = tarfmt.parse_comment(m.pax.get("comment")).get("sha256")
    if recorded is not None and recorded != last.sha256:
        return None
    return m.end


def indexed_end(read: Reader, size: int, last: Row) -> int | None:
    """End of the last indexed member (``last``, the index's last row) when the archive
    has it at its offset, else None: the one test of an index against its archive, for
    the readers as for :func:`settle`."""
    return _verified_end(read, size, last)


#: Saves the bytes from an offset to the end of the archive before they are cut.
SaveCut = Callable[[int], None]


def check_adoptable(
    fd: int, archive: str, then: str = "nothing was appended, choose another ARCHIVE"
) -> None:
    """Refuse a non-empty ARCHIVE that has no index unless it is whole tar members.

    Without its index the file is not one ``zotsink pack`` wrote: a tar made elsewhere is
    adopted (its index is built from it), anything else is someone else's data. The torn-tail
    rule would cut it from the first byte that is not a whole member: a table named by
    mistake (``zotsink pack results.tsv img.png``) would lose its rows.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        return
    read = tarfmt.file_reader(fd)
    try:
        for _m in tarfmt.walk(read, 0, size):
            pass
    except TarDamage as e:
        raise UsageError(
            f"{archive} is not empty, has no index {index_path(archive)} and is not a whole "
            f"tar ({e}): it is no archive of zotsink pack; {then}",
            path=archive,
        ) from None


def settle(
    fd: int,
    idx_fd: int,
    cache: IndexCache,
    *,
    archive: str,
    mode: int,
    fsync: bool,
    coherent: bool = False,
    save_cut: SaveCut | None = None,
) -> Settled:
    """Make the archive (open as ``fd``) end with its last whole member, all of them indexed.

    The caller holds the archive's exclusive lock. The index open as ``idx_fd`` is appended
    to or, when it must be rebuilt, replaced (``cache`` follows either way). ``coherent``:
    sizes come from the server (network and FUSE filesystems; see
    :func:`zotsink._core.fileio.fresh_stat`).

    A torn member at the end (``TarDamage.tail``) and zero blocks are cut. Other damage
    after the last indexed member is cut only through ``save_cut``, which keeps those bytes
    first (``verify --repair``); without it, and for damage before the last indexed member,
    :class:`TarDamage` is raised and nothing is changed.
    """
    idx_size = cache.refresh(idx_fd, coherent)
    torn_index = idx_size - cache.consumed
    dev, ino, size = fresh_stat(fd, coherent)
    if not torn_index and cache.archive_end == (dev, ino, size):
        return Settled(size, 0, None, 0, False, 0)
    read = tarfmt.file_reader(fd)
    start = _verified_end(read, size, cache.rows[-1]) if cache.rows else None
    rebuild = start is None and (size > 0 or bool(cache.rows) or torn_index > 0)
    if start is None:
        start = 0
    if start == size and not rebuild and not torn_index:
        return Settled(size, 0, None, 0, False, 0)
    found: list[Row] = []
    end = start
    damage: TarDamage | None = None
    try:
        for m in tarfmt.walk(read, start, size):
            found.append(member_row(read, m))
            end = m.end
    except TarDamage as e:
        damage = e
        if e.tail and rebuild and coherent and save_cut is None:
            # The index did not match, on a filesystem whose clients may see stale sizes:
            # this view of the end is not trusted enough to cut anything.
            raise TarDamage(
                e.offset, f"{e.why}; the index did not match, so a writer does not cut it here"
            ) from e
        if not e.tail:
            if save_cut is None or (rebuild and cache.rows):
                raise
            save_cut(end)
    if torn_index and not rebuild:
        # A writer was killed mid-row: that row commits nothing; its member, if whole,
        # is among ``found`` and gets a whole row now.
        os.ftruncate(idx_fd, cache.consumed)
    if rebuild:
        rewrite_index(archive, found, mode=mode)
        # ``idx_fd`` still names the old index: the caller reopens it (see Settled.rebuilt).
        cache.reset()
    elif found:
        data = format_rows(found)
        if cache.consumed == 0:
            data = HEADER + data
        write_all(idx_fd, data)
        if fsync:
            os.fsync(idx_fd)
        cache.add(found, cache.consumed + len(data))
    cut = size - end
    if cut:
        os.ftruncate(fd, end)
        if fsync:
            os.fsync(fd)
    return Settled(end, cut, damage, 0 if rebuild else len(found), rebuild, torn_index)


def rewrite_index(archive: str, rows: list[Row], *, mode: int) -> None:
    """Replace the index with ``rows``: a new file beside it, fsynced, renamed over it."""
    path = index_path(archive)
    with contextlib.suppress(OSError):
        kind = stat.S_IFMT(os.lstat(path).st_mode)
        if kind in (stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK):
            # no index but something planted in its place (a FIFO would hang its readers):
            # the rebuilt index takes its place, as verify --repair promises
            os.unlink(path)
    # fsynced always (whole_file does): a rename over the old index must never leave an
    # empty one
    with whole_file(path, mode=mode) as w:
        w.write(HEADER + format_rows(rows))
