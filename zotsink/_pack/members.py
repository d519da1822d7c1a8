"""Reading members back: ``zotsink cat ARCHIVE.tar NAME`` and ``zotsink cat ARCHIVE.tar --list``.

Both go through the index: a member is found by its row and read with one ``pread`` at its
offset, with no scan of the archive. Only committed members have rows, and they are whole
and never rewritten, so reading needs no lock.

The archive is the final word, as for the writers: the index is checked against it the way
:func:`.archive.settle` checks it (its last row must name the member at that offset), and
members after the last indexed one are read from the archive. An index that is missing,
damaged, stale (for another archive, or from before a rebuild), or planted, is not used: the
archive is walked, with a warning.

A name may have several members: ``--replace``, and the retries of a task of
``zotsink run``, each appended after the attempts before it. The last member of a name is
the one tar extracts, and the one read here; given the ``ok`` attempts of a run's ledger,
the last member of an ``ok`` attempt (or one packed outside run) is read instead.
"""

from __future__ import annotations

import hashlib
import os
import stat
import warnings
from collections.abc import Collection

from .._core.fileio import side_file_problem
from ..errors import InputError, ZotsinkWarning
from . import tarfmt
from .archive import indexed_end, member_row
from .index import COLUMNS, Row, format_rows, index_path, read_index
from .tarfmt import TarDamage

__all__ = ["OkAttempts", "format_listing", "latest_members", "list_members", "read_member"]

#: ``(tasknum, attempt)`` of the attempts of ``zotsink run`` that ended ``ok``.
OkAttempts = Collection[tuple[int, int]]


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}", path=path) from e


def list_members(path: str | os.PathLike[str]) -> list[Row]:
    """The index rows of the archive's members, in archive order, checked against it.

    When the index cannot be trusted, or misses members at the end, those rows come from
    the archive's headers (with a warning: ``zotsink verify --repair`` rebuilds the index);
    a torn tail (a writer still appending, or killed) then ends the list.
    """
    path = os.fspath(path)
    fd = _open(path)
    try:
        return _checked_rows(path, fd)
    finally:
        os.close(fd)


def _checked_rows(path: str, fd: int) -> list[Row]:
    idx = index_path(path)
    size = os.fstat(fd).st_size
    read = tarfmt.file_reader(fd)
    rows, why = _index_rows(idx)
    start = 0
    if rows:
        end = indexed_end(read, size, rows[-1])
        if end is None:
            rows, why = [], "does not match the archive (its last row names no member there)"
        else:
            start = end
    found: list[Row] = []
    try:
        for m in tarfmt.walk(read, start, size):
            found.append(member_row(read, m))
    except TarDamage:
        pass  # the list ends at the damage; verify says where and why
    if found and why is None:
        why = f"lacks the last {len(found)} member(s) of the archive"
    if why is not None and (found or size):
        warnings.warn(
            f"{idx} {why}; walking the archive instead (`zotsink verify --repair` rebuilds "
            "the index)",
            ZotsinkWarning,
            stacklevel=3,
        )
    return rows + found


def _index_rows(idx: str) -> tuple[list[Row], str | None]:
    """The rows of the index when it can be used at all, else ``([], why not)``."""
    try:
        st = os.stat(idx)
    except FileNotFoundError:
        return [], "is missing (or no regular file)"
    except OSError as e:
        return [], f"cannot be read ({e.strerror or e})"
    if not stat.S_ISREG(st.st_mode):
        return [], "is missing (or no regular file)"
    problem = side_file_problem(st, idx, own=False)
    if problem:
        return [], f"is not used ({problem})"
    rows, problems = read_index(idx)
    if problems:
        return [], f"is damaged ({problems[0]})"
    return rows, None


def format_listing(rows: list[Row]) -> bytes:
    """The rows as TSV with the index's header line."""
    return ("\t".join(COLUMNS) + "\n").encode() + format_rows(rows)


def _counts(row: Row, ok: OkAttempts | None) -> bool:
    """Whether ``row`` may be the member read for its name: any, without ``ok``; else one
    packed outside run or by an attempt that ended ``ok``."""
    if ok is None:
        return True
    attempt = row.run_attempt()
    return attempt is None or attempt in ok


def latest_members(rows: list[Row], ok: OkAttempts | None = None) -> list[Row]:
    """One row per name, in archive order: the member :func:`read_member` reads for it.

    ``ok``: the ``(tasknum, attempt)`` pairs a run's ledger calls ok; a name that only
    attempts not among them appended is left out.
    """
    chosen: dict[str, Row] = {}
    for r in rows:
        if _counts(r, ok):
            chosen[r.name] = r
    return sorted(chosen.values(), key=lambda r: r.offset)


def read_member(path: str | os.PathLike[str], name: str, *, ok: OkAttempts | None = None) -> bytes:
    """The data of the member called ``name`` (the last one, when there are several, as tar
    extracts it), found through the index and checked against its sha256.

    ``ok``: the ``(tasknum, attempt)`` pairs a run's ledger calls ok: the last member of
    the name packed by one of them, or outside run. InputError when there is none.
    """
    path = os.fspath(path)
    rows = [r for r in list_members(path) if r.name == name]
    row = next((r for r in reversed(rows) if _counts(r, ok)), None)
    if row is None and rows:
        tried = ", ".join(f"task {r.tasknum} attempt {r.attempt}" for r in rows)
        raise InputError(
            f"{path}: every member named {name!r} was appended by an attempt that did not end "
            f"ok in the ledger ({tried}); without the ledger the last of them is read",
            path=path,
        )
    if row is None:
        raise InputError(
            f"{path} has no member named {name!r}: `zotsink cat {path} --list` lists them",
            path=path,
        )
    fd = _open(path)
    try:
        read = tarfmt.file_reader(fd)
        try:
            m = tarfmt.member_at(read, row.offset, os.fstat(fd).st_size)
        except TarDamage as e:
            m, why = None, str(e)
        else:
            why = "another member is there" if m is not None else "the archive ends there"
        if m is None or (m.name, m.size) != (row.name, row.size):
            raise InputError(
                f"{path}: the index points {name!r} at offset {row.offset}, but {why}: "
                f"run `zotsink verify {path}`",
                path=path,
            )
        data = read(m.data_offset, m.size)
        if hashlib.sha256(data).hexdigest() != row.sha256:
            raise InputError(
                f"{path}: the data of {name!r} at offset {row.offset} does not match its "
                f"sha256: run `zotsink verify {path}`",
                path=path,
            )
        return data
    finally:
        os.close(fd)
