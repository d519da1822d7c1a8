"""Walking a SOURCE directory by descriptors: nothing under it is ever reached by a path.

A walk that joins path strings resolves every component again at each open: a subdirectory
swapped for a symbolic link between its listing and the reading of its files (or their
removal) sends collect outside SOURCE. Here each directory is opened once, relative to its
parent's descriptor, with ``O_NOFOLLOW | O_DIRECTORY``; it is listed with ``os.scandir(fd)``
and its files are opened (and later removed) relative to that same descriptor. A directory
replaced by a symlink then fails to open (``ELOOP``/``ENOTDIR``) and is skipped, and a
directory moved away keeps being read where it is, never through the new name.

Only SOURCE itself (named by the user) is opened by its path, following a symlink there.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from typing import Final

__all__ = ["Dir", "listing", "open_dir_under", "walk"]

#: Opening a directory below SOURCE: never through a symbolic link.
DIR_NOFOLLOW: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class Dir:
    """An open directory; its descriptor closes when the last file read in it is done.

    A reader thread may still open files in a directory after the walk has moved on: every
    task holds a reference, and the descriptor is closed when the object goes away.
    """

    __slots__ = ("dev", "fd", "ino")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        st = os.fstat(fd)
        self.dev, self.ino = st.st_dev, st.st_ino

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


def listing(d: Dir, skip: tuple[set[str], list[str]] | None) -> list[str]:
    """Entries of ``d`` as ``name + "\\0" + kind``, sorted by name; ``skip``: names and name
    prefixes left out (OUT and its side files).

    One string per entry, not a DirEntry: a flat directory of a million files would
    otherwise cost hundreds of MB. NUL cannot occur in a name and sorts first, so the
    strings sort exactly as the names do.
    """
    out: list[str] = []
    with os.scandir(d.fd) as it:
        for e in it:
            # without following: a symlink is neither a file nor a directory here
            if e.is_file(follow_symlinks=False):
                out.append(e.name + "\0f")
            elif e.is_dir(follow_symlinks=False):
                out.append(e.name + "\0d")
            else:
                out.append(e.name + ("\0l" if e.is_symlink() else "\0o"))
    if skip is not None:
        names, prefixes = skip
        out = [s for s in out if s[:-2] not in names and not any(s.startswith(p) for p in prefixes)]
    out.sort()
    return out


def _why(e: OSError) -> str:
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        return "replaced by a symbolic link or a file during the walk, not followed"
    return "unreadable directory: " + (e.strerror or str(e))


def walk(
    top: str, skips: dict[tuple[int, int], tuple[set[str], list[str]]]
) -> Iterator[tuple[str, Dir | None, str]]:
    """(path relative to top, directory, kind) of everything under ``top``, depth first, sorted.

    kind: ``f`` regular file, ``l`` symlink, ``o`` other, ``!reason`` a directory that cannot
    be walked (its directory is None then). ``skips`` maps a directory's (st_dev, st_ino) to
    the names and prefixes its listing leaves out. Raises OSError when ``top`` cannot be
    opened.
    """
    root = Dir(os.open(top, _DIR))
    stack = [(root, "", iter(listing(root, skips.get((root.dev, root.ino)))))]
    while stack:
        d, drel, it = stack[-1]
        for s in it:
            name, kind = s[:-2], s[-1]
            rel = drel + name
            if kind != "d":
                yield rel, d, kind
                continue
            try:
                sub = Dir(os.open(name, DIR_NOFOLLOW, dir_fd=d.fd))
                entries = listing(sub, skips.get((sub.dev, sub.ino)))
            except OSError as e:
                yield rel, None, "!" + _why(e)
                continue
            stack.append((sub, rel + "/", iter(entries)))
            break
        else:
            stack.pop()


def open_dir_under(top: str, rel: str) -> tuple[int, str]:
    """(descriptor of the directory holding ``top/rel``, the file's name), reached from
    ``top`` one component at a time without following any symlink. The caller closes the
    descriptor. Raises OSError (``ELOOP``/``ENOTDIR`` when a component is no longer a real
    directory)."""
    parts = rel.split("/")
    fd = os.open(top, _DIR)
    try:
        for p in parts[:-1]:
            nfd = os.open(p, DIR_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]
