"""Reading tar archives for collect: in place, never extracted, and never cut short quietly.

``tarfile`` ends without a word when an archive stops at a header boundary (a copy cut
short, a download that broke off), and its streaming gzip reader never checks the
compressed stream's end. So the archive is decompressed here with :mod:`gzip`, :mod:`bz2`
or :mod:`lzma` (chosen by magic bytes), which raise on a truncated stream, and handed to
``tarfile`` in streaming mode; the block where ``tarfile`` stopped must be the
end-of-archive zero block, and the rest of the stream is read to its end. Member names are
only data: nothing is ever written from an archive.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import IO, Any, Final

from .read import MAX_FILE_SIZE, Item, too_big
from .spool import Spool

__all__ = ["archive_errors", "member_name", "members", "read_archive"]

_ZERO_BLOCK: Final = bytes(512)


def archive_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a damaged archive raises while it is read."""
    import tarfile
    import zlib

    errs: list[type[BaseException]] = [tarfile.TarError, EOFError, OSError, zlib.error]
    try:
        import lzma

        errs.append(lzma.LZMAError)
    except ImportError:  # a Python built without lzma cannot read .tar.xz either way
        pass
    return tuple(errs)


def member_name(name: str) -> str:
    """An archive member's name as the source column shows it (no leading ``./``)."""
    while name.startswith("./"):
        name = name[2:]
    return name


class _Tail:
    """The decompressed stream on its way to tarfile, with its last bytes kept.

    tarfile (streaming) reads it in 10 KiB chunks; keeping a few of them is enough to look at
    the block where tarfile stopped.
    """

    KEEP: Final = 4 * 10240

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.total = 0  # bytes handed out
        self.tail = b""  # the last of them

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.total += len(data)
        self.tail = (self.tail + data)[-self.KEEP :]
        return data

    def block_at(self, offset: int) -> bytes:
        """The 512 bytes at ``offset``, as far as they were read."""
        start = self.total - len(self.tail)
        return self.tail[offset - start : offset - start + 512] if offset >= start else b""


def _decompressed(raw: IO[bytes]) -> Any:
    magic = raw.read(6)
    raw.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb")
    if magic.startswith(b"BZh"):
        import bz2

        return bz2.BZ2File(raw)
    if magic.startswith(b"\xfd7zXZ\x00"):
        import lzma

        return lzma.LZMAFile(raw)
    return raw


def members(path: str, limit: int | None = None) -> Iterator[tuple[Any, bytes | None]]:
    """(TarInfo, bytes of a regular member else None) of each member, in archive order.

    A regular member over ``limit`` bytes comes with None too: it is not read into memory
    (tarfile's stream skips it block by block). Raises one of :func:`archive_errors` when
    the archive is damaged or cut short, also after its last member.
    """
    import tarfile

    with open(path, "rb") as raw:
        f = _decompressed(raw)
        tail = _Tail(f)
        # streaming mode: the archive is read once, front to back, in place
        with tarfile.open(fileobj=tail, mode="r|") as tf:  # type: ignore[call-overload]
            while True:
                m = tf.next()
                if m is None:
                    break
                tf.members.clear()  # tarfile remembers every member otherwise: memory
                data = None
                if m.isreg() and (limit is None or m.size <= limit):
                    x = tf.extractfile(m)
                    data = x.read() if x is not None else b""
                yield m, data
            end = tf.offset  # where tarfile looked for the next header and found none
        block = tail.block_at(end)
        # An archive `zotsink pack` is still appending to has no end-of-archive marker by
        # design (its members end exactly at the end of the file); its index beside it
        # says what it is. Anything else that stops at a header boundary was cut short.
        packed = block == b"" and f is raw and os.path.isfile(path + ".idx")
        if block != _ZERO_BLOCK and not packed:
            raise tarfile.ReadError("it ends before its end-of-archive marker: it was cut short")
        while f.read(1 << 20):
            pass  # to the end of the compressed stream, which checks its length and CRC


def read_archive(
    path: str,
    prefix: str,
    staging: str | None,
    wanted: Callable[[str], bool] | None,
    limit: int = MAX_FILE_SIZE,
) -> Iterator[Item]:
    """Items of the archive's members in sorted name order; links and devices skipped, and
    members over ``limit`` bytes skipped unread.

    Members arrive in archive order (``tar`` writes them in ``readdir`` order): they are
    staged in a :class:`~zotsink._collect.spool.Spool` (on disk past 32 MiB: memory stays
    flat) and handed on sorted once the whole archive has read cleanly, so an archive is
    collected whole or not at all.
    """
    spool = Spool(staging)
    index: list[tuple[str, int, int, int, str | None]] = []  # key, offset, size, mtime, why
    try:
        try:
            for m, data in members(path, limit):
                name = member_name(m.name)
                if m.isdir() or name in ("", "."):
                    continue
                key = name.replace("/", "\0")  # sorts like a comparison component by component
                mtime = int(m.mtime * 1_000_000_000)
                if data is not None:
                    index.append((key, spool.write(data), len(data), mtime, None))
                elif m.isreg():
                    index.append((key, -2, 0, mtime, too_big(m.size, limit)))
                else:
                    kind = "symbolic link" if m.issym() else "hard link" if m.islnk() else ""
                    why = f"{kind or 'device or fifo'} in an archive, not followed"
                    index.append((key, -1, 0, mtime, why))
        except archive_errors() as e:
            name = prefix.rstrip("/") or path
            why = f"unreadable archive: {e}"
            yield Item(name, os.path.basename(path), None, why, True, None, 0, 0)
            return
        index.sort()
        for key, off, size, mtime, why in index:
            name = prefix + key.replace("\0", "/")
            base = name.rsplit("/", 1)[-1]
            if why is not None:
                # a member too big is data not collected (--strict refuses it); a link is not
                yield Item(name, base, None, why, off == -2, None, mtime, 0)
            elif wanted is not None and not wanted(name):
                yield Item(name, base, None, None, False, None, mtime, 0)
            else:
                yield Item(name, base, spool.pread(off, size), None, False, None, mtime, size)
    finally:
        spool.close()
