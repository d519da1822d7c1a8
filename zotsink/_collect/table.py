"""The table collect builds: the column union, the encoded rows and de-duplication (the
quick lane that spools the usual tiny file without parsing it is
:mod:`zotsink._collect.quicklane`).

Rows are encoded (by :func:`zotsink._core.records.encode_row`) as soon as a file is parsed, over
the columns known at that moment, and spooled. Columns only ever get appended to the union,
so a spooled row stays valid: when it is written its missing trailing cells are added as
separators. The spool holds the rows as lines; beside it, in arrays, each row's length, cell
count and flags, and where each file's rows start: batches are cut only there, so one file's
rows are never split between two batches. When no row lacks a cell and nothing is left to
decide, a batch is a plain slice of the spool. Only :meth:`Table.row_spooler` writes to that
store, for :meth:`Table.add` and for the quick lane alike.

De-duplication keeps 16-byte BLAKE2b digests, never records: ``exact`` a set of row digests;
``key`` a dict from key digest to the row digest of the kept record (``first``), or to the
packed ``(mtime, order, spool offset, file, row digest)`` of the current winner (``last``,
decided only when every file has been read). A row's identity is its cells without the source
column, TSV-encoded with empty trailing cells dropped, so a row read back from OUT (where
missing and empty cells look the same) has the same identity as when it was collected.
"""

from __future__ import annotations

import re
import struct
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Final

from .._core.digest import blake2b
from .._core.records import encode_row
from ..errors import UsageError
from .spool import Spool

__all__ = [
    "FIRST",
    "OutState",
    "Table",
    "fixed_columns",
    "identity_of",
    "key_digest",
    "read_out",
    "row_digest",
    "source_digest",
]

FIRST: Final = 1  # flag: the first spooled row of its file
KEYLESS: Final = 2  # flag: a record without key values, written whatever the key contests say
_WIN: Final = struct.Struct("<qQQQ16s")  # mtime_ns, order, spool offset, file, row digest
#: The order of rows already in OUT (``--skip-collected``): they win every key contest.
_IN_OUT: Final = (1 << 63) - 1


def _digest(text: str) -> bytes:
    return blake2b(text.encode("utf-8", "surrogateescape"), digest_size=16).digest()


def row_digest(fields: bytes) -> bytes:
    """The identity of a TSV-encoded row given its fields without the source cell; empty
    trailing cells and the newline may be there or not (a row from OUT has neither)."""
    return blake2b(fields.rstrip(b"\t\n"), digest_size=16).digest()


def identity_of(cells: list[str]) -> bytes:
    """The identity of a row given its cells without the source column."""
    return row_digest(encode_row(cells, "tsv").encode("utf-8", "surrogateescape"))


def key_digest(values: list[str]) -> bytes | None:
    """The digest of a record's key values; None when they are all empty (no key)."""
    if not any(values):
        return None
    return _digest(encode_row(values, "tsv"))


class OutState:
    """What OUT already holds, for ``--skip-collected``: sources, row and key digests."""

    def __init__(self) -> None:
        self.header: list[str] | None = None
        self.sources: set[bytes] = set()  # digests of source names found in OUT
        self.rows: set[bytes] = set()
        self.keys: dict[bytes, bytes] = {}
        self.last_source: str | None = None  # may have been cut by a kill mid-write
        self.last_rows: dict[bytes, int] = {}  # its rows: they are not written again
        self.torn = False  # OUT ends in a fragment


def fixed_columns(source_column: str, pattern: re.Pattern[str] | None) -> list[str]:
    """The columns before the fields: the source column, then the --name-pattern groups."""
    groups = sorted(pattern.groupindex, key=pattern.groupindex.__getitem__) if pattern else []
    return ([source_column] if source_column else []) + groups


