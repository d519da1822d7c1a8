"""``zotsink verify``, ``cat`` and ``recover`` on a pack archive (ARCHIVE.tar).

These commands take either a record file or an archive: they hand a ``.tar`` (or a file
with an ``.idx`` beside it) to pack's functions.
"""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from zotsink import append_member, append_members

Run = Callable[..., subprocess.CompletedProcess[bytes]]


@pytest.fixture
def archive(tmp_path: Path, zotsink: Run) -> Path:
    path = tmp_path / "out.tar"
    append_members(path, {"k1.png": b"P" * 3000, "k1.json": b'{"k": 1}'})
    append_member(path, "k2.png", b"Q" * 10)
    if b"--list" not in zotsink("cat", "--help").stdout:
        pytest.skip("this build's `zotsink cat` does not dispatch to pack archives yet")
    return path


def test_verify_a_whole_archive_exits_0(archive: Path, zotsink: Run) -> None:
    r = zotsink("verify", archive)
    assert r.returncode == 0, r.stderr
    assert f"{archive}: 3 members, 3 index rows, {archive.stat().st_size} bytes: ok".encode() in (
        r.stderr
    )


def test_verify_names_the_offset_of_a_torn_tail_and_repair_cuts_it(
    archive: Path, zotsink: Run
) -> None:
    whole = archive.read_bytes()
    archive.write_bytes(whole + whole[:700])
    r = zotsink("verify", archive)
    assert r.returncode == 1
    assert f"offset {len(whole)}: torn member".encode() in r.stderr
    r = zotsink("verify", "--repair", archive)
    assert r.returncode == 0, r.stderr
    assert f"cut 700 bytes at offset {len(whole)}".encode() in r.stderr
    assert archive.read_bytes() == whole


def test_cat_prints_a_member_and_lists_them(archive: Path, zotsink: Run) -> None:
    r = zotsink("cat", archive, "k1.json")
    assert (r.returncode, r.stdout) == (0, b'{"k": 1}')
    r = zotsink("cat", archive, "--list")
    lines = r.stdout.decode().splitlines()
    assert r.returncode == 0 and lines[0].split("\t")[:3] == ["offset", "size", "name"]
    assert [ln.split("\t")[2] for ln in lines[1:]] == ["k1.png", "k1.json", "k2.png"]
    r = zotsink("cat", archive, "nope.png")
    assert r.returncode == 1 and b"has no member named 'nope.png'" in r.stderr


def test_recover_folds_a_spill_tar_back(archive: Path, zotsink: Run) -> None:
    with open(archive, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        r = zotsink("pack", archive, "--name", "k3.png", "-", "--timeout", "0.1", input=b"R")
    assert r.returncode == 75 and b".spill." in r.stderr
    r = zotsink("recover", archive)
    assert r.returncode == 0, r.stderr
    assert b"recovered 1 member from 1 spill tar" in r.stderr
    assert zotsink("cat", archive, "k3.png").stdout == b"R"
    assert zotsink("verify", archive).returncode == 0
