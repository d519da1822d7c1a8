"""Parsing one tiny file into records for collect, sniffing its format when asked.

A file is parsed whole or not at all: one bad line makes the whole file unparsable
(:class:`Unparsable`), so a source is either entirely in OUT or entirely skipped, which is
what ``--skip-collected`` and ``--remove-sources`` rely on. ``key:value`` lines are parsed by
:func:`zotsink._core.kv.parse_kv`, the parser ``append --kv`` uses; a file of one pair a line,
each key once, is one record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .._core.kv import parse_kv
from ..errors import RecordError

__all__ = ["ENDINGS", "INPUTS", "Unparsable", "parse", "sniff"]

#: Values of ``--input``.
INPUTS: Final = ("auto", "kv", "tsv", "csv", "jsonl", "lines")
#: File endings that decide the format before any sniffing.
ENDINGS: Final = {
    ".tsv": "tsv",
    ".tab": "tsv",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}

Rec = dict[str, str]
NUL: Final = b"\0"


class Unparsable(Exception):
    """A file collect cannot parse; ``reason`` says why (and at which line)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse(data: bytes, name: str, mode: str = "auto") -> tuple[str, list[Rec]]:
    """The format one file's bytes were read as (``mode``, or what sniffing found) and their
    records; ``name`` (its file name) helps the sniffing."""
    if b"\0" in data:
        raise Unparsable(f"binary (NUL byte at offset {data.find(NUL)})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unparsable(
            f"undecodable (not UTF-8: byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None
    if text[:1] == "\ufeff":
        text = text[1:]  # a byte-order mark from a Windows tool is not data
    if mode == "auto":
        mode, sep = _sniff(text, name)
        if mode == "kv":
            return mode, _kv(text, sep)
    elif mode == "kv":
        return mode, _kv(text, _sep(_first_token(text)))
    return mode, _PARSERS[mode](text)


def sniff(text: str, name: str) -> str:
    """The likely format of one file: by its ending, else by its first non-blank line."""
    return _sniff(text, name)[0]


def _first_token(text: str) -> str:
    first = text.lstrip() if text[:1].isspace() else text
    return first.split(None, 1)[0] if first else ""


def _sep(tok: str) -> str | None:
    """The separator of a key:value file, found as parse_kv finds it in a first token."""
    c, e = tok.find(":"), tok.find("=")
    return ":" if c > 0 and (e <= 0 or c < e) else "=" if e > 0 else None


def _sniff(text: str, name: str) -> tuple[str, str | None]:
    dot = name.rfind(".")
    fmt = ENDINGS.get(name[dot:].lower()) if dot >= 0 else None
    if fmt is not None:
        return fmt, None
    first = text.lstrip() if text[:1].isspace() else text
    if first[:1] in ("{", "["):
        return "jsonl", None
    sep = _sep(first.split(None, 1)[0] if first else "")
    if sep is not None:
        return "kv", sep
    nl = first.find("\n")
    if nl >= 0:
        first = first[:nl]
    if "\t" in first:
        return "tsv", None
    if "," in first:
        return "csv", None
    return "lines", None


def _kv(text: str, sep: str | None) -> list[Rec]:
    """Records of ``key:value`` lines; one separator for the whole file."""
    if "\n" not in text:  # the usual tiny file: one line, often without its newline
        try:
            rec = parse_kv(text, sep)
        except RecordError as err:
            raise Unparsable(err.message) from None
        return [rec] if rec else []
    out: list[Rec] = []
    for n, line in enumerate(text.split("\n"), 1):
        try:
            rec = parse_kv(line, sep)  # CR is whitespace to it: CRLF needs nothing more
        except RecordError as err:
            raise Unparsable(f"line {n}: {err.message}") from None
        if rec:
            out.append(rec)
    return _one_pair_a_line(out)


def _one_pair_a_line(recs: list[Rec]) -> list[Rec]:
    """A file of one ``key: value`` pair a line, each key once (``filename: x.png``, then
    ``min: 1``...), is one record: its lines name the fields of one result, and taken as a
    record each they would make rows of one cell, which other files repeat."""
    if len(recs) < 2 or any(len(r) != 1 for r in recs):
        return recs
    merged: Rec = {}
    for r in recs:
        merged.update(r)
    return [merged] if len(merged) == len(recs) else recs


def _header(cells: list[str], n: int) -> list[str]:
    if any(not c for c in cells):
        raise Unparsable(f"line {n}: the header has an empty column name")
    if len(set(cells)) != len(cells):
        dup = next(c for c in cells if cells.count(c) > 1)
        raise Unparsable(f"line {n}: the header names {dup!r} twice")
    return cells


def _rows(rows: Any) -> list[Rec]:
    """Records from (line number, cells) pairs whose first non-blank one is the header."""
    header: list[str] | None = None
    out: list[Rec] = []
    for n, cells in rows:
        if header is None:
            header = _header(cells, n)
        elif len(cells) != len(header):
            raise Unparsable(f"line {n}: {len(cells)} fields where the header has {len(header)}")
        else:
            out.append(dict(zip(header, cells)))
    return out


def _tsv(text: str) -> list[Rec]:
    def rows() -> Any:
        for n, line in enumerate(text.split("\n"), 1):
            if line.endswith("\r"):
                line = line[:-1]
            if line.strip():
                # values are taken literally, as tools that write plain TSV mean them
                yield n, line.split("\t")

    return _rows(rows())


def _csv(text: str) -> list[Rec]:
    import csv
    import io

    reader = csv.reader(io.StringIO(text, newline=""), strict=True)

    def rows() -> Any:
        try:
            for cells in reader:
                if any(cells):
                    yield reader.line_num, cells
        except csv.Error as e:
            raise Unparsable(f"line {reader.line_num}: {e}") from None

    return _rows(rows())


def _json_text(value: Any) -> str:
    import json

    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json_record(obj: Any, where: str) -> Rec:
    if not isinstance(obj, dict):
        raise Unparsable(f"{where}: a JSON {type(obj).__name__} where an object was expected")
    if "" in obj:
        raise Unparsable(f"{where}: an empty JSON key cannot name a column")
    return {k: _json_text(v) for k, v in obj.items()}


def _jsonl(text: str) -> list[Rec]:
    import json

    out: list[Rec] = []
    lines = text.split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            if not out:
                return _json_document(text, f"line {n}: not JSON ({e})")
            raise Unparsable(f"line {n}: not JSON ({e})") from None
        if isinstance(obj, list) and not out and len(lines) == 1:
            return _json_document(text, "")
        rec = _json_record(obj, f"line {n}")
        if rec:
            out.append(rec)
    return out


def _json_document(text: str, line_error: str) -> list[Rec]:
    """A whole-file JSON object or array of objects (a ``.json`` file, pretty-printed)."""
    import json

    try:
        doc = json.loads(text)
    except ValueError:
        raise Unparsable(line_error or "not JSON") from None
    items = doc if isinstance(doc, list) else [doc]
    out = [_json_record(obj, f"item {i}") for i, obj in enumerate(items, 1)]
    return [r for r in out if r]


def _lines(text: str) -> list[Rec]:
    return [{"line": ln[:-1] if ln.endswith("\r") else ln} for ln in text.split("\n") if ln.strip()]


_PARSERS: Final[dict[str, Callable[[str], list[Rec]]]] = {
    "tsv": _tsv,
    "csv": _csv,
    "jsonl": _jsonl,
    "lines": _lines,
}
