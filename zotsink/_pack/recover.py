"""Folding spill tars back into their archive: what ``zotsink recover ARCHIVE.tar`` runs.

A spill tar holds the members of calls that could not be appended (lock timeout, a failed
write), exactly as they would have been written. Each is appended with its original name,
attributes and provenance. A member whose name is in the archive already with the same
sha256 is skipped, so a recover interrupted between its append and the removal of the
spill file can simply be run again.

A spilled member is never made to win silently over a newer one: tar extracts the last
member of a name, so when the archive got a member of the same name (other data) that is
not older than the spilled one, the spilled member is not appended and its spill tar is
kept, named with the members and the command that adds one anyway.
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

from .._core.fileio import fsync_dir, pread_chunks
from .._core.options import WriteOptions, write_options
from .._core.sidefiles import find_spills
from .._core.spilltake import Refused, check_spill_names, locked_spill
from ..errors import UsageError
from . import tarfmt
from .append import Pending, append_pending
from .index import Row, index_path, read_index
from .tarfmt import TarDamage

__all__ = ["ArchiveRecoverReport", "recover_archive"]


class ArchiveRecoverReport(NamedTuple):
    """What :func:`recover_archive` moved into the archive, and the spill tars it left."""

    files: list[str]  #: spill tars appended and removed
    members: int  #: members appended
    skipped: int  #: members that were in the archive already
    left: list[str]  #: spill tars kept, each with the reason

    @property
    def ok(self) -> bool:
        """Every spill tar was folded in: none is left."""
        return not self.left

    def to_dict(self) -> dict[str, object]:
        return {**self._asdict(), "ok": self.ok}


def recover_archive(
    path: str | os.PathLike[str],
    spills: list[str] | None = None,
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> ArchiveRecoverReport:
    """Append the members of the archive's spill tars (default: those beside it), fsynced,
    then remove each spill tar whose members are all in the archive.

    Named spill tars must be named as the archive's (``ARCHIVE.spill.<host>.<pid>[.<n>]``)
    and not be the archive: anything else raises :class:`UsageError` before anything is
    done. A spill tar that is not a regular file of the user's own is left, with the
    reason; one that is taken is read, appended and removed under its writer's lock.
    """
    path = os.fspath(path)
    # members go in fsynced whatever the filesystem: the spill tar is removed after
    opts = write_options(lock=lock, sync="fsync", timeout=timeout)
    if spills is None:
        paths = find_spills(path)
    else:
        paths = [os.fspath(p) for p in spills]
        check_spill_names(path, paths, "tars")
    done: list[str] = []
    left: list[str] = []
    added = skipped = 0
    advice = (
        f"it may have been put there to slip members into {path}: check it, and if its "
        f"members belong there, add them with `zotsink pack {path} FILE...`"
    )
    for p in paths:
        try:
            with locked_spill(p, opts.lock, opts.timeout, advice) as taken:
                if taken is None:
                    continue  # another recover took it
                n, old = _recover_one(path, p, taken[0], taken[1].st_size, opts)
                added += n
                skipped += old
        except Refused as e:
            left.append(f"{p}: kept, {e}")
            continue
        except _Damaged as e:
            added += e.added
            skipped += e.skipped
            left.append(f"{p}: kept, it ends in damage at {e.damage}")
            continue
        except _Superseded as e:
            added += e.added
            skipped += e.skipped
            left.append(f"{p}: kept, {e}")
            continue
        except UsageError as e:  # a name tar could not extract beside the archive's others
            left.append(f"{p}: kept, {e}")
            continue
        done.append(p)
    return ArchiveRecoverReport(done, added, skipped, left)


class _Damaged(Exception):
    """The spill tar's readable members are in the archive; the rest is damaged."""

    def __init__(self, damage: TarDamage, added: int, skipped: int) -> None:
        super().__init__(str(damage))
        self.damage, self.added, self.skipped = damage, added, skipped


class _Superseded(Exception):
    """Members of the spill tar that the archive has a newer member of the same name for."""

    def __init__(
        self, path: str, spill: str, newer: list[tuple[Pending, Row]], added: int, skipped: int
    ) -> None:
        it, row = newer[0]
        spilled = (it.provenance or {}).get("time") or "at an unknown time"
        names = ", ".join(repr(i.name) for i, _r in newer[:3]) + (", ..." if len(newer) > 3 else "")
        super().__init__(
            f"{len(newer)} of its members ({names}) are not newer than the member of the same "
            f"name that {path} got meanwhile ({it.name!r}: spilled {spilled}, in the archive "
            f"{row.time or 'at an unknown time'}); appended, the spilled one would be what tar "
            f"extracts, so it was not; its other members were. To add it anyway as the "
            f"newest: `tar -xOf {spill} NAME | zotsink pack {path} - --name NAME --replace`, "
            f"then remove {spill}"
        )
        self.added, self.skipped = added, skipped


def _recover_one(path: str, spill: str, fd: int, size: int, opts: WriteOptions) -> tuple[int, int]:
    """Append the members of one locked spill tar and remove it: ``(added, skipped)``."""
    data = b"".join(pread_chunks(fd, size))
    items, damage = _members(data)
    last = {r.name: r for r in read_index(index_path(path))[0]}
    todo: list[Pending] = []
    newer: list[tuple[Pending, Row]] = []
    for it, digest in items:
        had = last.get(it.name)
        if had is not None and had.sha256 == digest:
            continue  # in the archive already (a recover before this one)
        if had is not None and not _later(it, had):
            newer.append((it, had))
            continue
        todo.append(it)
    # replace: a spilled member is one this archive was meant to have; if an older member
    # of that name is there, both stay, the spilled one last.
    append_pending(path, todo, opts, replace=True, max_member=1 << 62, spill=False)
    skipped = len(items) - len(todo) - len(newer)
    if damage is not None:
        raise _Damaged(damage, len(todo), skipped)
    if newer:
        raise _Superseded(path, spill, newer, len(todo), skipped)
    # Only now, with the members fsynced in the archive and the spill tar still locked:
    # its writer cannot have added to it since it was read.
    with contextlib.suppress(FileNotFoundError):
        os.remove(spill)
    fsync_dir(os.path.dirname(spill) or ".")
    return len(todo), skipped


def _later(item: Pending, row: Row) -> bool:
    """Whether the spilled ``item`` was made after the archive's member ``row`` (provenance
    times are UTC in one ISO form, so they compare as text); unknown is not later."""
    spilled = (item.provenance or {}).get("time", "")
    return bool(spilled and row.time and spilled > row.time)


def _members(data: bytes) -> tuple[list[tuple[Pending, str]], TarDamage | None]:
    read = lambda o, n: data[o : o + n]  # noqa: E731
    out: list[tuple[Pending, str]] = []
    try:
        for m in tarfmt.walk(read, 0, len(data)):
            fields = tarfmt.parse_comment(m.pax.get("comment"))
            digest = fields.pop("sha256", "")
            body = data[m.data_offset : m.data_offset + m.size]
            out.append(
                (Pending(m.name, body, m.mode, m.mtime, m.uid, m.gid, fields or None), digest)
            )
    except TarDamage as e:
        return out, e
    return out, None