class Table:
    """Columns, de-duplication and spooled rows of one collect, fed files in output order."""

    def __init__(
        self,
        fmt: str,
        source_column: str,
        pattern: re.Pattern[str] | None,
        dedup: str,
        key: list[str],
        keep: str,
        spool: Spool,
        seeded: list[str] | None,
        state: OutState | None,
    ) -> None:
        self.fmt = fmt
        self.sep = "," if fmt == "csv" else "\t"
        self.source = source_column
        self.pattern = pattern
        self.fixed = fixed_columns(source_column, pattern)
        self.groups = self.fixed[1:] if source_column else list(self.fixed)
        self.columns: list[str] = list(self.fixed)
        self.index: dict[str, int] = {c: i for i, c in enumerate(self.columns)}
        for c in seeded or ():
            self._column(c, "")
        self.dedup, self.key, self.keep = dedup, key, keep
        self.spool = spool
        self.state = state or OutState()
        self._layouts: dict[tuple[str, ...], tuple[list[int] | None, int]] = {}
        self.seen: set[bytes] = set(self.state.rows) if dedup == "exact" else set()
        self.kmap: dict[bytes, bytes] = {}
        if dedup == "key":
            # keys already in OUT keep OUT's record: it cannot be taken back
            for k, ident in self.state.keys.items():
                self.kmap[k] = (
                    ident
                    if keep == "first"
                    else _WIN.pack(_IN_OUT, _IN_OUT, _IN_OUT, _IN_OUT, ident)
                )
        self.duplicates = self.conflicts = self.unmatched = 0
        self.losers: set[int] = set()  # files with a record that lost a key contest
        self._order = 0
        self._lens = array("I")  # per spooled row: bytes with the newline
        self._cells = array("I")  # per spooled row: cells before padding
        self._flags = bytearray()  # per spooled row: FIRST, KEYLESS
        self._starts = array("Q")  # per file with rows: spool offset of its first row
        self._start_rows = array("Q")  # per file with rows: index of its first row
        self._put = self.row_spooler()

    @property
    def records(self) -> int:
        """Rows spooled."""
        return len(self._lens)

    def row_spooler(self) -> Callable[[bytes, int, int], int]:
        """The one writer of the row store: ``put(line, cells, flags)`` spools an encoded
        row (with its newline; ``cells`` before padding; flags ``FIRST``, ``KEYLESS``) and
        returns its spool offset. A function bound once, because it runs once a row: the
        store's arrays are never replaced, only appended to."""
        write = self.spool.write
        lens = self._lens
        nrows = lens.__len__
        len_of, cells_of, flags_of = lens.append, self._cells.append, self._flags.append
        start, start_row = self._starts.append, self._start_rows.append

        def put(data: bytes, cells: int, flag: int) -> int:
            off = write(data)
            if flag & FIRST:
                start(off)
                start_row(nrows())
            len_of(len(data))
            cells_of(cells)
            flags_of(flag)
            return off

        return put

    def layout(self, keys: tuple[str, ...]) -> tuple[list[int] | None, int]:
        """Where the cells of records with these keys (already added) go: the column of
        each key (None: the fields in order, right after the fixed columns), and the row's
        width."""
        return self._layouts[keys]

    # -- columns ---------------------------------------------------------------------------
    def _column(self, name: str, where: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = len(self.columns)
            self.columns.append(name)
        elif i < len(self.fixed) and where:
            what = "source" if name == self.source else "--name-pattern group"
            raise UsageError(
                f"{where}: a field is named {name!r} like the {what} column; choose another "
                + ("name with --source-column NAME" if what == "source" else "group name")
            )
        return i

    def _layout(self, keys: tuple[str, ...], where: str) -> tuple[list[int] | None, int]:
        idx = [self._column(k, where) for k in keys]
        n = len(self.fixed)
        # the usual case: every file has the same fields in the same order
        simple = idx == list(range(n, n + len(idx)))
        lay = (None if simple else idx, max(idx, default=n - 1) + 1)
        self._layouts[keys] = lay
        return lay

    def header_line(self) -> bytes:
        return (encode_row(self.columns, self.fmt) + "\n").encode("utf-8", "surrogateescape")

    # -- rows ----------------------------------------------------------------------------------
    def add(
        self, name: str, base: str, recs: list[dict[str, str]], mtime_ns: int, file_no: int
    ) -> None:
        """Spool (or drop as duplicates) the records of one file."""
        groups: list[str] = []
        gdict: dict[str, str] = {}
        if self.pattern is not None:
            m = self.pattern.search(base)
            if m is None:
                self.unmatched += 1
                groups = [""] * len(self.groups)
            else:
                gdict = {g: v or "" for g, v in m.groupdict().items()}
                groups = [gdict[g] for g in self.groups]
        head = [name, *groups] if self.source else groups  # the cells before the fields
        nsrc = 1 if self.source else 0
        pending = self.state.last_rows if name == self.state.last_source else None
        flag = FIRST
        nfix = len(self.fixed)
        fmt, layouts, dedup, seen = self.fmt, self._layouts, self.dedup, self.seen
        put = self._put
        for rec in recs:
            keys = tuple(rec)
            idx, width = layouts.get(keys) or self._layout(keys, name)
            if idx is None:
                row = [*head, *rec.values()]
            else:
                full = [""] * width
                for i, v in zip(idx, rec.values()):
                    full[i] = v
                row = head + full[nfix:]
            data = encode_row(row, fmt).encode("utf-8", "surrogateescape") + b"\n"
            if fmt == "tsv":  # the row itself, less the source cell
                ident = row_digest(data.partition(b"\t")[2] if nsrc else data)
            else:
                ident = identity_of(row[nsrc:])
            if pending and pending.get(ident, 0) > 0:
                pending[ident] -= 1  # already in OUT from the run that was cut short
                self.duplicates += 1
                continue
            self._order += 1
            kd = None
            if dedup == "exact":
                if ident in seen:
                    self.duplicates += 1
                    continue
                seen.add(ident)
            elif dedup == "key":
                kd = key_digest([self._key_value(k, rec, gdict, name) for k in self.key])
                if kd is None:
                    flag |= KEYLESS
                elif not self._contest(kd, ident, mtime_ns, file_no):
                    continue
            off = put(data, len(row), flag)
            flag = 0
            if kd is not None and self.keep == "last":
                self.kmap[kd] = _WIN.pack(mtime_ns, self._order, off, file_no, ident)

    def _key_value(self, k: str, rec: dict[str, str], gdict: dict[str, str], name: str) -> str:
        v = rec.get(k)
        if v is not None:
            return v
        if k in gdict:
            return gdict[k]
        return name if k == self.source else ""

    def _contest(self, kd: bytes, ident: bytes, mtime_ns: int, file_no: int) -> bool:
        """Whether a keyed record is kept (for now, under ``last``); counts the loser."""
        old = self.kmap.get(kd)
        if old is None:
            if self.keep == "first":
                self.kmap[kd] = ident
            return True
        if self.keep == "first":
            self._lost(old == ident, file_no)
            return False
        o_mtime, o_order, _off, o_file, o_ident = _WIN.unpack(old)
        if (mtime_ns, self._order) > (o_mtime, o_order):  # newest by mtime, then path
            self._lost(o_ident == ident, o_file)
            return True
        self._lost(o_ident == ident, file_no)
        return False

    def _lost(self, same: bool, file_no: int) -> None:
        if same:
            self.duplicates += 1
        else:
            self.conflicts += 1
            self.losers.add(file_no)

    # -- writing -----------------------------------------------------------------------------
    def check_key(self) -> None:
        """Every --key column must be a column of the table."""
        missing = [k for k in self.key if k not in self.index]
        if missing:
            raise UsageError(
                f"--key column {missing[0]!r} is not a column of the collected records "
                f"(columns: {','.join(self.columns)}); choose --key from those"
            )

    def _winners(self) -> array | None:
        if self.dedup != "key" or self.keep != "last":
            return None
        offs = (_WIN.unpack(v)[2] for v in self.kmap.values())
        winners = array("Q", sorted(o for o in offs if o != _IN_OUT))
        self.kmap.clear()  # no longer needed: give the memory back before writing
        return winners

    def batches(self, batch_bytes: int) -> Iterator[tuple[bytes, int]]:
        """(lines, row count) to append, in order, each about ``batch_bytes``, cut between files."""
        winners = self._winners()
        n = len(self.columns)
        if winners is None and (not self._cells or min(self._cells) == n):
            yield from self._slices(batch_bytes)
        else:
            yield from self._rows(batch_bytes, winners, n)

    def _slices(self, batch_bytes: int) -> Iterator[tuple[bytes, int]]:
        # every row is whole and written: a batch is the spool from one file start to another
        starts, rows, total = self._starts, self._start_rows, self.spool.size
        i, pos = 0, 0
        while pos < total:
            j = bisect_left(starts, pos + batch_bytes, i + 1)
            end, nrows = (starts[j], rows[j]) if j < len(starts) else (total, self.records)
            yield self.spool.pread(pos, end - pos), nrows - rows[i]
            i, pos = j, end

    def _rows(self, batch_bytes: int, winners: array | None, n: int) -> Iterator[tuple[bytes, int]]:
        sep = self.sep.encode()
        pads = [sep * (n - c) + b"\n" for c in range(n + 1)]
        lens, cells, flags = self._lens, self._cells, self._flags
        batch: list[bytes] = []
        size = 0
        w = 0
        off = 0  # spool offset of row r
        r = 0
        rest = b""
        for chunk in self.spool.chunks():
            buf = rest + chunk if rest else chunk
            pos = 0
            while r < len(lens) and pos + lens[r] <= len(buf):
                stop = pos + lens[r]
                if flags[r] & FIRST and size >= batch_bytes:
                    yield b"".join(batch), len(batch)
                    batch, size = [], 0
                keep = True
                if winners is not None and not flags[r] & KEYLESS:
                    while w < len(winners) and winners[w] < off:
                        w += 1
                    keep = w < len(winners) and winners[w] == off
                if keep:
                    line = buf[pos:stop] if cells[r] == n else buf[pos : stop - 1] + pads[cells[r]]
                    batch.append(line)
                    size += len(line)
                off += stop - pos
                pos = stop
                r += 1
            rest = buf[pos:]
        if batch:
            yield b"".join(batch), len(batch)


def source_digest(name: str) -> bytes:
    return _digest(name)


def read_out(
    out: str,
    fmt: str,
    source_column: str,
    dedup: str,
    key: list[str],
    lock: str,
    timeout: float,
    skip: bool = True,
) -> OutState:
    """What OUT holds, read from a consistent snapshot: the digests of its rows (``exact``)
    or keys (``key``), so that a record already in OUT is never written again, and with
    ``skip`` (``--skip-collected``) the sources it names.

    The rows of the last source in OUT are remembered one by one: a collect killed in the
    middle of a write may have left only some of them, so that source is read again and only
    its rows that are not in OUT yet are written.
    """
    import os

    from .._read import read_records

    st = OutState()
    # every line OUT holds: what is there already must not be added again
    rows = read_records(out, format=fmt, lock=lock, timeout=timeout, every=True)
    header = next(rows, None)
    if header is None:
        return st
    if skip and header[0] != source_column:
        raise UsageError(
            f"--skip-collected: the first column of {out} is {header[0]!r}, not the source "
            f"column {source_column!r}; give --source-column {header[0]} if that is it"
        )
    st.header = header
    kidx = [header.index(k) if k in header else -1 for k in key]
    nsrc = 1 if source_column else 0
    last: str | None = None
    last_rows: list[bytes] = []
    for row in rows:
        ident = identity_of(row[nsrc:])
        if skip:
            name = row[0]
            if name != last:
                st.sources.add(_digest(name))
                last, last_rows = name, []
            last_rows.append(ident)
        if dedup == "exact":
            st.rows.add(ident)
        elif dedup == "key":
            kd = key_digest([row[i] if 0 <= i < len(row) else "" for i in kidx])
            if kd is not None:
                st.keys.setdefault(kd, ident)
    if last is not None:
        st.sources.discard(_digest(last))
        st.last_source = last
        for ident in last_rows:
            st.last_rows[ident] = st.last_rows.get(ident, 0) + 1
    fd = os.open(out, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        st.torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
    finally:
        os.close(fd)
    return st
