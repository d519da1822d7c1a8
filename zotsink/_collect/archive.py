"""``collect --archive`` and ``--remove-sources``: keep a verified copy, then tidy up.

Only files collected in this run are candidates (never skipped, unreadable or unparsable
ones, never archive members). Their path, size, mtime and a digest of the bytes that were
parsed are kept in a spool during the read. The archive is written to a temporary name
beside its final one, fsynced, read back member by member (names and digests must match),
and only then renamed into place.

A file is removed only when it is in that verified archive (or, with ``--yes`` and no
archive, when all its records are in OUT), is not empty, was last modified at least
``--min-age`` seconds before collect started, and still holds exactly the bytes that were
collected (read again and compared by digest just before the unlink). The empty and young
files are the ones a running task may still write to: `./analyse > results/t4.txt` creates
the file when the task starts and writes its record when it ends; a record written into a
removed file is lost. A file found by walking a SOURCE directory is reached again the way
the walk reached it, through directory descriptors opened without following symlinks
(:func:`zotsink._collect.walk.open_dir_under`), and removed with ``unlink(name, dir_fd=)``.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import struct
from collections.abc import Iterator
from typing import Final, NamedTuple

from .._core.digest import blake2b
from .._core.wholefile import whole_file
from ..errors import WriteError
from .spool import Spool
from .tar import archive_errors, members
from .walk import open_dir_under

__all__ = ["MIN_AGE", "Candidates", "archive_mode", "make_archive", "remove_sources"]

#: file no, mtime_ns, size, digest, path and name lengths, length of the walked SOURCE root
_HEAD: Final = struct.Struct("<QqQ16sIII")
#: Default of ``--min-age`` (seconds) when ``--remove-sources`` is given.
MIN_AGE: Final = 3600.0
_OPEN: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: Archive endings and their tarfile write modes; ``.tar`` last, as ``.tar.gz`` ends in none.
_TAR_MODES: Final = (
    (".tar.gz", "w:gz"),
    (".tgz", "w:gz"),
    (".tar.bz2", "w:bz2"),
    (".tar.xz", "w:xz"),
    (".tar", "w"),
)


def archive_mode(path: str) -> str | None:
    """The tarfile write mode for an archive name, or None for a name that is no tar."""
    low = path.lower()
    for end, mode in _TAR_MODES:
        if low.endswith(end):
            return mode
    return None


class Candidate(NamedTuple):
    file_no: int
    mtime_ns: int
    size: int
    digest: bytes
    path: str
    name: str
    root: int  # length of the walked SOURCE directory at the start of path (0: none)


class Candidates:
    """The files collected in this run, spooled (a million paths would not fit in memory)."""

    def __init__(self, directory: str | None) -> None:
        self.spool = Spool(directory)
        self.count = 0
        self._left_out: set[int] = set()

    def add(
        self, file_no: int, path: str, name: str, data: bytes, mtime_ns: int, root: str = ""
    ) -> None:
        """One collected file; ``root``: the SOURCE directory (with its ``/``) it was found
        in by a walk, the start of ``path``."""
        p = os.fsencode(path)
        n = name.encode("utf-8", "surrogateescape")
        d = blake2b(data, digest_size=16).digest()
        cut = len(os.fsencode(root)) if root and path.startswith(root) else 0
        head = _HEAD.pack(file_no, mtime_ns, len(data), d, len(p), len(n), cut)
        self.spool.write(head + p + n)
        self.count += 1

    def leave_out(self, file_nos: set[int]) -> None:
        """These files were not collected after all (``--input auto`` skipped their layout):
        they are never archived nor removed."""
        self._left_out = file_nos
        self.count = sum(1 for _ in self)

    def __iter__(self) -> Iterator[Candidate]:
        left_out = self._left_out
        rest = b""
        for chunk in self.spool.chunks():
            buf = rest + chunk
            pos = 0
            while pos + _HEAD.size <= len(buf):
                no, mtime, size, dig, lp, ln, cut = _HEAD.unpack_from(buf, pos)
                end = pos + _HEAD.size + lp + ln
                if end > len(buf):
                    break
                p = buf[pos + _HEAD.size : pos + _HEAD.size + lp]
                n = buf[pos + _HEAD.size + lp : end]
                pos = end
                if no in left_out:
                    continue
                name = n.decode("utf-8", "surrogateescape")
                yield Candidate(no, mtime, size, dig, os.fsdecode(p), name, cut)
            rest = buf[pos:]

    def close(self) -> None:
        self.spool.close()


def _parent(c: Candidate) -> tuple[int, str]:
    """(descriptor of the directory holding the file, its name), reached as it was read."""
    if c.root:
        raw = os.fsencode(c.path)
        top = os.fsdecode(raw[: c.root]).rstrip("/") or "/"
        return open_dir_under(top, os.fsdecode(raw[c.root :]))
    # a file the user named (a SOURCE, a line of a path list): its directory as named
    d, name = os.path.split(c.path)
    return os.open(d or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), name


def _same(c: Candidate) -> tuple[int, str, bytes, os.stat_result] | str:
    """(directory descriptor, name, bytes, stat) of the file when it still holds exactly
    the bytes that were collected, else why not. The caller closes the descriptor."""
    try:
        dfd, name = _parent(c)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            return "a directory on its path was replaced since it was read"
        return f"gone since it was read ({e.strerror})"
    try:
        fd = os.open(name, _OPEN, dir_fd=dfd)
    except OSError as e:
        os.close(dfd)
        if e.errno == errno.ELOOP:
            return "no longer a regular file"
        return f"gone since it was read ({e.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            why = "no longer a regular file"
        elif st.st_size != c.size or st.st_mtime_ns != c.mtime_ns:
            why = "changed since it was read"
        else:
            data = _read_n(fd, c.size + 1)
            same = len(data) == c.size and blake2b(data, digest_size=16).digest() == c.digest
            why = None if same else "changed since it was read"
    except OSError as e:
        why = f"unreadable now ({e.strerror})"
    finally:
        os.close(fd)
    if why is not None:
        os.close(dfd)
        return why
    return dfd, name, data, st


def _read_n(fd: int, n: int) -> bytes:
    parts = []
    while n > 0:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            break
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def _member(name: str) -> str:
    # an absolute source name would make an archive that unpacks outside its directory
    return name.lstrip("/") or "_"


def make_archive(cands: Candidates, archive: str, kept: list[tuple[str, str]]) -> bytearray:
    """Write, fsync, verify and rename the archive; which candidates it holds (by index)."""
    import tarfile

    mode = archive_mode(archive)
    assert mode is not None
    inside = bytearray(cands.count)
    with whole_file(archive, mode=0o644) as w:
        with tarfile.open(fileobj=w.file, mode=mode) as tar:  # type: ignore[call-overload]
            for i, c in enumerate(cands):
                data = _read_same(c)
                if isinstance(data, str):
                    kept.append((c.name, f"not archived: {data}"))
                    continue
                ti = tarfile.TarInfo(_member(c.name))
                ti.size = len(data)
                ti.mtime = c.mtime_ns // 1_000_000_000
                ti.mode = 0o644
                tar.addfile(ti, io.BytesIO(data))
                tar.members.clear()  # the writer remembers every member otherwise
                inside[i] = 1
        w.file.flush()
        _verify(cands, inside, w.temp)  # read back before it takes the archive's name
    return inside


def _read_same(c: Candidate) -> bytes | str:
    """The file's bytes if they are still those that were collected, else why not."""
    got = _same(c)
    if isinstance(got, str):
        return got
    os.close(got[0])
    return got[2]


