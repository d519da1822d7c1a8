"""What a run's attempts write: their records held until they end, then OUT, the log.

:class:`Output` is what every attempt of a run writes to: OUT (through the run's one
template of columns: the first ``key:value`` line of any task names the columns for all),
OUT's rejects file, and the log. :class:`Capture` is one attempt's records: a command's
stdout lines or a function's returned items, checked by the attempt's own encoder and held
in one piece (:class:`~zotsink._core.blocks.Held`: memory, then a temporary file) until the
attempt ends, so that they reach OUT together or not at all. Both backends feed a capture
through the same methods: it is a :class:`~zotsink._core.pump.LineSink` for lines cut by the
one pipe line cutter, and takes a function's result items.

:func:`append_held` is a group commit's first append: each capture's piece, in as few
locked appends as can be (one for all held in memory), and where each landed: the blocks
an ``end`` row names (offset, length, CRC-32), each task's piece a part of one.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._core.blocks import BlockEncoder, Held, LongLine
from .._core.header import existing_header
from .._core.outlet import Outlet
from .._core.pump import LineCutter
from .._core.records import MAX_LINE, Encoder
from .._ledger.format import Block
from ..errors import HoldError, RecordError, ZotsinkError
from .events import Key, Placed
from .frames import LINES, PIECE
from .logline import LogLines

__all__ = ["Capture", "Output", "append_held"]

#: Bytes of a capture's records an attempt may hold in memory before a file takes them.
_READ_SIZE: Final = 1 << 16


class Output:
    """What every attempt of a run writes to: OUT (through the run's one template of
    columns), OUT's rejects file, and the log."""

    def __init__(self, template: Encoder, out: Outlet, log: Outlet, kv: str | None) -> None:
        self.template = template
        self.out = out
        self.log = log
        self.kv = kv
        # each attempt's last stderr line that is not blank, until its end is told: what
        # its failure is grouped by (see .halting)
        self.last_lines: dict[tuple[int, int], bytes] = {}

    def encoder(self, env: Mapping[str, str]) -> BlockEncoder:
        """An attempt's own encoder: its task number and attempt in its stamps."""
        # like(): OUT's header as the template found it, so that each task's encoder can
        # refuse a key:value first line of a new OUT and drop a repeated header. An OUT that
        # was there before the run may begin with a piece no row claims (an interrupted
        # attempt's records, kept): its first line is a record then, not a header, and a
        # task's line equal to it is kept. Only a header the run knows is dropped again:
        # the columns given, or the first line kept for a new OUT.
        return BlockEncoder(self.template.like(env, known=False), self.kv, count=True)

    def encode(self, enc: BlockEncoder, block: bytes) -> tuple[bytes | memoryview, int]:
        """Lines of records, encoded with the run's columns."""
        self._columns_in(enc)
        data, n = enc.encode(block)
        self._columns_out(enc)
        return data, n

    def encode_record(self, enc: BlockEncoder, value: Any) -> bytes:
        """One record by column name (a function's mapping); raises RecordError."""
        self._columns_in(enc)
        line = enc.enc.encode(value)
        self._columns_out(enc)
        return line

    def _columns_in(self, enc: BlockEncoder) -> None:
        # another task's first key:value line named the columns: this one uses them too
        tpl = self.template
        if enc.enc.columns is None and tpl.columns is not None:
            enc.enc.set_columns(tpl.columns)

    def _columns_out(self, enc: BlockEncoder) -> None:
        # this task named them first: every later task, and OUT's header, follow
        tpl = self.template
        if tpl.columns is None and enc.enc.columns is not None:
            tpl.set_columns(enc.enc.columns)
            self.out.follow(tpl)

    @property
    def log_path(self) -> str:
        return self.log.writer.path

    def header_size(self) -> int:
        """The bytes of OUT's header: what readers keep of OUT before the claimed pieces."""
        return len(self.out.writer.header or b"")

    def log_due_in(self, now: float) -> float | None:
        return self.log.due_in(now)

    def flush_log(self, now: float | None = None) -> None:
        """The log's batch appended (when due at ``now``; at once without it)."""
        if now is None or self.log.due(now):
            self.log.flush()

    def close(self) -> None:
        self.out.close()
        self.log.close()

    def long_line(self, where: str) -> LongLine:
        return LongLine(self.out.writer.path, where)

    def last_line(self, key: tuple[int, int]) -> str:
        """An attempt's last stderr line that is not blank, once: what its failure is
        grouped by (see .halting)."""
        return self.last_lines.pop(key, b"").decode("utf-8", "replace")

    def log_lines(self, num: int, attempt: int) -> LogLines:
        return LogLines(self.log, num, attempt, self.last_lines if num else None)


