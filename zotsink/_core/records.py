"""Record formats: the one place where records are encoded, decoded and checked.

Three formats. ``tsv``: values joined by TAB, escaped the PostgreSQL text way (``\\\\ \\t \\n
\\r``). ``csv``: RFC 4180 through the stdlib ``csv`` module. ``lines``: one record per line,
bytes passed through. A record given as a string or bytes is taken as an already formatted
line; a sequence is one row of values; a mapping is a row by column name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Union

from ..errors import RecordError, UsageError
from .fileio import line_blocks
from .stamp import DEFAULT_STAMP, STAMP_FIELDS, parse_stamp, stamp_values, utc_now

__all__ = [
    "DEFAULT_STAMP",
    "FORMATS",
    "MAX_LINE",
    "STAMP_FIELDS",
    "Encoder",
    "Record",
    "check_line",
    "count_newlines",
    "decode_row",
    "encode_row",
    "escape_tsv",
    "format_for",
    "header_fault",
    "line_fault",
    "lines_ok",
    "parse_stamp",
    "stamp_values",
    "unescape_tsv",
    "uniform_fields",
    "value_text",
]

#: Output formats zotsink writes.
FORMATS: Final = ("tsv", "csv", "lines")
#: Longest record line accepted (bytes, without the newline); longer ones are rejected whole.
MAX_LINE: Final = 16 * 1024 * 1024

Record = Union[str, bytes, Sequence[Any], Mapping[str, Any]]

_TSV_ESCAPES: Final = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_TSV_UNESCAPES: Final = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


def format_for(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """The format for OUT: ``fmt`` when given (and not ``auto``), else from the file ending."""
    if fmt and fmt != "auto":
        if fmt not in FORMATS:
            raise UsageError(f"unknown format {fmt!r}: use one of auto, {', '.join(FORMATS)}")
        return fmt
    name = os.fspath(path).lower()
    if name.endswith((".tsv", ".tab")):
        return "tsv"
    if name.endswith(".csv"):
        return "csv"
    return "lines"


def escape_tsv(value: str) -> str:
    """Escape one TSV value so that it cannot break the row."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return "".join(_TSV_ESCAPES.get(c, c) for c in value)
    return value


def unescape_tsv(value: str) -> str:
    """Undo :func:`escape_tsv`; an unknown escape keeps its character."""
    if "\\" not in value:
        return value
    out: list[str] = []
    chars = iter(value)
    for c in chars:
        if c == "\\":
            nxt = next(chars, "")
            out.append(_TSV_UNESCAPES.get(nxt, nxt) if nxt else "\\")
        else:
            out.append(c)
    return "".join(out)


def value_text(value: Any) -> str:
    """One value as the text a record holds: the one value-to-text rule.

    A value is written as the plain number or string it is, whatever its class: a ``str``
    subclass as its characters, an ``IntEnum`` as its number, a ``float`` subclass (NumPy's
    ``float64``) by ``float``'s own repr, not the class's (``np.float64(0.5)``). Other
    values (NumPy's integers, bools and smaller floats, ``Decimal``) print as themselves.
    """
    tp = type(value)  # the common exact types first: one check instead of four
    if tp is int:
        return str(value)
    if tp is float:
        return repr(value)  # repr round-trips; str() would too on 3.x, but say what we mean
    if value is None:
        return ""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value)
    if isinstance(value, bytes):
        return bytes(value).decode("utf-8", "surrogateescape")
    return str(value)


def encode_row(values: Iterable[Any], fmt: str) -> str:
    """One row as a line without its newline."""
    texts = [v if type(v) is str else value_text(v) for v in values]
    if fmt == "csv":
        return _csv_line(texts)
    # Join first and escape only when needed: one C-speed scan of the line instead of a call
    # per value. A tab inside a value shows as one tab too many.
    line = "\t".join(texts)
    if "\\" in line or "\n" in line or "\r" in line or line.count("\t") != len(texts) - 1:
        return "\t".join([escape_tsv(t) for t in texts])
    return line


def csv_module() -> Any:
    """The stdlib csv module, with its field limit raised to zotsink's line limit.

    Python's default limit is 128 KiB per field, far below :data:`MAX_LINE`: a record
    append accepted would then be unreadable to verify, missing and collect. One limit,
    everywhere. The limit is process-wide: it is only ever raised, never lowered, so a
    program that set a larger one keeps it. Imported on first use: start-up time matters.
    """
    import csv

    if csv.field_size_limit() < MAX_LINE + 1:
        csv.field_size_limit(MAX_LINE + 1)
    return csv


