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

from ..errors import HoldError, RecordError, UsageError
from .kv import kv_shaped, parse_kv
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
    "Overflow",
    "lines_of",
    "overflow_dirs",
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
        # OUT's header as a raw input line shows it (the data columns, or OUT's first line
        # when the encoder writes none): a line equal to it is that header again, printed by
        # a producer that writes its own (pandas' to_csv), and is dropped, counted.
        raw = kv is None and enc.fmt != "lines"
        self.header = (enc.data_header_line() or enc.out_header) if raw else None
        self.repeats = 0  # repeated header lines dropped
        # Into an empty OUT that gets no header of its own, the first line becomes the
        # header: it is looked at once (key:value records are no header), then kept.
        self.first = raw and enc.columns is None and enc.out_new
        self._keep_start = False  # the next block starts with that first line: it stays
        # That first line, kept: another writer's (another task's) may land first in OUT,
        # and then this one is the header again, for its owner to drop (Held.drop_first).
        self.kept_header: bytes | None = None
        self.refusal: str | None = None  # why every line is refused: the first looked wrong

    def place(self, start: int) -> str:
        """The name of a refused line that starts at input offset ``start`` (0-based):
        ``line N`` when lines are numbered, else ``byte N`` (1-based, as ``cmp`` and
        ``tail -c +N`` count)."""
        return f"line {self.line_no}" if self.numbered else f"byte {start + 1}"

    def counted(self) -> None:
        """One record encoded elsewhere (a function's mapping) counts as a line here."""
        self.line_no += 1

    def refused(self, why: str, line: bytes) -> None:
        """A record encoded elsewhere that was refused: it waits in :attr:`rejects`."""
        self.rejects.append((why, line))

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
        if self.first and end > at:
            self._first_line(src, at, end)
        keep, self._keep_start = self._keep_start, False
        self.offset += len(block)
        if self.refusal is not None:
            return self._refuse_all(bytes(block), start)
        if self.header is not None and self._repeats_header(src, at, end, keep):
            return self._encode_lines(bytes(block), start, keep)  # drops them, line by line
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
        return self._encode_lines(bytes(block), start, keep)

    def _first_line(self, src: bytes | bytearray | memoryview, at: int, end: int) -> None:
        """The first line into an empty OUT that gets no header of its own: it becomes the
        header, unless it looks like key:value records (``--kv`` forgotten), when every
        line is refused instead (see :func:`kv_shaped`)."""
        self.first = False
        if isinstance(src, memoryview):
            src, at, end = bytes(src[at:end]), 0, end - at
        nl = src.find(b"\n", at, end)
        line = bytes(src[at : nl if nl >= 0 else end])
        if kv_shaped(line, self.enc.fmt):
            self.refusal = "looks like key:value records: pass --kv (or --columns NAMES)"
        elif line.strip():
            self.header = self.kept_header = line + b"\n"
            self._keep_start = True

    def _repeats_header(
        self, src: bytes | bytearray | memoryview, at: int, end: int, keep: bool
    ) -> bool:
        """Whether the block holds the header line again: two C-speed searches."""
        h = self.header
        assert h is not None
        if isinstance(src, memoryview):
            src = bytes(src[at:end])
            at, end = 0, len(src)
        if not keep and src.startswith(h, at, end):
            return True
        return src.find(b"\n" + h, at, end) >= 0

    def _refuse_all(self, block: bytes, start: int) -> tuple[bytes, int]:
        """Every line to the rejects, with the reason the first one gave."""
        at = start
        for line in block.split(b"\n")[:-1]:
            self.line_no += 1
            self.rejects.append((f"{self.place(at)}: {self.refusal}", line))
            at += len(line) + 1
        return b"", 0

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

    def _encode_lines(self, block: bytes, start: int, keep: bool = False) -> tuple[bytes, int]:
        """Line by line: the slow path, for blocks holding a line that may be refused or the
        header again (``keep``: the first line is the header of an empty OUT: it stays)."""
        now = utc_now() if self.stamp_time else None
        enc = self.enc
        prefix = enc.stamp_prefix(now) if enc.stamp and self.kv is None else b""
        out: list[bytes] = []
        at = start - 1  # before the newline that ends the line before the block
        header = None if self.header is None else self.header[:-1]
        for line in block.split(b"\n")[:-1]:
            self.line_no += 1
            start, at = at + 1, at + 1 + len(line)
            if line == header and not keep:
                self.repeats += 1  # kv input has no header line to repeat: header is None
                continue
            keep = False
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