class Capture:
    """One attempt's records, held until it ends (see the module's docstring)."""

    __slots__ = ("encoder", "held", "key", "long", "lost", "notes", "output", "records", "text")

    def __init__(self, key: Key, output: Output, env: Mapping[str, str]) -> None:
        self.key = key
        self.output = output
        self.encoder = output.encoder(env)  # encodes its records; batches nothing
        self.long: LongLine | None = None  # a line over the limit, kept aside
        self.records = 0
        self.held = Held(out=output.out.writer.path)
        self.text: LineCutter | None = None  # a function's large text, arriving in pieces
        self.notes: list[str] = []
        self.lost: str | None = None  # why its output could not be held: it fails

    # a LineSink of records
    def lines(self, block: bytes) -> None:
        """Lines of records (a command's stdout, a function's returned text), held."""
        data, n = self.output.encode(self.encoder, block)
        self.records += n
        self._hold(data, n)

    def _hold(self, data: bytes | memoryview, n: int) -> None:
        """Hold records; when no place can take them (HoldError) the attempt fails, with
        the error as its note, and its further output is dropped: the run goes on."""
        if self.lost is not None:
            return
        try:
            self.held.add(data, n)
        except HoldError as e:
            self.lost = str(e)
            self.notes.append(self.lost)

    def long_begin(self, head: bytes) -> None:
        # never held whole: a line over the limit goes to a temporary file for the rejects
        num = self.key[0]
        self.long = self.output.long_line(f"task {num} {self.encoder.take_line()}")
        self.long_more(head)

    def long_more(self, piece: bytes) -> None:
        assert self.long is not None
        if self.lost is not None:
            return
        try:
            self.long.add(piece)
        except HoldError as e:
            self.lost = str(e)
            self.notes.append(self.lost)

    def long_end(self, size: int, how: str) -> None:
        long, self.long = self.long, None
        assert long is not None
        self.encoder.skip(long.size + 1)
        out = self.output.out
        if self.text is not None:  # a function's text: its line's length is known, as before
            why = f"line of {size} bytes is over the {MAX_LINE}-byte limit"
        else:
            why = f"over the {MAX_LINE}-byte line limit{how}"
        out.reject_long(long, why)
        self.notes.append(f"a line over the limit refused, see {out.rejects_file}")

    def item(self, kind: int, value: Any) -> None:
        """One item of a function's result: text of lines (or a piece of it that the next
        item goes on with), or one record by column name."""
        if kind == PIECE or (kind == LINES and self.text is not None):
            raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
            if self.text is None:
                self.text = LineCutter(MAX_LINE)  # a large text, cut as a command's stdout
            self.text.feed(raw, self)
            if kind == LINES:  # its last piece
                self.text.finish(self, "")
                self.text = None
            return
        if kind == LINES:
            raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
            if not raw:
                return
            if not raw.endswith(b"\n"):
                raw += b"\n"
            self.lines(raw)
            return
        try:
            line = self.output.encode_record(self.encoder, value)
        except (RecordError, ZotsinkError) as e:
            where = self.encoder.take_line()
            self.encoder.refused(f"{where}: {e}", repr(value).encode())
            return
        self.encoder.counted()
        self.records += 1
        self._hold(line, 1)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def drop_first(self, line: bytes) -> bool:
        """Leave out its first record when it is ``line`` (a header another piece lands
        first with); whether it did."""
        if not self.held.drop_first(line):
            return False
        self.records -= 1
        return True

    def drop_records(self) -> None:
        """Forget the records held (a function's result whose call then raised)."""
        self.held.close()
        self.held = Held(out=self.output.out.writer.path)
        self.records = 0
        self.text = None

    @property
    def size(self) -> int:
        """Bytes of records it holds."""
        return self.held.size

    def refuse(self) -> int:
        """Its refused lines to OUT's rejects file, with a note; how many."""
        rejects = self.encoder.rejects
        out = self.output.out
        if rejects:
            out.reject([(f"task {self.key[0]} {why}", ln) for why, ln in rejects])
            self.notes.append(f"{len(rejects)} lines refused, see {out.rejects_file}")
        out.repeated(self.encoder.repeats)
        return len(rejects)

    def close(self) -> None:
        """Free what it holds (after its commit, or after an error)."""
        self.held.close()