class _LineSink:
    """A file-like target that keeps the last line the csv writer produced."""

    line = ""

    def write(self, s: str) -> None:
        self.line = s


_csv_writer: Any = None
_csv_sink = _LineSink()


def _csv_line(texts: list[str]) -> str:
    global _csv_writer
    if _csv_writer is None:
        csv = csv_module()
        # The writer quotes only the characters of its line terminator: give it CRLF so
        # that a bare CR or LF inside a value is quoted too, then end lines with LF.
        _csv_writer = csv.writer(_csv_sink, lineterminator="\r\n")
    _csv_writer.writerow(texts)
    return _csv_sink.line[:-2]


def _preview(line: str, width: int = 60) -> str:
    return repr(line if len(line) <= width else line[:width] + "...")


def decode_row(line: str, fmt: str) -> list[str]:
    """Split one line (without its newline) into values."""
    if fmt == "csv":
        # strict: a quote left open is an error, never a record that silently swallows
        # the rest of the line (or, in a file, every record after it)
        rows = list(csv_module().reader([line], strict=True))
        if len(rows) != 1:
            raise RecordError(f"not one csv record: {_preview(line)}")
        return rows[0]
    return [unescape_tsv(v) for v in line.split("\t")]


# -- what a valid line is: defined here once ------------------------------------------------
# A record line holds no NUL byte and at most MAX_LINE bytes; with a header its field count
# is the header's. check_line says why one line fails; lines_ok and text_ok are the same
# rule as one C-speed scan over a block of lines or one str, for the hot paths.


def line_fault(
    line: bytes, fmt: str = "lines", width: int | None = None, fields: int | None = None
) -> tuple[str, str] | None:
    """The one valid-line rule: why a record (without its final newline) is refused, as
    ``(kind, reason)``, or None when it is fine. ``append`` refuses and ``verify`` reports
    exactly these.

    Kinds: ``nul`` (a NUL byte), ``long`` (over :data:`MAX_LINE` bytes), ``malformed`` (a
    csv line that is not exactly one record), ``fields`` (a field count other than
    ``width``, the header's). ``fields``: the record's field count when the caller has
    parsed it already (a csv record that spans lines); else it is counted here.
    """
    if b"\0" in line:
        return ("nul", "NUL byte")
    if len(line) > MAX_LINE:
        return ("long", f"line of {len(line)} bytes is over the {MAX_LINE}-byte limit")
    if fields is None and (fmt == "csv" or (width is not None and fmt == "tsv")):
        if fmt == "tsv":
            fields = line.count(b"\t") + 1
        else:
            try:
                fields = len(decode_row(line.decode("utf-8", "surrogateescape"), "csv"))
            except Exception as e:  # csv.Error or RecordError: an open quote, a bare CR
                return ("malformed", f"malformed csv line ({e})")
    if width is not None and fields is not None and fmt != "lines" and fields != width:
        return ("fields", f"{fields} fields where the header has {width}")
    return None


def check_line(line: bytes) -> str | None:
    """Why a raw record line (without newline) is refused whatever the format, or None:
    :func:`line_fault`'s NUL and length rules."""
    why = line_fault(line)
    return None if why is None else why[1]


def header_fault(names: Sequence[str]) -> int:
    """The one header rule: the index of the first column that has no name or repeats an
    earlier one's, or -1 when every column has a name of its own. ``Encoder`` and
    ``verify`` each word the fault for their reader."""
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not name or name in seen:
            return i
        seen.add(name)
    return -1


#: translate() tables that delete every byte but a separator and the newline.
_ONLY = {sep: bytes(b for b in range(256) if b not in (sep[0], 10)) for sep in (b"\t", b",")}


def uniform_fields(
    src: bytes | bytearray | memoryview, sep: bytes, k: int, at: int = 0, end: int | None = None
) -> int:
    """The number of lines in ``src[at:end]`` (whole lines) when each has exactly ``k``
    fields split by ``sep``, else -1. One C-speed pass: deleting every byte but separators
    and newlines leaves exactly ``sep * (k - 1) + newline`` once per line in a good block."""
    # bytes.translate: faster than bytearray's on the same bytes, copy included
    piece = src[at:end] if isinstance(src, bytes) else bytes(memoryview(src)[at:end])
    marks = piece.translate(None, _ONLY[sep])
    n = len(marks) // k
    if len(marks) == n * k and marks == (sep * (k - 1) + b"\n") * n:
        return n
    return -1


