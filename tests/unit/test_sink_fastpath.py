"""Sink.write's fast path for str lines accepts, refuses and orders exactly like the encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zotsink import RecordError, Sink
from zotsink._core.records import Encoder

RECORDS: list[Any] = [
    "plain",
    "a\tb",
    "a\tb\tc",
    "ends in newline\n",
    "new\nline",
    "nul\0byte",
    "caf\u00e9\tx",
    "raw\udcffbyte\tx",
    "\ud800\tlone surrogate",
    "",
    "back\\slash\tx",
    b"bytes\tline",
    b"bytes\nnewline",
    ["v1", "v2"],
    ("t1", 2),
    ["only one"],
    "x" * 300 + "\ty",
]


def _expected(fmt: str, columns: list[str] | None) -> tuple[bytes, list[str], int]:
    """What the encoder alone makes of RECORDS: the bytes, the refusals, the count."""
    enc = Encoder(fmt, columns)
    data = enc.header_line() or b""
    errors: list[str] = []
    n = 0
    for r in RECORDS:
        try:
            data += enc.encode(r)
            n += 1
        except RecordError as e:
            errors.append(e.message)
    return data, errors, n


@pytest.mark.parametrize("fmt", ["lines", "tsv", "csv"])
@pytest.mark.parametrize("columns", [None, ["c1", "c2"]])
@pytest.mark.parametrize("batch_bytes", [1, 64, 65536])
def test_sink_writes_what_the_encoder_makes(
    tmp_path: Path, fmt: str, columns: list[str] | None, batch_bytes: int
) -> None:
    out = tmp_path / f"out.{fmt}"
    errors: list[str] = []
    with Sink(out, format=fmt, columns=columns, batch_bytes=batch_bytes) as s:
        for r in RECORDS:
            try:
                s.write(r)
            except RecordError as e:
                errors.append(e.message)
    data, want_errors, n = _expected(fmt, columns)
    assert out.read_bytes() == data
    assert errors == want_errors
    assert s.records_written == n


def test_a_refused_line_leaves_nothing_behind_and_order_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "out.tsv"
    with Sink(out, batch_bytes=1 << 20, flush_interval=3600) as s:
        s.write("first\t1")
        with pytest.raises(RecordError, match="newline inside"):
            s.write("bad\nline")
        s.write(["second", 2])  # through the encoder, between two fast-path lines
        s.write(b"third\t3")
        s.write("fourth\t4")
        assert not out.exists() or out.read_bytes() == b""  # all still buffered
        s.flush()
        assert s.records_written == 4
    assert out.read_bytes() == b"first\t1\nsecond\t2\nthird\t3\nfourth\t4\n"


def test_fast_path_counts_fields_once_a_mapping_sets_the_columns(tmp_path: Path) -> None:
    out = tmp_path / "out.tsv"
    with Sink(out) as s:
        s.write({"a": 1, "b": 2})  # fixes the header a, b
        s.write("3\t4")
        with pytest.raises(RecordError, match="3 fields where the header has 2"):
            s.write("5\t6\t7")
    assert out.read_bytes() == b"a\tb\n1\t2\n3\t4\n"
