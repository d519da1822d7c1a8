"""The stream's whole-block primitives: each must give what the slow, obvious way gives."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zotsink._core import pump
from zotsink._core.blocks import BlockEncoder, Held
from zotsink._core.kv import kv_shaped
from zotsink._core.records import Encoder, count_newlines, uniform_fields


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


@pytest.mark.parametrize(
    ("line", "fmt", "shaped"),
    [
        (b"filename:img1.png min:1 max:9", "tsv", True),
        (b"a=1\tb=2", "tsv", True),
        (b"a:1,b:2", "csv", True),
        (b"a\tb\tc", "tsv", False),
        (b"filename:my image.jpg", "tsv", False),  # a word that is no key:value token
        (b"http://example.org/x", "tsv", False),
        (b"", "tsv", False),
    ],
)
def test_kv_shaped_is_every_field_a_key_value_token(line: bytes, fmt: str, shaped: bool) -> None:
    assert kv_shaped(line, fmt) is shaped


@pytest.mark.parametrize("limit", [1 << 20, 16])  # in memory, and in its temporary file
def test_held_drop_first_leaves_out_only_that_first_line(tmp_path, limit: int) -> None:
    held = Held(limit=limit, out=str(tmp_path / "out.tsv"))
    held.add(b"a\tb\n1\t2\n", 2)
    held.add(b"3\t4\n", 1)
    assert not held.drop_first(b"1\t2\n")  # not the first line
    assert held.drop_first(b"a\tb\n")
    assert not held.drop_first(b"1\t2\n")  # once only
    assert (held.size, held.count) == (8, 2)
    assert b"".join(held.chunks()) == b"1\t2\n3\t4\n"
    assert held.in_memory() in (None, b"1\t2\n3\t4\n")
    held.close()


def test_a_block_keeps_the_first_line_of_a_new_out_and_drops_its_repeats() -> None:
    enc = Encoder("tsv")
    enc.out_new = True
    blocks = BlockEncoder(enc.like(), None)
    data, _ = blocks.encode(b"a\tb\n1\t2\na\tb\n")
    assert bytes(data) == b"a\tb\n1\t2\n" and blocks.kept_header == b"a\tb\n"
    data, _ = blocks.encode(b"a\tb\n3\t4\n")
    assert bytes(data) == b"3\t4\n" and blocks.repeats == 2
    # OUT not new and its first line known: every copy of it goes
    enc = Encoder("tsv")
    enc.out_header = b"a\tb\n"
    blocks = BlockEncoder(enc.like(), None)
    data = blocks.encode(b"a\tb\n5\t6\n", bytearray(b"a\tb\n5\t6\n"), 0)[0]
    assert (bytes(data), blocks.repeats, blocks.kept_header) == (b"5\t6\n", 1, None)
