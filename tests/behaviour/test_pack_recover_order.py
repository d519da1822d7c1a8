"""``zotsink recover ARCHIVE`` never lets an old spilled member win silently over a newer
member of the same name (tar extracts the last one): the spill tar is kept and named, with
the command that adds its member anyway; a spilled member newer than the archive's still
goes in last."""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Run = Callable[..., subprocess.CompletedProcess[bytes]]


@contextmanager
def held(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def spill_member(tmp_path: Path, zotsink: Run, data: bytes) -> Path:
    """Pack ``data`` as member m while the archive is locked: it lands in a spill tar."""
    (tmp_path / "f").write_bytes(data)
    with held(tmp_path / "a.tar"):
        r = zotsink("pack", "a.tar", "f", "--name", "m", "--replace", "--timeout", "0.5")
    assert r.returncode == 75, r.stderr
    (spill,) = tmp_path.glob("a.tar.spill.*")
    return spill


def pack(tmp_path: Path, zotsink: Run, data: bytes, *extra: str) -> None:
    (tmp_path / "f").write_bytes(data)
    r = zotsink("pack", "a.tar", "f", "--name", "m", *extra)
    assert r.returncode == 0, r.stderr


def test_an_old_spilled_member_does_not_win_over_a_newer_one(tmp_path: Path, zotsink: Run) -> None:
    pack(tmp_path, zotsink, b"first")
    spill = spill_member(tmp_path, zotsink, b"spilled")
    pack(tmp_path, zotsink, b"newest", "--replace")  # after the spill, by another task
    r = zotsink("recover", "a.tar")
    assert r.returncode == 1, r.stderr
    assert f"left {spill.name}".encode() in r.stderr or str(spill).encode() in r.stderr
    assert b"not newer than the member of the same name" in r.stderr, r.stderr
    assert b"--replace" in r.stderr and b"tar -xOf" in r.stderr
    assert spill.exists()  # nothing lost: the older data stays where it was
    r = zotsink("cat", "a.tar", "m")
    assert (r.returncode, r.stdout) == (0, b"newest"), r.stderr
    # what the message advises adds it as the newest
    tar = subprocess.run(["tar", "-xOf", spill, "m"], capture_output=True, check=True)
    r = zotsink("pack", "a.tar", "-", "--name", "m", "--replace", input=tar.stdout)
    assert r.returncode == 0, r.stderr
    assert zotsink("cat", "a.tar", "m").stdout == b"spilled"


def test_a_spilled_member_newer_than_the_archives_goes_in_last(
    tmp_path: Path, zotsink: Run
) -> None:
    pack(tmp_path, zotsink, b"first")
    spill = spill_member(tmp_path, zotsink, b"spilled")
    r = zotsink("recover", "a.tar")
    assert r.returncode == 0, r.stderr
    assert not spill.exists()
    assert zotsink("cat", "a.tar", "m").stdout == b"spilled"


def test_a_spilled_member_that_clashes_with_a_newer_one_is_kept(
    tmp_path: Path, zotsink: Run
) -> None:
    pack(tmp_path, zotsink, b"first")
    (tmp_path / "f").write_bytes(b"under res")
    with held(tmp_path / "a.tar"):
        r = zotsink("pack", "a.tar", "f", "--name", "res/x", "--timeout", "0.5")
    assert r.returncode == 75, r.stderr
    (spill,) = tmp_path.glob("a.tar.spill.*")
    (tmp_path / "f").write_bytes(b"a file res")
    assert zotsink("pack", "a.tar", "f", "--name", "res").returncode == 0
    r = zotsink("recover", "a.tar", "--timeout", "5")
    assert r.returncode == 1, r.stderr
    assert b"kept" in r.stderr and b"as a directory" in r.stderr, r.stderr
    assert spill.exists()
    assert zotsink("cat", "a.tar", "res").stdout == b"a file res"
