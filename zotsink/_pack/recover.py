"""Folding spill tars back into their archive: what ``zotsink recover ARCHIVE.tar`` runs.

A spill tar holds the members of calls that could not be appended (lock timeout, a failed
write), exactly as they would have been written. Each is appended with its original name,
attributes and provenance. A member whose name is in the archive already with the same
sha256 (and the same task and attempt of ``zotsink run``) is skipped, so a recover
interrupted between its append and the removal of the spill file can simply be run again.

A spilled member of a run task's attempt whose name the archive has from a later attempt
of the same task is not appended: appended last, it would be what tar extracts, and an
attempt that failed would win over its retry. The spill tar is kept, and says so.
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

from .._core.fileio import fsync_dir, pread_chunks
from .._core.sidefiles import find_spills
from .._core.spilltake import Refused, check_spill_names, locked_spill
from . import tarfmt
from .append import Pending, append_pending
from .index import Row, index_path, read_index, run_attempt
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
            with locked_spill(p, lock, timeout, advice) as taken:
                if taken is None:
                    continue  # another recover took it
                n, old = _recover_one(path, p, taken[0], taken[1].st_size, lock, timeout)
                added += n
                skipped += old
        except Refused as e:
            left.append(f"{p}: kept, {e}")
            continue
        except _Kept as e:
            added += e.added
            skipped += e.skipped
            left.append(f"{p}: kept, {e}")
            continue
        done.append(p)
    return ArchiveRecoverReport(done, added, skipped, left)


class _Kept(Exception):
    """The spill tar's members that belong in the archive are in it; the rest (damage, or
    members of attempts the archive has newer ones of) is why the spill tar stays."""

    def __init__(self, why: str, added: int, skipped: int) -> None:
        super().__init__(why)
        self.added, self.skipped = added, skipped


def _recover_one(
    path: str, spill: str, fd: int, size: int, lock: str, timeout: float
) -> tuple[int, int]:
    """Append the members of one locked spill tar and remove it: ``(added, skipped)``."""
    data = b"".join(pread_chunks(fd, size))
    items, damage = _members(data)
    rows = read_index(index_path(path))[0]
    have = {r.name: (r.sha256, r.run_attempt()) for r in rows}
    newest = _newest_attempts(rows)
    todo: list[Pending] = []
    older: list[str] = []
    for it, digest in items:
        mine = _run_attempt(it)
        if have.get(it.name) == (digest, mine):
            continue
        if mine is not None and newest.get((it.name, mine[0]), 0) > mine[1]:
            older.append(
                f"{it.name!r} of task {mine[0]} attempt {mine[1]}, which attempt "
                f"{newest[(it.name, mine[0])]} has appended since"
            )
            continue
        todo.append(it)
    skipped = len(items) - len(todo) - len(older)
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
    why = [f"it ends in damage at {damage}"] if damage is not None else []
    if older:
        more = f" and {len(older) - 1} more" if len(older) > 1 else ""
        why.append(
            f"it holds {len(older)} member(s) of earlier attempts ({older[0]}{more}): appended "
            "now they would be what tar extracts; remove it if they are not needed"
        )
    if why:
        raise _Kept("; ".join(why), len(todo), skipped)
    # Only now, with the members fsynced in the archive and the spill tar still locked:
    # its writer cannot have added to it since it was read.
    with contextlib.suppress(FileNotFoundError):
        os.remove(spill)
    fsync_dir(os.path.dirname(spill) or ".")
    return len(todo), skipped


def _newest_attempts(rows: list[Row]) -> dict[tuple[str, int], int]:
    """(name, tasknum) -> the latest attempt of that run task with a member of that name."""
    out: dict[tuple[str, int], int] = {}
    for r in rows:
        got = r.run_attempt()
        if got is not None and got[1] > out.get((r.name, got[0]), 0):
            out[(r.name, got[0])] = got[1]
    return out


def _run_attempt(it: Pending) -> tuple[int, int] | None:
    prov = it.provenance or {}
    return run_attempt(prov.get("tasknum", ""), prov.get("attempt", ""))


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
