"""``zotsink cat ARCHIVE --list`` and ``zotsink cat ARCHIVE NAME`` check the index against
the archive, as the writers do: a stale, damaged, header-only or empty ``ARCHIVE.idx``
never hides a member that is there (the archive is the final word)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from zotsink._pack.index import HEADER

Run = Callable[..., subprocess.CompletedProcess[bytes]]


@pytest.fixture
def packed(tmp_path: Path, zotsink: Run) -> Path:
    """a.tar with members a, b and c, packed by three runs; ``old.idx``: the index after a."""
    for name in "abc":
        (tmp_path / name).write_bytes(name.encode() * 700)
    r = zotsink("pack", "a.tar", "a")
    assert r.returncode == 0, r.stderr
    shutil.copy(tmp_path / "a.tar.idx", tmp_path / "old.idx")
    r = zotsink("pack", "a.tar", "b", "c")
    assert r.returncode == 0, r.stderr
    return tmp_path


def names(listing: bytes) -> list[str]:
    return [line.split(b"\t")[2].decode() for line in listing.splitlines()[1:]]


def other_index(tmp_path: Path, zotsink: Run) -> bytes:
    (tmp_path / "z").write_bytes(b"z" * 3000)
    assert zotsink("pack", "other.tar", "z").returncode == 0
    return (tmp_path / "other.tar.idx").read_bytes()


@pytest.mark.parametrize("kind", ["stale", "garbage", "header only", "empty", "another's"])
def test_an_untrustworthy_index_hides_no_member(packed: Path, zotsink: Run, kind: str) -> None:
    idx = packed / "a.tar.idx"
    good = zotsink("cat", "a.tar", "--list")
    assert good.returncode == 0 and names(good.stdout) == ["a", "b", "c"], good.stderr
    idx.write_bytes(
        {
            "stale": (packed / "old.idx").read_bytes(),
            "garbage": b"\x00\x17 not an index\n\n",
            "header only": HEADER,
            "empty": b"",
            "another's": other_index(packed, zotsink) if kind == "another's" else b"",
        }[kind]
    )
    r = zotsink("cat", "a.tar", "--list")
    assert r.returncode == 0, r.stderr
    assert r.stdout == good.stdout  # the same rows, offsets and digests as a good index
    assert b"a.tar.idx" in r.stderr and b"verify --repair" in r.stderr, r.stderr
    for name in "abc":
        r = zotsink("cat", "a.tar", name)
        assert (r.returncode, r.stdout) == (0, name.encode() * 700), r.stderr


def test_a_good_index_is_used_without_a_word(packed: Path, zotsink: Run) -> None:
    r = zotsink("cat", "a.tar", "--list")
    assert r.returncode == 0 and names(r.stdout) == ["a", "b", "c"]
    assert r.stderr == b""