def _verify(cands: Candidates, inside: bytearray, path: str) -> None:
    """Read the archive back: every member, in order, with the name and bytes collected."""
    expect = (c for i, c in enumerate(cands) if inside[i])
    try:
        for m, data in members(path):
            c = next(expect, None)
            if c is None or m.name != _member(c.name) or data is None:
                raise WriteError(
                    f"{path} does not read back: unexpected member {m.name!r}", path=path
                )
            if blake2b(data, digest_size=16).digest() != c.digest:
                raise WriteError(f"{path} does not read back: {m.name!r} differs", path=path)
    except archive_errors() as e:
        if isinstance(e, WriteError):
            raise
        raise WriteError(f"{path} does not read back: {e}", path=path) from e
    left = next(expect, None)
    if left is not None:
        raise WriteError(f"{path} does not read back: {left.name!r} is missing", path=path)


def _young(c: Candidate, since_ns: int, min_age: float) -> str | None:
    age = since_ns - c.mtime_ns
    if age >= min_age * 1e9:
        return None
    return (
        f"modified {max(age, 0) // 1_000_000_000} s ago, within --min-age {min_age:g} s: its "
        "task may still be writing it"
    )


def remove_sources(
    cands: Candidates,
    inside: bytearray | None,
    losers: set[int],
    kept: list[tuple[str, str]],
    min_age: float,
    since_ns: int,
) -> int:
    """Remove the collected files that are safe to remove; how many were removed.

    ``since_ns``: when collect started (``time.time_ns()``), the clock ``min_age`` counts
    back from.
    """
    removed = 0
    for i, c in enumerate(cands):
        if inside is not None:
            if not inside[i]:
                continue  # already listed in kept by make_archive
        elif c.file_no in losers:
            kept.append((c.name, "kept: a record lost a key conflict and is not in OUT"))
            continue
        if c.size == 0:
            kept.append((c.name, "kept: empty: its task may not have written it yet"))
            continue
        why = _young(c, since_ns, min_age)
        if why:
            kept.append((c.name, f"kept: {why}"))
            continue
        got = _same(c)
        if isinstance(got, str):
            kept.append((c.name, f"kept: {got}"))
            continue
        dfd, name, _data, st = got
        try:
            now = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                kept.append((c.name, "kept: changed since it was read"))
                continue
            os.unlink(name, dir_fd=dfd)
        except OSError as e:
            kept.append((c.name, f"kept: cannot remove ({e.strerror})"))
            continue
        finally:
            os.close(dfd)
        removed += 1
    return removed
