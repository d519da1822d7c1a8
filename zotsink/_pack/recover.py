"""Folding spill tars back into their archive: what ``zotsink recover ARCHIVE.tar`` runs.

A spill tar holds the members of calls that could not be appended (lock timeout, a failed
write), exactly as they would have been written. Each is appended with its original name,
attributes and provenance. A member whose name is in the archive already with the same
sha256 is skipped, so a recover interrupted between its append and the removal of the
spill file can simply be run again.
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

from .._core.sidefiles import find_spills
from . import tarfmt
from .append import Pending, append_pending
from .index import index_path, read_index
from .tarfmt import TarDamage

__all__ = ["ArchiveRecoverReport", "recover_archive"]


class ArchiveRecoverReport(NamedTuple):
    files: list[str]  #: spill tars appended and removed
    members: int  #: members appended
    skipped: int  #: members that were in the archive already
    left: list[str]  #: spill tars kept, each with the reason


def recover_archive(
    path: str | os.PathLike[str],
    spills: list[str] | None = None,
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> ArchiveRecoverReport:
    """Append the members of the archive's spill tars (default: those beside it), fsynced,
    then remove each spill tar whose members are all in the archive."""
    path = os.fspath(path)
    paths = list(spills) if spills is not None else find_spills(path)
    done: list[str] = []
    left: list[str] = []
    added = skipped = 0
    for p in paths:
        try:
            with open(p, "rb") as f:
                before = os.fstat(f.fileno())
                data = f.read()
        except FileNotFoundError:
            continue  # another recover took it
        items, damage = _members(data)
        have = {r.name: r.sha256 for r in read_index(index_path(path))[0]}
        todo = [it for it, digest in items if have.get(it.name) != digest]
        skipped += len(items) - len(todo)
        # replace: a spilled member is one this archive was meant to have; if a member of
        # that name was added meanwhile, both stay, the spilled one last.
        append_pending(
            path,
            todo,
            replace=True,
            lock=lock,
            sync="fsync",
            timeout=timeout,
            max_member=1 << 62,
            spill=False,
        )
        added += len(todo)
        if damage is not None:
            left.append(f"{p}: kept, it ends in damage at {damage}")
            continue
        with contextlib.suppress(FileNotFoundError):
            now = os.stat(p)
            if (now.st_ino, now.st_size, now.st_mtime_ns) != (
                before.st_ino,
                before.st_size,
                before.st_mtime_ns,
            ):
                left.append(f"{p}: kept, its writer added to it meanwhile; run recover again")
                continue
            os.remove(p)
        done.append(p)
    return ArchiveRecoverReport(done, added, skipped, left)


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
