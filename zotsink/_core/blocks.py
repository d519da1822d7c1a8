"""Blocks of whole lines turned into the bytes to append, as they are read.

The stream (``producer | zotsink OUT``) and ``zotsink run`` (each task's stdout) read lines
in blocks: :class:`BlockEncoder` turns a block into the bytes to append and sets refused
lines aside, and a line over the limit is kept aside in a temporary file until it ends
(:class:`LongLine`), never held whole in memory.

A block that may not fit in memory (a run attempt's :class:`Held` output, a long line's
record for OUT.rejects) is a :class:`Chunked` block: the outlet appends it in pieces under
one lock hold, or saves it in pieces, without knowing where the pieces come from.

Checking lines one at a time in Python costs several times what ``cat`` spends on the same
bytes, so each block is first checked whole with C-speed scans: a NUL byte is one ``find``
(``memchr``); the field count of tsv and unquoted csv lines is one ``translate`` that keeps
only separators and newlines, which must then read ``sep * (k-1) + "\\n"`` once per line.
Only a block that fails a scan is looked at line by line, with the one valid-line check
(:meth:`Encoder.check_raw`), to say which lines are refused and why. Both paths give the
same bytes and the same refusals.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from typing import IO, Final, Protocol

from ..errors import RecordError, UsageError
from .kv import parse_kv
from .pump import pad_heap
from .records import MAX_LINE, Encoder, count_newlines, uniform_fields
from .stamp import utc_now

__all__ = [
    "HOLD_IN_MEMORY",
    "UNCOUNTED",
    "BlockEncoder",
    "Chunked",
    "Held",
    "LongLine",
    "lines_of",
]

#: The count BlockEncoder.encode gives for lines that pass through without being counted.
UNCOUNTED: Final = -1


#: Input bytes after which a stream that allocates per batch asks for a padded heap: about
#: where the page faults it saves have paid for ``import ctypes`` (see BENCHMARKS.md).
PAD_AFTER: Final = 4 << 20


class Chunked(Protocol):
    """A block of whole lines read in pieces: what the outlet appends or saves without
    ever holding it whole, unless it is small."""

    size: int  # bytes in all

    def in_memory(self) -> bytes | None:
        """The whole block, when it is small enough to be in memory; else None."""
        ...

    def chunks(self) -> Iterator[bytes]:
        """The block in pieces, from its start (each call reads it again)."""
        ...


def lines_of(data: bytes | memoryview, n: int) -> int:
    """``n``, or the lines of ``data`` when they were not counted (:data:`UNCOUNTED`): for
    lines that went elsewhere than OUT, which the user is told in records."""
    return count_newlines(data) if n == UNCOUNTED else n


class BlockEncoder:
    """Encodes blocks of lines for one OUT; refused lines wait in :attr:`rejects`."""

    def __init__(self, enc: Encoder, kv: str | None, count: bool = False) -> None:
        self.enc = enc
        self.kv = kv
        # What Encoder.check_raw looks at beyond NUL and length: every csv line must parse
        # as one record, and with a header tsv and csv lines must have its field count.
        self.check = enc.fmt == "csv" or (enc.columns is not None and enc.fmt == "tsv")
        self.stamp_time = "time" in enc.stamp
        # Lines are counted where the check, the stamp or the parse counts them anyway, or
        # when the caller asks. Lines that pass through unchanged are not: counting newlines
        # (bytes.count, a plain C loop) costs as much CPU as cat spends copying them, and
        # would halve the stream's speed. Refused lines are then named by the input byte
        # where they start, which the engine knows for free.
        self.numbered = self.check or bool(enc.stamp) or kv is not None or count
        self.line_no = 0  # lines seen so far, when numbered
        self.offset = 0  # input bytes before the next block
        self.rejects: list[tuple[str, bytes]] = []
        self.padded = False  # pad_heap() was called: after PAD_AFTER bytes of numbered lines

    def place(self, start: int) -> str:
        """The name of a refused line that starts at input offset ``start`` (0-based):
        ``line N`` when lines are numbered, else ``byte N`` (1-based, as ``cmp`` and
        ``tail -c +N`` count)."""
        return f"line {self.line_no}" if self.numbered else f"byte {start + 1}"

    def take_line(self) -> str:
        """Name the next input line, which the caller handles itself (a line over the limit,
        a part line at a stop); it moves :attr:`offset` past the line with :meth:`skip`."""
        self.line_no += 1
        return self.place(self.offset)

    def skip(self, size: int) -> None:
        self.offset += size

    def encode(
        self, block: bytes | memoryview, buf: bytearray | None = None, at: int = 0
    ) -> tuple[bytes | memoryview, int]:
        """A block of whole lines as the bytes to append, and their count (:data:`UNCOUNTED`
        when lines are not numbered); refused lines are set aside in self.rejects.
        ``buf``/``at``: where the block lies in the read buffer, so that searching it
        copies nothing."""
        if self.offset >= PAD_AFTER and self.numbered and not self.padded:
            self.padded = True  # counting, checking and stamping allocate a block a batch
            pad_heap()
        src = buf if buf is not None else block
        end = at + len(block)
        start = self.offset
        self.offset += len(block)
        # The read buffer never holds a whole line over the limit (see LineReader.fill).
        if (
            self.kv is None
            and src.find(b"\0", at, end) < 0
            and (buf is not None or len(block) <= MAX_LINE + 1)
        ):
            # No line can be refused for a NUL byte or its length: only the field count
            # is left to check, a whole block at a time.
            if not self.enc.stamp:
                if not self.numbered:
                    return block, UNCOUNTED
                n = self._fast_count(src, at, end)
                if n >= 0:
                    self.line_no += n
                    return block, n
            elif not self.check or self._fast_count(src, at, end) >= 0:
                prefix = self.enc.stamp_prefix(utc_now() if self.stamp_time else None)
                # One C-speed replace stamps every line (the same bytes as line by line).
                # The block is copied once with a newline in front, so the prefix lands
                # before every line; a view leaves out the leading newline and the prefix
                # after the last line (no copy). The growth gives the line count.
                stamped = (b"\n" + block).replace(b"\n", b"\n" + prefix)
                n = (len(stamped) - len(block) - 1) // len(prefix) - 1
                self.line_no += n
                return memoryview(stamped)[1 : len(stamped) - len(prefix)], n
        return self._encode_lines(bytes(block), start)

    def _fast_count(self, src: bytes | bytearray | memoryview, at: int, end: int) -> int:
        """The block's line count when every line has the header's field count (or no
        check applies); -1 when some line may not: then each line is checked."""
        if not self.check:
            return count_newlines(src, at, end)
        cols = self.enc.columns
        if self.enc.fmt == "csv":
            if src.find(b'"', at, end) >= 0 or src.find(b"\r", at, end) >= 0:
                return -1  # quoting or a CR: only the csv module can say
            if cols is None:
                return count_newlines(src, at, end)  # no quote: each line is one record
            if src.find(b"\n\n", at, end) >= 0 or src[at : at + 1] == b"\n":
                return -1  # an empty line has no field at all
            sep = b","
        else:
            sep = b"\t"
        assert cols is not None
        return uniform_fields(src, sep, len(cols), at, end)  # records' one field-count rule

    def _encode_lines(self, block: bytes, start: int) -> tuple[bytes, int]:
        """Line by line: the slow path, for blocks holding a line that may be refused."""
        now = utc_now() if self.stamp_time else None
        enc = self.enc
        prefix = enc.stamp_prefix(now) if enc.stamp and self.kv is None else b""
        out: list[bytes] = []
        at = start - 1  # before the newline that ends the line before the block
        for line in block.split(b"\n")[:-1]:
            self.line_no += 1
            start, at = at + 1, at + 1 + len(line)
            if self.kv is not None:
                try:
                    if b"\0" in line:
                        raise RecordError("NUL byte")
                    text = line.decode("utf-8", "surrogateescape").rstrip("\r")
                    if not text.strip():
                        continue  # a blank line is no record in key:value input
                    rec = parse_kv(text, self.kv)
                    clash = [k for k in rec if k in enc.stamp]
                    if clash:
                        raise RecordError(
                            f"key {clash[0]!r} is also a --stamp field: rename the key "
                            f"or leave {clash[0]!r} out of --stamp"
                        )
                    out.append(enc.encode(rec, now))  # the first one may name the columns
                except (RecordError, UsageError) as e:
                    self.rejects.append((f"{self.place(start)}: {e.message}", line))
                continue
            why = enc.check_raw(line)
            if why:
                self.rejects.append((f"{self.place(start)}: {why}", line))
                continue
            out.append(prefix + line + b"\n")
        return b"".join(out), len(out)


class LongLine:
    """A line over the limit, kept in a temporary file until its end, then refused whole."""

    def __init__(self, out: str, where: str) -> None:
        import tempfile

        self.out = out
        self.where = where  # the line's name in OUT.rejects: "line N" or "byte N"
        self.size = 0  # bytes so far, newline not included
        try:  # beside OUT: node-local /tmp may be far smaller than a line can be
            # Closed by close(), which every path that creates one reaches.
            self.tmp: IO[bytes] = tempfile.TemporaryFile(dir=os.path.dirname(out) or ".")  # noqa: SIM115
        except OSError:
            self.tmp = tempfile.TemporaryFile()  # noqa: SIM115

    def add(self, piece: bytes | memoryview) -> None:
        self.tmp.write(piece)
        self.size += len(piece)

    def refused(self, reason: str) -> Chunked:
        """The line as one record of OUT.rejects, ``reason<TAB>line``: a :class:`Chunked`
        block read back from the temporary file, not from the producer, so that the lock is
        held only as long as a local copy takes. :meth:`close` once it is appended or saved.
        """
        return _Refused(reason.encode() + b"\t", self.tmp, self.size)

    def close(self) -> None:
        self.tmp.close()


class _Refused:
    """A line over the limit with its reason in front: :meth:`LongLine.refused`."""

    def __init__(self, head: bytes, tmp: IO[bytes], size: int) -> None:
        self._head = head
        self._tmp = tmp
        self.size = len(head) + size + 1

    def in_memory(self) -> bytes | None:
        return None  # over the line limit: never one bytes object

    def chunks(self) -> Iterator[bytes]:
        tmp = self._tmp
        tmp.flush()
        tmp.seek(0)
        yield self._head
        while True:
            piece = tmp.read(1 << 20)
            if not piece:
                break
            yield piece
        yield b"\n"


#: What one task's held output keeps in memory before it moves to a temporary file.
HOLD_IN_MEMORY: Final = 4 << 20


class Held:
    """One task's encoded lines, held until the task ends, then appended in one piece.

    In memory up to :data:`HOLD_IN_MEMORY` bytes, then in a private temporary file on
    node-local disk (``$TMPDIR``): a task may print more than memory holds, and the records
    of an attempt must reach OUT together or not at all (see ``zotsink run``).
    """

    def __init__(self, limit: int = HOLD_IN_MEMORY) -> None:
        self._parts: list[bytes] = []
        self._file: IO[bytes] | None = None
        self._limit = limit
        self.size = 0  # bytes held
        self.count = 0  # records held
        self.crc = 0  # CRC-32 of the bytes held: what a reader checks the piece in OUT by

    def add(self, data: bytes | memoryview, count: int) -> None:
        self.crc = zlib.crc32(data, self.crc)
        if self._file is None and self.size + len(data) > self._limit:
            import tempfile

            # Closed by close(), which the owner calls once the block is appended or saved.
            self._file = tempfile.TemporaryFile()  # noqa: SIM115
            for part in self._parts:
                self._file.write(part)
            self._parts = []
        if self._file is not None:
            self._file.write(data)
        else:
            self._parts.append(bytes(data))
        self.size += len(data)
        self.count += count

    def in_memory(self) -> bytes | None:
        """The whole block, when it is small enough to be in memory; else None."""
        if self._file is not None:
            return None
        return self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)

    def chunks(self) -> Iterator[bytes]:
        """The block in pieces, from its start (each call reads it again)."""
        if self._file is None:
            yield from self._parts
            return
        self._file.flush()
        self._file.seek(0)
        while True:
            piece = self._file.read(1 << 20)
            if not piece:
                return
            yield piece

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._parts = []
