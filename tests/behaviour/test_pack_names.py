"""``zotsink pack`` refuses member names that tar could store but never extract: a path
component over 255 bytes, and a name that needs another member as a directory (``res``,
then ``res/x``, or the other way round). Nothing is appended; exit 2; the archive still
extracts with tar."""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from zotsink import UsageError, append_members

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def extract_all(archive: Path, dest: Path) -> list[str]:
    dest.mkdir()
    r = subprocess.run(["tar", "-xf", archive, "-C", dest], capture_output=True)
    assert r.returncode == 0, r.stderr
    return sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())


def test_a_component_over_255_bytes_is_refused(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "f").write_bytes(b"data")
    r = zotsink("pack", "a.tar", "f", "--name", "d/" + "n" * 256)
    assert r.returncode == 2, r.stderr
    assert b"256 bytes, over the 255" in r.stderr and b"--name" in r.stderr, r.stderr
    assert not (tmp_path / "a.tar").exists() or (tmp_path / "a.tar").stat().st_size == 0
    r = zotsink("pack", "a.tar", "f", "--name", "d/" + "n" * 255)
    assert r.returncode == 0, r.stderr
    assert extract_all(tmp_path / "a.tar", tmp_path / "x") == ["d/" + "n" * 255]


@pytest.mark.parametrize(
    ("first", "second"), [("res", "res/x"), ("res/x", "res"), ("a/b", "a/b/c/d")]
)
def test_a_name_that_needs_a_member_as_a_directory_is_refused(
    tmp_path: Path, zotsink: Run, first: str, second: str
) -> None:
    (tmp_path / "f").write_bytes(b"one")
    (tmp_path / "g").write_bytes(b"two")
    assert zotsink("pack", "a.tar", "f", "--name", first).returncode == 0
    size = (tmp_path / "a.tar").stat().st_size
    for extra in ([], ["--replace"]):
        r = zotsink("pack", "a.tar", "g", "--name", second, *extra)
        assert r.returncode == 2, r.stderr
        assert b"as a directory" in r.stderr and repr(second).encode() in r.stderr, r.stderr
    assert (tmp_path / "a.tar").stat().st_size == size
    assert list(tmp_path.glob("a.tar.spill.*")) == []
    assert extract_all(tmp_path / "a.tar", tmp_path / "x") == [first]


def test_both_in_one_call_are_refused(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    append_members(archive, {"keep": b"k"})
    size = archive.stat().st_size
    with pytest.raises(UsageError, match="'res/x' needs 'res' as a directory"):
        append_members(archive, {"res": b"one", "res/x": b"two"})
    assert archive.stat().st_size == size
    rows = append_members(archive, {"res/res": b"one", "res/x": b"two"})
    assert [r.name for r in rows] == ["res/res", "res/x"]
    with tarfile.open(archive) as t:
        assert t.getnames() == ["keep", "res/res", "res/x"]