def overflow_dirs(out: str | None, *, local_first: bool) -> list[str | None]:
    """Where a temporary file for bytes that overflow memory may go, in the order tried:
    ``$TMPDIR`` (None: :mod:`tempfile`'s choice, node-local and fast) and the directory of
    OUT (``out``; on the filesystem that is meant to hold these bytes anyway). The one rule
    for :class:`Overflow`: ``local_first`` is for output that usually fits (a task's held
    records), the other order for what may be far larger than node-local space (a line over
    the limit)."""
    if out is None:
        return [None]
    beside = os.path.dirname(os.path.abspath(out))
    return [None, beside] if local_first else [beside, None]


def _place(d: str | None) -> str:
    if d is None:
        import tempfile

        return f"$TMPDIR ({tempfile.gettempdir()})"
    return f"beside OUT ({d})"


class Overflow:
    """Bytes kept in a private unlinked temporary file: in the first of
    :func:`overflow_dirs` that takes them. When a write fails there (a full ``$TMPDIR``),
    what was written so far moves to the next place and the write goes on there; when no
    place takes them, :class:`~zotsink.errors.HoldError` says what was tried and why."""

    def __init__(self, out: str | None, *, local_first: bool, what: str) -> None:
        self._dirs = overflow_dirs(out, local_first=local_first)
        self._what = what  # the bytes, as the error names them
        self._tried: list[str] = []
        self.file: IO[bytes] | None = None
        self.size = 0  # bytes kept
        self._move(b"")

    def write(self, data: bytes | memoryview) -> None:
        assert self.file is not None
        try:
            _write_all(self.file, data)
        except OSError as e:
            self._tried.append(f"{_place(self._dirs[0])}: {e.strerror or e}")
            self._dirs.pop(0)
            self._move(data)
            return
        self.size += len(data)

    def _move(self, data: bytes | memoryview) -> None:
        """Open a file in the next place that takes what is kept so far and ``data``."""
        import tempfile

        old = self.file
        while self._dirs:
            d = self._dirs[0]
            try:
                # Closed by close(), which every owner reaches.
                new: IO[bytes] = tempfile.TemporaryFile(dir=d, buffering=0)  # noqa: SIM115
            except OSError as e:
                self._tried.append(f"{_place(d)}: {e.strerror or e}")
                self._dirs.pop(0)
                continue
            try:
                if old is not None:
                    for piece in _read_back(old, self.size):
                        _write_all(new, piece)
                _write_all(new, data)
            except OSError as e:
                new.close()
                self._tried.append(f"{_place(d)}: {e.strerror or e}")
                self._dirs.pop(0)
                continue
            if old is not None:
                old.close()
            self.file = new
            self.size += len(data)
            return
        if old is not None:
            old.close()
        self.file = None
        raise HoldError(
            f"{self._what} ({self.size + len(data)} bytes) could not be kept in a temporary "
            f"file: {'; '.join(self._tried)}. These lines are not in OUT: free space there "
            "(or point $TMPDIR at a larger filesystem)"
        )

    def chunks(self) -> Iterator[bytes]:
        """What is kept, in pieces, from its start."""
        if self.file is not None:
            yield from _read_back(self.file, self.size)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _write_all(f: IO[bytes], data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = f.write(view)  # unbuffered: a short write says where the disk filled
        view = view[n or 0 :]


def _read_back(f: IO[bytes], size: int) -> Iterator[bytes]:
    f.seek(0)
    left = size
    while left > 0:
        piece = f.read(min(left, 1 << 20))
        if not piece:
            return
        left -= len(piece)
        yield piece


class LongLine:
    """A line over the limit, kept in a temporary file until its end, then refused whole."""

    def __init__(self, out: str, where: str) -> None:
        self.out = out
        self.where = where  # the line's name in OUT.rejects: "line N" or "byte N"
        # Beside OUT first: node-local /tmp may be far smaller than a line can be.
        self.tmp = Overflow(out, local_first=False, what=f"a line over the limit ({where})")

    @property
    def size(self) -> int:
        """Bytes so far, newline not included."""
        return self.tmp.size

    def add(self, piece: bytes | memoryview) -> None:
        self.tmp.write(piece)

    def refused(self, reason: str) -> Chunked:
        """The line as one record of OUT.rejects, ``reason<TAB>line``: a :class:`Chunked`
        block read back from the temporary file, not from the producer, so that the lock is
        held only as long as a local copy takes. :meth:`close` once it is appended or saved.
        """
        return _Refused(reason.encode() + b"\t", self.tmp)

    def close(self) -> None:
        self.tmp.close()


class _Refused:
    """A line over the limit with its reason in front: :meth:`LongLine.refused`."""

    def __init__(self, head: bytes, tmp: Overflow) -> None:
        self._head = head
        self._tmp = tmp
        self.size = len(head) + tmp.size + 1

    def in_memory(self) -> bytes | None:
        return None  # over the line limit: never one bytes object

    def chunks(self) -> Iterator[bytes]:
        yield self._head
        yield from self._tmp.chunks()
        yield b"\n"


#: What one task's held output keeps in memory before it moves to a temporary file.
HOLD_IN_MEMORY: Final = 4 << 20


class Held:
    """One task's encoded lines, held until the task ends, then appended in one piece.

    In memory up to :data:`HOLD_IN_MEMORY` bytes, then in a private temporary file
    (:class:`Overflow`): on node-local disk (``$TMPDIR``), or beside OUT (``out``) when
    ``$TMPDIR`` is full. A task may print more than memory holds, and the records of an
    attempt must reach OUT together or not at all (see ``zotsink run``).

    :meth:`add` raises :class:`~zotsink.errors.HoldError` when neither place takes the
    output: the attempt's records are then lost (the error says so); the owner fails that
    attempt, closes this Held, and goes on with the others.
    """

    def __init__(self, limit: int = HOLD_IN_MEMORY, out: str | None = None) -> None:
        self._parts: list[bytes] = []
        self._file: Overflow | None = None
        self._limit = limit
        self._out = out
        self._skip = 0  # bytes left out at the start (drop_first)
        self.size = 0  # bytes held
        self.count = 0  # records held
        self.crc = 0  # CRC-32 of the bytes held: what a reader checks the piece in OUT by

    def add(self, data: bytes | memoryview, count: int) -> None:
        self.crc = zlib.crc32(data, self.crc)
        if self._file is None and self.size + len(data) > self._limit:
            parts, self._parts = self._parts, []
            try:
                self._file = Overflow(self._out, local_first=True, what="a task's output")
                for part in parts:
                    self._file.write(part)
            except HoldError:
                self.close()
                raise
        if self._file is not None:
            try:
                self._file.write(data)
            except HoldError:
                self.close()
                raise
        else:
            self._parts.append(bytes(data))
        self.size += len(data)
        self.count += count

    def drop_first(self, line: bytes) -> bool:
        """Leave out the first line when it is ``line`` (with its newline): a task's first
        line kept as the header of an empty OUT (:attr:`BlockEncoder.kept_header`) whose
        piece does not land first. Before the piece's place is taken."""
        if self._skip or not self.size or self._head(len(line)) != line:
            return False
        self._skip = len(line)
        self.size -= len(line)
        self.count -= 1
        crc = 0  # the piece's checksum is of what goes to OUT: read once more (a rare path)
        for piece in self.chunks():
            crc = zlib.crc32(piece, crc)
        self.crc = crc
        return True

    def _head(self, n: int) -> bytes:
        if self._file is None:
            return b"".join(self._parts)[:n] if self._parts else b""
        return next(self._file.chunks(), b"")[:n]  # a line is whole in the first piece

    def in_memory(self) -> bytes | None:
        """The whole block, when it is small enough to be in memory; else None."""
        if self._file is not None:
            return None
        data = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        return data[self._skip :] if self._skip else data

    def chunks(self) -> Iterator[bytes]:
        """The block in pieces, from its start (each call reads it again)."""
        skip = self._skip
        for piece in self._parts if self._file is None else self._file.chunks():
            if skip:
                piece, skip = piece[skip:], max(0, skip - len(piece))
            if piece:
                yield piece

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._parts = []
