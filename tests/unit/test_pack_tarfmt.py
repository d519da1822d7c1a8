"""The tar grid as pack writes and walks it."""

from __future__ import annotations

import io
import tarfile

import pytest

from zotsink._pack import tarfmt
from zotsink._pack.tarfmt import BLOCK, TarDamage


def _reader(data: bytes) -> tarfmt.Reader:
    return lambda offset, length: data[offset : offset + length]


def _two() -> tuple[bytes, bytes]:
    a = tarfmt.build_member("a/one.bin", b"x" * 700, mtime=1_700_000_000, comment="zotsink k=v")
    b = tarfmt.build_member("b" * 150 + "/é.png", b"\x00\xff" * 300, mtime=5, mode=0o600)
    return a, b


def test_members_are_on_the_grid_and_tarfile_reads_them() -> None:
    a, b = _two()
    assert len(a) % BLOCK == 0 and len(b) % BLOCK == 0
    with tarfile.open(fileobj=io.BytesIO(a + b)) as tf:
        members = tf.getmembers()
        assert [m.name for m in members] == ["a/one.bin", "b" * 150 + "/é.png"]
        assert tf.extractfile(members[1]).read() == b"\x00\xff" * 300  # type: ignore[union-attr]
        assert members[1].mode == 0o600 and members[0].mtime == 1_700_000_000
        assert members[0].pax_headers["comment"] == "zotsink k=v"


def test_walk_finds_offsets_names_and_sizes() -> None:
    a, b = _two()
    found = list(tarfmt.walk(_reader(a + b), 0, len(a + b)))
    assert [(m.offset, m.name, m.size) for m in found] == [
        (0, "a/one.bin", 700),
        (len(a), "b" * 150 + "/é.png", 600),
    ]
    assert found[0].end == len(a) and found[1].end == len(a + b)
    assert (a + b)[found[0].data_offset : found[0].data_offset + 700] == b"x" * 700
    assert found[1].mode == 0o600


@pytest.mark.parametrize("keep", [1, 100, BLOCK, BLOCK + 1, 2 * BLOCK, -1])
def test_a_member_cut_anywhere_is_a_torn_tail_at_its_start(keep: int) -> None:
    a, b = _two()
    cut = a + b[: keep if keep > 0 else len(b) + keep]
    with pytest.raises(TarDamage) as e:
        list(tarfmt.walk(_reader(cut), 0, len(cut)))
    assert e.value.offset == len(a) and e.value.tail


def test_every_cut_point_is_found() -> None:
    a, b = _two()
    whole = a + b
    for size in range(len(a) + 1, len(whole)):
        with pytest.raises(TarDamage) as e:
            list(tarfmt.walk(_reader(whole[:size]), 0, size))
        assert (e.value.offset, e.value.tail) == (len(a), True), size


def test_a_broken_header_is_damage_not_a_tail() -> None:
    a, b = _two()
    bad = bytearray(a + b)
    bad[len(a) + 10] ^= 0x01  # a name byte of b's first header: the checksum no longer fits
    with pytest.raises(TarDamage, match="checksum") as e:
        list(tarfmt.walk(_reader(bytes(bad)), 0, len(bad)))
    assert not e.value.tail and e.value.offset == len(a)


def test_zero_blocks_end_the_archive_only_at_its_end() -> None:
    a, b = _two()
    sealed = a + b + bytes(2 * BLOCK)
    assert len(list(tarfmt.walk(_reader(sealed), 0, len(sealed)))) == 2
    middle = a + bytes(2 * BLOCK) + b
    with pytest.raises(TarDamage, match="zero blocks in the middle"):
        list(tarfmt.walk(_reader(middle), 0, len(middle)))


def test_garbage_is_not_a_header() -> None:
    a, _b = _two()
    junk = a + b"hello world\n" * 100
    with pytest.raises(TarDamage, match="no ustar magic") as e:
        list(tarfmt.walk(_reader(junk), 0, len(junk)))
    assert not e.value.tail


def test_old_signed_checksums_are_accepted() -> None:
    head = bytearray(tarfmt.build_member("é", b"", mtime=0)[-BLOCK:])  # the ustar header
    head[100:108] = b"\xff" * 8  # bytes over 127 make signed and unsigned sums differ
    rest = head[:148] + head[156:]
    signed = sum(rest) + 8 * 32 - 256 * sum(1 for c in rest if c & 0x80)
    assert signed != sum(rest) + 8 * 32
    head[148:156] = b"%06o\0 " % signed
    assert tarfmt._checksum_ok(bytes(head))
    head[148:156] = b"%06o\0 " % (signed + 1)
    assert not tarfmt._checksum_ok(bytes(head))


@pytest.mark.parametrize("value", ["plain", "with space", "50%", "a=b", ""])
def test_comment_fields_round_trip(value: str) -> None:
    comment = tarfmt.make_comment({"sha256": "ab", "host": value})
    assert tarfmt.parse_comment(comment) == {"sha256": "ab", "host": value}
    assert tarfmt.parse_comment("someone else's comment") == {}
