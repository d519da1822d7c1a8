"""The files collect reads: directories, single files, tar archives and path lists, in order.

Order is "sorted path order": per SOURCE, paths ordered component by component (what a
sorted depth-first walk gives, so ``a/b`` comes before ``a.txt``). Directories are walked
by descriptors (:mod:`zotsink._collect.walk`) and symbolic links inside them are never
followed. Tar archives are :mod:`zotsink._collect.tar`, reading files is
:mod:`zotsink._collect.read`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Final

from .._core.fileio import is_tar_name
from .._core.fsinfo import is_network, mount_for
from .read import ARCHIVE, LISTED_DIR, MAX_FILE_SIZE, Item, Task, item, read_items
from .tar import read_archive
from .walk import walk

__all__ = [
    "Exclude",
    "auto_jobs",
    "count_items",
    "iter_items",
]

#: Readers per SOURCE on network and FUSE filesystems when ``jobs`` is not given.
NETWORK_JOBS: Final = 8


def auto_jobs(path: str) -> int:
    """Readers for files under ``path``: 1 on local disks, more where opens cost round trips."""
    m = mount_for(path)
    return NETWORK_JOBS if m is not None and is_network(m.fstype) else 1


class Exclude:
    """Files a walk must not read: OUT, its side files and the archive being written.

    Directories are known by (st_dev, st_ino), as the walk sees them through descriptors.
    """

    def __init__(self) -> None:
        self.rules: dict[tuple[int, int], tuple[set[str], list[str]]] = {}
        self._ids: dict[str, tuple[int, int] | None] = {}  # directory -> its id, asked once

    def add(self, path: str, *, prefixes: Iterable[str] = ()) -> None:
        d, base = os.path.split(os.path.abspath(path))
        st = os.stat(d)
        names, pre = self.rules.setdefault((st.st_dev, st.st_ino), (set(), []))
        names.add(base)
        pre.extend(base + p for p in prefixes)

    def names_in(self, directory: str) -> tuple[set[str], list[str]] | None:
        if not self.rules:
            return None
        if directory not in self._ids:
            try:
                st = os.stat(directory)
                self._ids[directory] = (st.st_dev, st.st_ino)
            except OSError:
                self._ids[directory] = None
        key = self._ids[directory]
        return None if key is None else self.rules.get(key)

    def hit(self, path: str) -> bool:
        """Whether a path named by the user (a SOURCE, a line of a path list) is excluded."""
        d, base = os.path.split(path)
        rules = self.names_in(d or ".")
        return rules is not None and (base in rules[0] or any(base.startswith(p) for p in rules[1]))


def count_items(sources: list[str], exclude: Exclude) -> int | None:
    """How many items :func:`iter_items` will give, from directory listings alone (no file is
    opened): for a progress display. None when it cannot be known up front (an archive, a
    path list on stdin)."""
    total = 0
    for src in sources:
        if src == "-" or (is_tar_name(src) and not os.path.isdir(src)):
            return None
        if not os.path.isdir(src):
            total += not exclude.hit(src)
            continue
        try:
            total += sum(1 for _ in walk(src, exclude.rules))
        except OSError:
            total += 1  # the reader reports it
    return total


def _source_prefix(src: str, multi: bool) -> str:
    if not multi:
        return ""
    norm = os.path.normpath(src)
    return "" if norm == "." else norm.rstrip("/") + "/"


def iter_items(
    sources: list[str],
    *,
    stdin: IO[str] | None,
    jobs: int | None,
    want_stat: bool,
    exclude: Exclude,
    staging: str | None,
    notes: list[str],
    wanted: Callable[[str], bool] | None = None,
    limit: int = MAX_FILE_SIZE,
) -> Iterator[Item]:
    """Every file of every SOURCE, read or skipped, in output order.

    ``wanted(name)`` False marks a file as already collected: it is not read, and its item
    has neither data nor a skip reason. A file or member over ``limit`` bytes is skipped
    unread.
    """
    multi = len(sources) > 1
    for src in sources:
        if src == "-":
            yield from _listed(stdin, jobs, want_stat, staging, notes, wanted, exclude, limit)
        elif os.path.isdir(src):
            prefix = _source_prefix(src, multi)
            root = src.rstrip("/") + "/"  # as _dir_tasks joins it
            tasks = _dir_tasks(src, root, prefix, exclude, wanted)
            yield from read_items(
                tasks, jobs or auto_jobs(src), want_stat, src, root, prefix, limit
            )
        elif is_tar_name(src):
            prefix = _source_prefix(src, True) if multi else ""
            yield from read_archive(src, prefix, staging, wanted, limit)
        elif not exclude.hit(src):
            name = os.path.normpath(src)
            kind = "s" if wanted is not None and not wanted(name) else "f"
            yield item(name, os.path.basename(name), src, kind, True, None, want_stat, limit)


def _dir_tasks(
    top: str, root: str, prefix: str, exclude: Exclude, wanted: Callable[[str], bool] | None
) -> Iterator[Task]:
    for rel, d, kind in walk(top, exclude.rules):
        name = prefix + rel
        if kind == "f" and wanted is not None and not wanted(name):
            kind = "s"
        yield name, rel.rsplit("/", 1)[-1], root + rel, kind, False, d


def _listed(
    stdin: IO[str] | None,
    jobs: int | None,
    want_stat: bool,
    staging: str | None,
    notes: list[str],
    wanted: Callable[[str], bool] | None,
    exclude: Exclude,
    limit: int,
) -> Iterator[Item]:
    """Files named one per line on stdin (``find ... | zotsink collect -``), sorted.

    Directories in the list are passed over (``find`` lists them beside their files) and
    symbolic links are not followed, as in a walk; archives in it are read as archives, their
    members named ``ARCHIVE/member``.
    """
    if stdin is None:
        return
    # bytes when there are: a file name need not be valid UTF-8
    lines = (os.fsdecode(b) for b in stdin.buffer) if hasattr(stdin, "buffer") else stdin
    # sorted like a walk, and each path once; the whole list is held, one string per path
    paths = sorted({ln.rstrip("\n") for ln in lines} - {""}, key=lambda p: p.replace("/", "\0"))

    def tasks() -> Iterator[Task]:
        for path in paths:
            if exclude.hit(path):
                continue  # OUT itself, its side files, the archive being written
            name = os.path.normpath(path)
            if is_tar_name(path):
                kind = "a"
            elif wanted is not None and not wanted(name):
                kind = "s"
            else:
                kind = "?"  # a file, a directory, or nothing: the reader finds out
            # not followed, as in a walk: `find DIR | zotsink collect -` = `zotsink collect DIR`
            yield name, os.path.basename(name), path, kind, False, None

    dirs = 0
    for it in read_items(tasks(), jobs or auto_jobs("."), want_stat, "the path list", limit=limit):
        if it.skip == ARCHIVE:
            yield from read_archive(it.path or it.name, it.name + "/", staging, wanted, limit)
        elif it.skip == LISTED_DIR:
            dirs += 1
        else:
            yield it
    if dirs:
        notes.append(
            f"{dirs} directories in the path list were not walked: only the files listed are "
            "collected"
        )
