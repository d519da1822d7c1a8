"""Tables written whole, not appended: JSON Lines and Parquet, with column types inferred.

``collect -o X.jsonl|X.parquet`` and ``cat OUT -o X.jsonl|X.parquet`` write here. Such a file
is no append target (a Parquet file cannot grow by a locked ``write``): it is written whole
(:func:`~zotsink._core.wholefile.whole_file`: a temporary name beside it, created exclusively
under a random name, fsynced, and linked into place only when whole), so a reader never sees
half of one and a killed run leaves no half file under the final name. An existing file is
refused before anything is read, unless ``force`` is given: then the finished file is renamed
over it, so a reader sees the old table or the new one, never a mix, and a write that fails
leaves the old one as it was.

Each column gets the narrowest type that holds every one of its non-empty values: integer
(64-bit, no leading zeros: ``007`` is a label, not 7), then float (finite decimal or
exponent notation), else string. An empty cell is null. Parquet comes from the optional
extra ``zotsink[parquet]`` (pyarrow), imported only here and only when asked for.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, Final

from .._core.fileio import split_lines
from .._core.records import decode_row, encode_row, format_for
from .._core.wholefile import check_target, whole_file
from ..errors import RecordError, UsageError, WriteError

__all__ = [
    "ENDINGS",
    "PARQUET_EXTRA",
    "WHOLE",
    "ColumnTypes",
    "check_whole_target",
    "export",
    "output_format",
    "write_whole",
]

#: OUT endings collect and ``cat -o`` understand, and the format each means.
ENDINGS: Final = {
    ".tsv": "tsv",
    ".tab": "tsv",
    ".txt": "tsv",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
}
#: Formats written whole to a temporary file and linked into place (never appended to).
WHOLE: Final = ("jsonl", "parquet")
#: What to install for Parquet.
PARQUET_EXTRA: Final = "pip install 'zotsink[parquet]'"
#: Rows per Parquet row group, and per JSON Lines write: memory stays bounded by this.
ROWS_PER_GROUP: Final = 65536

_NULL, _INT, _FLOAT, _STR = range(4)
TYPE_NAMES: Final = ("string", "integer", "float", "string")  # an all-null column: string
_INT_RE: Final = re.compile(r"[+-]?(?:0|[1-9][0-9]*)\Z")
_FLOAT_RE: Final = re.compile(
    r"[+-]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z"
)
_INT64: Final = 1 << 63


def output_format(path: str) -> str:
    """The format of an output file by its ending; UsageError for an ending zotsink cannot
    honour (writing TSV into ``x.json`` would be a silent surprise). No ending: TSV."""
    base = os.path.basename(path)
    dot = base.rfind(".")
    if dot <= 0:
        return "tsv"
    end = base[dot:].lower()
    fmt = ENDINGS.get(end)
    if fmt is None:
        raise UsageError(
            f"{path}: zotsink does not write {end} files; name the output .tsv (also .tab, "
            ".txt or no ending), .csv, .jsonl or .parquet"
        )
    return fmt


def _require_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as e:
        raise UsageError(
            f"writing .parquet needs pyarrow, which is not installed ({e}); install the "
            f"optional extra: {PARQUET_EXTRA}, or write .jsonl or .tsv instead"
        ) from None
    return pyarrow


def check_whole_target(path: str, fmt: str, force: bool = False) -> None:
    """Refuse, before anything is read, a whole-file output that cannot be written: one
    that exists already (unless ``force``), or a directory."""
    if fmt == "parquet":
        _require_pyarrow()
    if not os.path.lexists(path):
        return
    if os.path.isdir(path) and not os.path.islink(path):
        raise UsageError(f"{path} is a directory: name the .{fmt} file to write")
    check_target(path)  # a FIFO or a device is no file to replace either
    if not force:
        raise UsageError(
            f"{path} exists already: .{fmt} files are written whole, not appended to; "
            "give --force to replace it, or choose a new name"
        )


class ColumnTypes:
    """The narrowest type of each column, widened value by value."""

    def __init__(self, width: int) -> None:
        self.kinds = [_NULL] * width

    def add(self, row: Sequence[str]) -> None:
        kinds = self.kinds
        for i, v in enumerate(row):
            k = kinds[i]
            if not v or k == _STR:
                continue
            if _INT_RE.match(v):
                # past int64 an integer is kept exactly, as text, not rounded to a float
                kinds[i] = max(k, _INT) if -_INT64 <= int(v) < _INT64 else _STR
            elif _FLOAT_RE.match(v) and math.isfinite(float(v)):
                kinds[i] = max(k, _FLOAT)
            else:
                kinds[i] = _STR

    def names(self) -> list[str]:
        return [TYPE_NAMES[k] for k in self.kinds]


def _converters(kinds: list[int]) -> list[Callable[[str], Any]]:
    return [int if k == _INT else float if k == _FLOAT else str for k in kinds]


def _groups(rows: Iterable[Sequence[str]]) -> Iterator[list[Sequence[str]]]:
    group: list[Sequence[str]] = []
    for row in rows:
        group.append(row)
        if len(group) >= ROWS_PER_GROUP:
            yield group
            group = []
    if group:
        yield group


def _write_jsonl(
    f: IO[bytes], header: Sequence[str], kinds: list[int], rows: Iterable[Sequence[str]]
) -> int:
    import json

    keys = [json.dumps(c, ensure_ascii=False) + ":" for c in header]
    conv = _converters(kinds)
    dumps = json.dumps
    n = 0
    for group in _groups(rows):
        lines = []
        for row in group:
            cells = [
                k + ("null" if not v else dumps(c(v), ensure_ascii=False))
                for k, c, v in zip(keys, conv, row)
            ]
            lines.append("{" + ",".join(cells) + "}\n")
        # a name that is not UTF-8 keeps its bytes, as it does in a TSV OUT
        f.write("".join(lines).encode("utf-8", "surrogateescape"))
        n += len(group)
    return n


def _write_parquet(
    f: IO[bytes], header: Sequence[str], kinds: list[int], rows: Iterable[Sequence[str]]
) -> int:
    pa = _require_pyarrow()
    import pyarrow.parquet as pq

    arrow_type = {_INT: pa.int64(), _FLOAT: pa.float64()}
    types = [arrow_type.get(k, pa.string()) for k in kinds]
    schema = pa.schema(list(zip(header, types)))
    conv = _converters(kinds)
    n = 0
    with pq.ParquetWriter(f, schema) as w:
        for group in _groups(rows):
            cols = [
                pa.array([c(r[i]) if r[i] else None for r in group], type=t)
                for i, (c, t) in enumerate(zip(conv, types))
            ]
            w.write_table(pa.Table.from_arrays(cols, schema=schema))
            n += len(group)
        if n == 0:
            w.write_table(schema.empty_table())
    return n


def write_whole(
    path: str,
    fmt: str,
    header: Sequence[str],
    rows: Callable[[], Iterable[Sequence[str]]],
    force: bool = False,
) -> tuple[int, list[str]]:
    """Write ``header`` and the rows to ``path`` as ``fmt`` (jsonl or parquet), whole.

    ``rows()`` is called twice (types first, then the writing) and must give the same rows
    both times. Returns the rows written and the type of each column. ``force``: replace a
    file at ``path`` (atomically). Raises WriteError when the file cannot be written; nothing
    is then left under ``path``, or the file that was there is left as it was.
    """
    types = ColumnTypes(len(header))
    for row in rows():
        types.add(row)
    try:
        with whole_file(path, replace=force) as w:
            write = _write_parquet if fmt == "parquet" else _write_jsonl
            n = write(w.file, header, types.kinds, rows())
    except OSError as e:
        if isinstance(e, WriteError):
            raise
        raise WriteError(f"cannot write {path}: {e.strerror or e}", path=path) from e
    return n, types.names()


def export(
    out: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    temp_dir: str | None = None,
    force: bool = False,
    ledger: str | os.PathLike[str] | None = None,
    every: bool = False,
) -> int:
    """Write a consistent snapshot of OUT to ``dest`` (``.jsonl`` or ``.parquet``), whole,
    with the column types inferred; the number of rows written (``zotsink cat OUT -o
    FILE``). OUT's first line is its header (an OUT in lines format has one column,
    ``line``). Nothing is written under ``dest`` unless all of it is. An existing ``dest``
    is refused (UsageError) unless ``force``: then it is replaced atomically, and left as it
    was when the export fails. When ``zotsink run`` wrote OUT, the rows are its committed
    view (see :func:`zotsink.read_records`; ``ledger``, ``every`` as there).
    """
    from .._read import read_records
    from .spool import Spool

    src, path = os.fspath(out), os.fspath(dest)
    fmt = output_format(path)
    if fmt not in WHOLE:
        raise UsageError(
            f"{path}: cat -o writes .jsonl or .parquet; for a .{fmt} copy redirect stdout: "
            f"zotsink cat {src} > {path}"
        )
    check_whole_target(path, fmt, force)
    in_fmt = format_for(src)
    rows = read_records(src, format=in_fmt, lock=lock, timeout=timeout, ledger=ledger, every=every)
    header = ["line"] if in_fmt == "lines" else next(rows, None)
    if header is None:
        header = []
    # one snapshot, kept in a spool: the writer reads the rows twice (types, then values)
    spool = Spool(temp_dir)
    try:
        for n, row in enumerate(rows, 2):
            if len(row) != len(header):
                raise RecordError(
                    f"{src}: line {n} has {len(row)} fields where the header has "
                    f"{len(header)}; run `zotsink verify {src}`",
                    path=src,
                )
            spool.write((encode_row(row, "tsv") + "\n").encode("utf-8", "surrogateescape"))

        def spooled() -> Iterator[list[str]]:
            # every spooled row ends in a newline: no piece is left over
            for ln in split_lines(spool.chunks()):
                yield decode_row(ln.decode("utf-8", "surrogateescape"), "tsv")

        n, _types = write_whole(path, fmt, header, spooled, force)
    finally:
        spool.close()
    return n