def append_held(out: Outlet, captures: Sequence[Capture]) -> tuple[list[Placed], list[Block]]:
    """Each capture's records, in one piece each, in as few locked appends as can be: one
    for all held in memory, one for each held in a file. Where each landed, in the order of
    the blocks (those appended first); a capture whose piece could not be appended comes
    last, at offset -1, with a note that says where it is. Frees what the captures held.

    The records go before the rows that claim them: a crash between the two leaves lines
    no ok row claims, which readers leave out and the next run writes again."""
    refused = {c.key: c.refuse() for c in captures}
    _one_header(out, captures)
    pieces = {c: c.held.in_memory() for c in captures if c.held.size and c.lost is None}
    small = [c for c, data in pieces.items() if data is not None]
    groups = [small] if small else []
    groups += [[c] for c, data in pieces.items() if data is None]
    placed: list[Placed] = []
    blocks: list[Block] = []
    failed: list[Placed] = []
    for group in groups:
        if group is small:
            block = b"".join(pieces[c] or b"" for c in group)
            err = out.write(block, sum(c.held.count for c in group))
            crc = zlib.crc32(block)
        else:
            err = out.write(group[0].held, group[0].held.count)
            crc = group[0].held.crc
        if err is not None:
            where = getattr(err, "spill_path", None) or "a side file"
            for c in group:
                c.note(f"its records could not be appended to OUT; they are in {where}")
                failed.append(_placed(c, -1, refused))
            continue
        at = out.writer.last_at  # where the block just appended begins
        blocks.append(Block(at, sum(c.held.size for c in group), crc))
        for c in group:
            placed.append(_placed(c, at, refused))
            at += c.held.size
    for c in captures:
        if c not in pieces:
            placed.append(_placed(c, 0, refused))  # nothing held (or lost)
    for c in captures:
        c.close()
    return placed + failed, blocks


def _placed(c: Capture, offset: int, refused: Mapping[Key, int]) -> Placed:
    return Placed(
        c.key,
        offset,
        c.records,
        c.held.size if c.lost is None else 0,
        refused.get(c.key, 0),
        c.lost is not None,
        tuple(c.notes),
    )


def _one_header(out: Outlet, captures: Sequence[Capture]) -> None:
    """Into an OUT that was new when the run began (no ``--columns``), each task's first
    line was kept as the header it would write: only the piece that lands first in OUT
    keeps it, the others' equal first lines are dropped and counted, before any piece's
    place is taken."""
    kept = [c for c in captures if c.encoder.kept_header is not None and c.held.size]
    if not kept:
        return
    kept.sort(key=lambda c: c.held.in_memory() is None)  # the order append_held lands them
    first = existing_header(out.writer.path)  # a first line, once there, never changes
    for c in kept:
        if first is None:
            first = c.encoder.kept_header  # lands first: OUT's header from now on
        elif c.encoder.kept_header == first and c.drop_first(first):
            out.repeated()
