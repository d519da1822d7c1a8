"""A temporary byte store for collect: in memory while small, an unlinked file when large.

Collect writes everything it reads into spools (the encoded rows, tar members waiting to be
sorted, the list of files to archive) and reads them back once. Up to ``mem_limit`` bytes
stay in memory, so a collect of a few tens of thousands of tiny files writes nothing to disk
but OUT; beyond that the bytes go to a temporary file that is unlinked at once
(``tempfile.TemporaryFile``), so nothing is left behind even after ``kill -9``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Final

__all__ = ["MEM_LIMIT", "Spool"]

#: Bytes a spool keeps in memory before it moves to a temporary file.
MEM_LIMIT: Final = 32 << 20
#: Writes to the temporary file are gathered to about this size.
_FLUSH: Final = 1 << 20


class Spool:
    """Append-only bytes with offsets; read back sequentially or at an offset."""

    def __init__(self, directory: str | None = None, mem_limit: int | None = None) -> None:
        self.directory = directory
        self.mem_limit = MEM_LIMIT if mem_limit is None else mem_limit
        self._mem = bytearray()  # all the bytes (in memory) or the unflushed tail (on disk)
        self._fd = -1
        self._flushed = 0  # bytes already in the file
        self.on_disk = False

    @property
    def size(self) -> int:
        return self._flushed + len(self._mem)

    def write(self, data: bytes) -> int:
        """Append ``data``; its offset."""
        mem = self._mem  # called once a row: one look-up of _mem, not three and a store
        off = self._flushed + len(mem)
        mem += data  # in place: self._mem grows too
        if len(mem) >= (_FLUSH if self.on_disk else self.mem_limit):
            self._flush()
        return off

    def _flush(self) -> None:
        if not self.on_disk:
            import tempfile  # only for large collects: keep the start-up light

            # unlinked at once: nothing is left behind, even after kill -9
            with tempfile.TemporaryFile(dir=self.directory, prefix="zotsink-collect-") as f:
                self._fd = os.dup(f.fileno())  # keep only the descriptor, not the file object
            self.on_disk = True
        view = memoryview(self._mem)
        while view:
            n = os.pwrite(self._fd, view, self._flushed)
            self._flushed += n
            view = view[n:]
        view.release()
        self._mem = bytearray()

    def pread(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``."""
        if offset >= self._flushed:
            start = offset - self._flushed
            return bytes(self._mem[start : start + length])
        if self._mem:
            self._flush()
        out = b""
        while len(out) < length:
            chunk = os.pread(self._fd, length - len(out), offset + len(out))
            if not chunk:
                raise OSError(f"temporary file ended at {offset + len(out)}, short of {length}")
            out += chunk
        return out

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """All the bytes from the start, in chunks of about ``size``."""
        if not self.on_disk:
            for i in range(0, len(self._mem), size):
                yield bytes(self._mem[i : i + size])
            return
        if self._mem:
            self._flush()
        pos = 0
        while pos < self._flushed:
            chunk = os.pread(self._fd, min(size, self._flushed - pos), pos)
            if not chunk:
                raise OSError(f"temporary file ended at {pos}, short of {self._flushed}")
            pos += len(chunk)
            yield chunk

    def close(self) -> None:
        self._mem = bytearray()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
