"""ARCHIVE.tar.idx: rows, escaping, torn rows, and the incremental cache of a writer."""

from __future__ import annotations

import os
from pathlib import Path

from zotsink._pack.index import HEADER, IndexCache, Row, format_rows, parse_index


def test_rows_round_trip_with_escapes() -> None:
    rows = [
        Row(0, 5, "a.bin", "ab" * 32, "2026-01-01T00:00:00.000000Z", "node1", "12", "3"),
        Row(2048, 0, "odd\\name", "cd" * 32, "", "host\twith\ttabs", "job\nline", "x\ry"),
    ]
    data = HEADER + format_rows(rows)
    assert data.count(b"\n") == 3  # one line per row, whatever the fields hold
    parsed, problems, end = parse_index(data)
    assert (parsed, problems, end) == (rows, [], len(data))


def test_a_torn_last_row_commits_nothing() -> None:
    data = HEADER + format_rows([Row(0, 1, "a", "00")]) + b"1024\t1\tb\t0"
    rows, problems, end = parse_index(data)
    assert [r.name for r in rows] == ["a"]
    assert end == len(data) - len(b"1024\t1\tb\t0")
    assert problems == [f"index ends in a torn row at byte {end} (10 bytes without a newline)"]


def test_malformed_rows_are_reported_by_byte_offset() -> None:
    data = HEADER + b"12\tx\n" + format_rows([Row(513, 1, "a", "00")])
    rows, problems, _ = parse_index(data)
    assert rows == []
    assert problems[0].startswith(f"index line at byte {len(HEADER)}: not a row")
    assert "offset or size out of range" in problems[1]  # 513 is off the 512-byte grid


def test_the_cache_reads_only_what_was_added_and_notices_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "a.tar.idx"
    path.write_bytes(HEADER + format_rows([Row(0, 1, "a", "00")]))
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    cache = IndexCache()
    cache.refresh(fd)
    assert list(cache.names) == ["a"]
    os.write(fd, format_rows([Row(1024, 1, "b", "00"), Row(2048, 1, "a", "11")]))
    cache.refresh(fd)
    assert [r.name for r in cache.rows] == ["a", "b", "a"]
    assert cache.rows[cache.names["a"]].sha256 == "11"  # the last row of a name
    os.close(fd)
    path.unlink()
    path.write_bytes(HEADER + format_rows([Row(0, 1, "z", "00")]))  # rebuilt: a new inode
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    cache.refresh(fd)
    assert [r.name for r in cache.rows] == ["z"] and "a" not in cache.names
    os.close(fd)


def test_reset_forgets_and_the_next_refresh_reads_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "a.tar.idx"
    path.write_bytes(HEADER + format_rows([Row(0, 1, "a", "00"), Row(1024, 1, "b", "00")]))
    fd = os.open(path, os.O_RDONLY)
    try:
        cache = IndexCache()
        size = cache.refresh(fd)
        cache.archive_end = (1, 2, 3)
        cache.reset()
        fresh = IndexCache()
        assert vars(cache) == vars(fresh)
        assert cache.refresh(fd) == size
        assert [r.name for r in cache.rows] == ["a", "b"]  # read once, not twice
        assert cache.consumed == size
    finally:
        os.close(fd)
