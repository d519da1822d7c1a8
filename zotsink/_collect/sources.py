"""The files collect reads: directories, single files, tar archives and path lists, in order.

Order is "sorted path order": per SOURCE, paths ordered component by component (what a
sorted depth-first walk gives, so ``a/b`` comes before ``a.txt``). Directories are walked
with ``os.scandir`` and symbolic links inside them are never followed. Tar archives are
:mod:`zotsink.collect_tar`, reading files is :mod:`zotsink.collect_read`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Final

from .._core.fsinfo import is_network, mount_for
from .read import ARCHIVE, LISTED_DIR, Item, Task, item, read_items
from .tar import read_archive

__all__ = [
    "ARCHIVE_ENDINGS",
    "Exclude",
    "auto_jobs",
    "is_archive",
    "iter_items",
]

#: SOURCE endings read as tar archives.
ARCHIVE_ENDINGS: Final = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
#: Readers per SOURCE on network and FUSE filesystems when ``jobs`` is not given.
NETWORK_JOBS: Final = 8


def is_archive(path: str) -> bool:
    return path.lower().endswith(ARCHIVE_ENDINGS)


def auto_jobs(path: str) -> int:
    """Readers for files under ``path``: 1 on local disks, more where opens cost round trips."""
    m = mount_for(path)
    return NETWORK_JOBS if m is not None and is_network(m.fstype) else 1


class Exclude:
    """Files a walk must not read: OUT, its side files and the archive being written."""

    def __init__(self) -> None:
        self._rules: dict[str, tuple[set[str], list[str]]] = {}
        self._real: dict[str, str] = {}  # directory -> its real path, asked once

    def add(self, path: str, *, prefixes: Iterable[str] = ()) -> None:
        d, base = os.path.split(os.path.abspath(path))
        names, pre = self._rules.setdefault(os.path.realpath(d), (set(), []))
        names.add(base)
        pre.extend(base + p for p in prefixes)

    def names_in(self, directory: str) -> tuple[set[str], list[str]] | None:
        if not self._rules:
            return None
        real = self._real.get(directory)
        if real is None:
            real = self._real[directory] = os.path.realpath(directory)
        return self._rules.get(real)

    def hit(self, path: str) -> bool:
        """Whether a path named by the user (a SOURCE, a line of a path list) is excluded."""
        d, base = os.path.split(path)
        rules = self.names_in(d or ".")
        return rules is not None and (base in rules[0] or any(base.startswith(p) for p in rules[1]))


def _listing(d: str, exclude: Exclude) -> list[str]:
    """Entries of ``d`` as ``name + "\\0" + kind``, sorted by name.

    One string per entry, not a DirEntry: a flat directory of a million files would
    otherwise cost hundreds of MB. NUL cannot occur in a name and sorts first, so the
    strings sort exactly as the names do.
    """
    out: list[str] = []
    with os.scandir(d) as it:
        for e in it:
            # without following: a symlink is neither a file nor a directory here
            if e.is_file(follow_symlinks=False):
                out.append(e.name + "\0f")
            elif e.is_dir(follow_symlinks=False):
                out.append(e.name + "\0d")
            else:
                out.append(e.name + ("\0l" if e.is_symlink() else "\0o"))
    rules = exclude.names_in(d)
    if rules is not None:
        names, prefixes = rules
        out = [s for s in out if s[:-2] not in names and not any(s.startswith(p) for p in prefixes)]
    out.sort()
    return out


def _walk(top: str, exclude: Exclude) -> Iterator[tuple[str, str, str]]:
    """(path relative to top, path, kind) of everything under ``top``, depth first, sorted.

    kind: ``f`` regular file, ``l`` symlink, ``o`` other, ``!reason`` unreadable directory.
    """
    top = top.rstrip("/") or "/"
    base = "" if top == "/" else top
    stack = [(base, "", iter(_listing(top, exclude)))]
    while stack:
        dpath, drel, it = stack[-1]
        for s in it:
            name, kind = s[:-2], s[-1]
            path, rel = dpath + "/" + name, drel + name
            if kind != "d":
                yield rel, path, kind
                continue
            try:
                listing = _listing(path, exclude)
            except OSError as e:
                yield rel, path, "!unreadable directory: " + (e.strerror or str(e))
                continue
            stack.append((path, rel + "/", iter(listing)))
            break
        else:
            stack.pop()


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
) -> Iterator[Item]:
    """Every file of every SOURCE, read or skipped, in output order.

    ``wanted(name)`` False marks a file as already collected: it is not read, and its item
    has neither data nor a skip reason.
    """
    multi = len(sources) > 1
    for src in sources:
        if src == "-":
            yield from _listed(stdin, jobs, want_stat, staging, notes, wanted, exclude)
        elif os.path.isdir(src):
            prefix = _source_prefix(src, multi)
            tasks = _dir_tasks(src, prefix, exclude, wanted)
            root = src.rstrip("/") + "/"  # as _walk joins it
            yield from read_items(tasks, jobs or auto_jobs(src), want_stat, src, root, prefix)
        elif is_archive(src):
            prefix = _source_prefix(src, True) if multi else ""
            yield from read_archive(src, prefix, staging, wanted)
        elif not exclude.hit(src):
            name = os.path.normpath(src)
            kind = "s" if wanted is not None and not wanted(name) else "f"
            yield item(name, os.path.basename(name), src, kind, True, want_stat)


def _dir_tasks(
    top: str, prefix: str, exclude: Exclude, wanted: Callable[[str], bool] | None
) -> Iterator[Task]:
    for rel, path, kind in _walk(top, exclude):
        name = prefix + rel
        if kind == "f" and wanted is not None and not wanted(name):
            kind = "s"
        yield name, rel.rsplit("/", 1)[-1], path, kind, False


def _listed(
    stdin: IO[str] | None,
    jobs: int | None,
    want_stat: bool,
    staging: str | None,
    notes: list[str],
    wanted: Callable[[str], bool] | None,
    exclude: Exclude,
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
    # sorted like a walk, and each path once; the list costs about 100 bytes per path
    paths = sorted({ln.rstrip("\n") for ln in lines} - {""}, key=lambda p: p.replace("/", "\0"))

    def tasks() -> Iterator[Task]:
        for path in paths:
            if exclude.hit(path):
                continue  # OUT itself, its side files, the archive being written
            name = os.path.normpath(path)
            if is_archive(path):
                kind = "a"
            elif wanted is not None and not wanted(name):
                kind = "s"
            else:
                kind = "?"  # a file, a directory, or nothing: the reader finds out
            # not followed, as in a walk: `find DIR | zotsink collect -` = `zotsink collect DIR`
            yield name, os.path.basename(name), path, kind, False

    dirs = 0
    for it in read_items(tasks(), jobs or auto_jobs("."), want_stat, "the path list"):
        if it.skip == ARCHIVE:
            yield from read_archive(it.path or it.name, it.name + "/", staging, wanted)
        elif it.skip == LISTED_DIR:
            dirs += 1
        else:
            yield it
    if dirs:
        notes.append(
            f"{dirs} directories in the path list were not walked: only the files listed are "
            "collected"
        )
