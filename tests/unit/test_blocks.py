"""The stream's whole-block primitives: each must give what the slow, obvious way gives."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zotsink._core import pump
from zotsink._core.records import count_newlines, uniform_fields


def _block(lengths: list[int], fill: bytes) -> bytes:
    return b"".join(fill * n + b"\n" for n in lengths)


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), max_size=200),
    fill=st.sampled_from([b"x", b"ab", b"\t"]),
    cut=st.tuples(st.integers(0, 70000), st.integers(0, 70000)),
)
def test_count_newlines_is_bytes_count_for_any_source_and_range(
    lengths: list[int], fill: bytes, cut: tuple[int, int]
) -> None:
    data = _block(lengths, fill) + b"tail without newline"
    at, end = sorted(min(c, len(data)) for c in cut)
    want = data.count(b"\n", at, end)
    assert count_newlines(data, at, end) == want
    assert count_newlines(bytearray(data), at, end) == want
    assert count_newlines(memoryview(data), at, end) == want
    assert count_newlines(data) == data.count(b"\n")


@pytest.mark.parametrize("line", [1, 8, 31, 32, 33, 88, 5000])
def test_count_newlines_takes_either_method_by_line_length(line: int) -> None:
    # Over 4 KiB, short lines are counted byte by byte and long ones by deleting the
    # newlines: both must count the same, at the edge between them too.
    data = _block([line - 1] * (200_000 // line), b"y")
    assert len(data) > 4096
    assert count_newlines(data) == 200_000 // line
    assert count_newlines(data, 3, len(data) - 3) == data.count(b"\n", 3, len(data) - 3)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.lists(st.sampled_from(["", "a", "bc", "x y"]), min_size=1, max_size=5)),
    k=st.integers(1, 5),
)
def test_uniform_fields_counts_lines_only_when_every_line_has_k_fields(
    rows: list[list[str]], k: int
) -> None:
    data = b"".join("\t".join(r).encode() + b"\n" for r in rows)
    want = len(rows) if all(len(r) == k for r in rows) else -1
    pad = b"junk\t\t\n"
    for src in (data, bytearray(pad + data + pad), memoryview(pad + data)):
        at = 0 if src is data else len(pad)
        assert uniform_fields(src, b"\t", k, at, at + len(data)) == want


def test_pad_heap_asks_glibc_and_nothing_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        glibc = bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        glibc = False
    assert pump.pad_heap(1 << 20) is glibc
    # musl and the BSDs have no such confstr name (or give None): no ctypes, no mallopt
    monkeypatch.setattr(os, "confstr", lambda name: None)
    assert pump.pad_heap(1 << 20) is False

    def refuse(name: str) -> str:
        raise ValueError(name)

    monkeypatch.setattr(os, "confstr", refuse)
    assert pump.pad_heap(1 << 20) is False