def count_newlines(src: bytes | bytearray | memoryview, at: int = 0, end: int | None = None) -> int:
    """``src[at:end].count(b"\n")``, faster unless the lines are short.

    ``count`` tests every byte in a plain loop (as long as ``cat`` takes to copy them);
    deleting the newlines with ``replace`` finds each with ``memchr`` and copies the runs
    between them, which wins for all but very short lines (BENCHMARKS.md has the figures).
    A sample of the first 4 KiB picks the method; both give the same count."""
    if isinstance(src, memoryview):  # no count() of its own
        src, at, end = bytes(src[at:end]), 0, None
    end = len(src) if end is None else end
    if end - at <= 4096 or src.count(b"\n", at, at + 4096) > 4096 // 32:
        return src.count(b"\n", at, end)
    piece = src[at:end] if isinstance(src, bytes) else bytes(memoryview(src)[at:end])
    return len(piece) - len(piece.replace(b"\n", b""))


def lines_ok(block: bytes, lines: list[bytes] | None = None, tabs: int = -1) -> bool:
    """Whether every line of ``block`` (whole lines) passes :func:`check_line` and, when
    ``tabs`` >= 0, has exactly ``tabs`` tabs (``lines``: the block already split, if the
    caller has it). False means: look at each line with :func:`check_line` to learn which
    and why."""
    if b"\0" in block:
        return False
    if len(block) > MAX_LINE:
        if lines is None:
            lines = [line for part, _ in line_blocks((block,)) for line in part]
        if max(map(len, lines), default=0) > MAX_LINE:
            return False
    if tabs >= 0:
        whole = block if block.endswith(b"\n") else block + b"\n"
        return uniform_fields(whole, b"\t", tabs + 1) >= 0
    return True


def text_ok(text: str, tabs: int = -1) -> bool:
    """:func:`lines_ok` for one record given as an ASCII str without newline (Sink's path)."""
    return (
        "\n" not in text
        and "\0" not in text
        and len(text) <= MAX_LINE
        and (tabs < 0 or text.count("\t") == tabs)
    )


