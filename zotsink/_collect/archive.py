"""``collect --archive`` and ``--remove-sources``: keep a verified copy, then tidy up.

Only files collected in this run are candidates (never skipped, unreadable or unparsable
ones, never archive members). Their path, size, mtime and a digest of the bytes that were
parsed are kept in a spool during the read. The archive is written to a temporary name
beside its final one, fsynced, read back member by member (names and digests must match),
and only then renamed into place. A file is removed only when it is in that verified
archive (or, with ``--yes`` and no archive, when all its records are in OUT) and has not
changed since it was read.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import struct
from collections.abc import Iterator
from hashlib import blake2b
from typing import Final, NamedTuple

from .._core.fileio import fsync_dir
from ..errors import WriteError
from .spool import Spool
from .tar import archive_errors, members

__all__ = ["Candidates", "archive_mode", "make_archive", "remove_sources"]

_HEAD: Final = struct.Struct("<QqQ16sII")  # file no, mtime_ns, size, digest, path and name lengths


def archive_mode(path: str) -> str | None:
    """The tarfile write mode for an archive name, or None for a name that is no tar."""
    low = path.lower()
    for end, mode in ((".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar.bz2", "w:bz2"),
                      (".tar.xz", "w:xz"), (".tar", "w")):  # fmt: skip
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


class Candidates:
    """The files collected in this run, spooled (a million paths would not fit in memory)."""

    def __init__(self, directory: str | None) -> None:
        self.spool = Spool(directory)
        self.count = 0

    def add(self, file_no: int, path: str, name: str, data: bytes, mtime_ns: int) -> None:
        p = os.fsencode(path)
        n = name.encode("utf-8", "surrogateescape")
        d = blake2b(data, digest_size=16).digest()
        self.spool.write(_HEAD.pack(file_no, mtime_ns, len(data), d, len(p), len(n)) + p + n)
        self.count += 1

    def __iter__(self) -> Iterator[Candidate]:
        rest = b""
        for chunk in self.spool.chunks():
            buf = rest + chunk
            pos = 0
            while pos + _HEAD.size <= len(buf):
                no, mtime, size, dig, lp, ln = _HEAD.unpack_from(buf, pos)
                end = pos + _HEAD.size + lp + ln
                if end > len(buf):
                    break
                p = buf[pos + _HEAD.size : pos + _HEAD.size + lp]
                n = buf[pos + _HEAD.size + lp : end]
                yield Candidate(no, mtime, size, dig, os.fsdecode(p),
                                n.decode("utf-8", "surrogateescape"))  # fmt: skip
                pos = end
            rest = buf[pos:]

    def close(self) -> None:
        self.spool.close()


def _unchanged(c: Candidate) -> str | None:
    """Why the file cannot be archived or removed now (None: still as it was read)."""
    try:
        st = os.lstat(c.path)
    except OSError as e:
        return f"gone since it was read ({e.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "no longer a regular file"
    if st.st_size != c.size or st.st_mtime_ns != c.mtime_ns:
        return "changed since it was read"
    return None


def _member(name: str) -> str:
    # an absolute source name would make an archive that unpacks outside its directory
    return name.lstrip("/") or "_"


def make_archive(cands: Candidates, archive: str, kept: list[tuple[str, str]]) -> bytearray:
    """Write, fsync, verify and rename the archive; which candidates it holds (by index)."""
    import tarfile

    mode = archive_mode(archive)
    assert mode is not None
    tmp = f"{archive}.tmp.{os.getpid()}"
    inside = bytearray(cands.count)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise WriteError(f"cannot create {tmp}: {e.strerror}", path=archive) from e
    try:
        with os.fdopen(fd, "wb") as f:
            with tarfile.open(fileobj=f, mode=mode) as tar:  # type: ignore[call-overload]
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
            f.flush()
            os.fsync(f.fileno())
        _verify(cands, inside, tmp)
        os.rename(tmp, archive)
        fsync_dir(os.path.dirname(os.path.abspath(archive)))
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return inside


def _read_same(c: Candidate) -> bytes | str:
    """The file's bytes if they are still those that were collected, else why not."""
    why = _unchanged(c)
    if why:
        return why
    from .read import read_file

    try:
        data, _ = read_file(c.path, False, False)
    except OSError as e:
        return f"unreadable now ({e.strerror})"
    if len(data) != c.size or blake2b(data, digest_size=16).digest() != c.digest:
        return "changed since it was read"
    return data


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


def remove_sources(
    cands: Candidates,
    inside: bytearray | None,
    losers: set[int],
    kept: list[tuple[str, str]],
) -> int:
    """Remove the collected files that are safe to remove; how many were removed."""
    removed = 0
    for i, c in enumerate(cands):
        if inside is not None:
            if not inside[i]:
                continue  # already listed in kept by make_archive
        elif c.file_no in losers:
            kept.append((c.name, "kept: a record lost a key conflict and is not in OUT"))
            continue
        why = _unchanged(c)
        if why:
            kept.append((c.name, f"kept: {why}"))
            continue
        try:
            os.remove(c.path)
        except OSError as e:
            kept.append((c.name, f"kept: cannot remove ({e.strerror})"))
            continue
        removed += 1
    return removed