class Encoder:
    """Turns records of any kind into bytes lines for one OUT.

    ``columns`` are the data columns (without stamp columns); the header is the stamp fields
    followed by them. When ``columns`` is None, the first mapping record fixes them.
    """

    def __init__(
        self,
        fmt: str,
        columns: Sequence[str] | None = None,
        stamp: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        if fmt not in FORMATS:
            raise UsageError(f"unknown format {fmt!r}")
        self.fmt = fmt
        self.stamp = tuple(stamp)
        self.columns: tuple[str, ...] | None = None
        if columns is not None:
            self.set_columns(columns)
        self._env = env
        # What make_encoder learned of OUT for raw lines (see BlockEncoder): OUT's first line
        # when it has one and this encoder writes no header of its own, and whether OUT was
        # empty or missing, so that the first raw line becomes its header.
        self.out_header: bytes | None = None
        self.out_new = False
        env = os.environ if env is None else env
        # Everything but the time is fixed for the life of the process: compute it once.
        fixed = stamp_values([f for f in self.stamp if f != "time"], env)
        self._fixed = dict(zip([f for f in self.stamp if f != "time"], fixed))
        self._time_at = self.stamp.index("time") if "time" in self.stamp else -1

    def like(self, env: Mapping[str, str] | None = None, *, known: bool = True) -> Encoder:
        """An encoder like this one (format, columns, stamp, what it knows of OUT) whose
        stamps read ``env``: one per task of a run, each with its task number. ``known``
        False: it knows no header of OUT's (one OUT had before its run is no header the run
        knows)."""
        # a copy, not a new one: a run makes one per task, and what __init__ checks and
        # computes is this one's already; only stamps read the new environment
        enc = Encoder.__new__(Encoder)
        enc.__dict__.update(self.__dict__)
        if env is not None:
            enc._env = env
            if enc.stamp:
                names = [f for f in enc.stamp if f != "time"]
                enc._fixed = dict(zip(names, stamp_values(names, env)))
        enc.out_header = self.out_header if known or self.out_new else None
        return enc

    def set_columns(self, columns: Sequence[str]) -> None:
        cols = tuple(columns)
        bad = header_fault(cols) if cols else 0
        if bad >= 0 and (not cols or not cols[bad]):
            raise UsageError(f"column names must not be empty: {','.join(cols)!r}")
        if bad >= 0:
            raise UsageError(f"column {cols[bad]!r} is named twice in {','.join(cols)!r}")
        clash = set(cols) & set(self.stamp)
        if clash:
            raise UsageError(f"column {sorted(clash)[0]!r} is also a --stamp field")
        self.columns = cols

    @property
    def header(self) -> tuple[str, ...] | None:
        if self.columns is None:
            return None
        return self.stamp + self.columns

    def data_header_line(self) -> bytes | None:
        """The line a raw input line equal to the header has: the data columns alone (a
        stamped OUT's header also names the stamp fields, which raw lines do not carry);
        None when the columns are not known."""
        if self.columns is None:
            return None
        return (encode_row(self.columns, self.fmt) + "\n").encode("utf-8", "surrogateescape")

    def header_line(self) -> bytes | None:
        """The header as a bytes line with its newline, or None when there is none."""
        h = self.header
        if h is None:
            return None
        return (encode_row(h, self.fmt) + "\n").encode("utf-8", "surrogateescape")

    def stamp_row(self, now: str | None = None) -> list[str]:
        row = [self._fixed.get(f, "") for f in self.stamp]
        if self._time_at >= 0:
            row[self._time_at] = now if now is not None else utc_now()
        return row

    def stamp_prefix(self, now: str | None = None) -> bytes:
        """The stamp values as a bytes prefix (with trailing separator) for a raw line."""
        if not self.stamp:
            return b""
        sep = "," if self.fmt == "csv" else "\t"
        return (encode_row(self.stamp_row(now), self.fmt) + sep).encode("utf-8", "surrogateescape")

    def check_raw(self, line: bytes) -> str | None:
        """Why a pre-formatted line (without newline) is refused, or None: :func:`line_fault`
        with this OUT's format and header.

        In csv every line must parse as exactly one record (with a header: of its width):
        a line with a quote left open would make csv readers swallow every record that
        other writers append after it.
        """
        why = line_fault(line, self.fmt, None if self.columns is None else len(self.columns))
        return None if why is None else why[1]

    def encode(self, record: Record, now: str | None = None) -> bytes:
        """One record as a bytes line ending in a newline; RecordError when refused."""
        if isinstance(record, (str, bytes)):
            try:
                raw = (
                    record.encode("utf-8", "surrogateescape") if isinstance(record, str) else record
                )
            except UnicodeEncodeError as e:
                raise RecordError(f"the record is not valid Unicode text ({e.reason})") from None
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if b"\n" in raw:
                raise RecordError(
                    f"a record is one line, this one has a newline inside: {raw[:60]!r}"
                )
            why = self.check_raw(raw)
            if why:
                raise RecordError(f"record refused ({why}): {raw[:60]!r}")
            return self.stamp_prefix(now) + raw + b"\n" if self.stamp else raw + b"\n"
        tp = type(record)
        if tp is list or tp is tuple:
            # Before the ABCs: isinstance against Mapping and Sequence costs a good part of
            # encoding a short row.
            values = list(record) if self.stamp else record
            if self.columns is not None and len(values) != len(self.columns):
                raise RecordError(
                    f"row has {len(values)} values where the header has {len(self.columns)}"
                )
        elif isinstance(record, Mapping):
            values = self._mapping_values(record)
        elif isinstance(record, Sequence):
            values = list(record)
            if self.columns is not None and len(values) != len(self.columns):
                raise RecordError(
                    f"row has {len(values)} values where the header has {len(self.columns)}"
                )
        else:
            raise RecordError(
                f"a record is a str, bytes, sequence or mapping, not {type(record).__name__}"
            )
        if self.stamp:
            values = self.stamp_row(now) + values
        try:
            line = encode_row(values, self.fmt).encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise RecordError(
                f"a value is not valid Unicode text ({e.reason} at {e.object[e.start : e.end]!r})"
            ) from None
        if b"\0" in line or len(line) > MAX_LINE:  # check_line, called only when it says no
            raise RecordError(f"record refused ({check_line(line)})")
        return line + b"\n"

    def _mapping_values(self, record: Mapping[str, Any]) -> list[Any]:
        if self.columns is None:
            self.set_columns([str(k) for k in record])
        cols = self.columns
        assert cols is not None
        unknown = [k for k in record if k not in cols]
        if unknown:
            raise RecordError(f"unknown column {unknown[0]!r}: the header has {','.join(cols)}")
        return [record.get(c) for c in cols]
