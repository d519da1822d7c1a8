"""``zotsink recover ARCHIVE.tar``: it takes only the archive's spill tars, never removes a
file named by mistake, never hangs on a FIFO, trusts no tar another user planted, and holds
each spill tar's lock from its read to its removal."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from realusers import User, make_users, needs_root, remove_tree, sticky_dir

Run = Callable[..., subprocess.CompletedProcess[bytes]]
HOST = os.uname().nodename

# Holds an exclusive flock on argv[1] until its stdin closes.
HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def _names(path: Path) -> list[str]:
    with tarfile.open(path) as tf:
        return tf.getnames()


@pytest.fixture
def archive(tmp_path: Path, zotsink: Run) -> Path:
    (tmp_path / "a.txt").write_bytes(b"alpha\n")
    (tmp_path / "b.txt").write_bytes(b"beta\n")
    r = zotsink("pack", "arch.tar", "a.txt", "b.txt", "--prefix", "")
    assert r.returncode == 0, r.stderr
    return tmp_path / "arch.tar"


def _spill_by_lock_timeout(tmp_path: Path, zotsink: Run, name: str) -> Path:
    """One member spilled: pack while the archive's lock is held elsewhere."""
    (tmp_path / name).write_bytes(name.encode() * 100)
    with open(tmp_path / "arch.tar", "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        r = zotsink("pack", "arch.tar", name, "--prefix", "", "--timeout", "0.2")
    assert r.returncode == 75, r.stderr
    (spill,) = tmp_path.glob("arch.tar.spill.*")
    return spill


def test_the_archive_named_as_its_own_spill_is_refused_and_kept(
    archive: Path, zotsink: Run
) -> None:
    before = archive.read_bytes()
    r = zotsink("recover", "arch.tar", "arch.tar")
    assert r.returncode == 2, r.stderr
    assert b"not spill tars of arch.tar: arch.tar (it is OUT itself)" in r.stderr
    assert archive.read_bytes() == before


def test_another_tar_named_by_mistake_is_neither_read_nor_removed(
    archive: Path, tmp_path: Path, zotsink: Run
) -> None:
    other = tmp_path / "inputs.tar"
    subprocess.run(["tar", "cf", str(other), "-C", str(tmp_path), "a.txt"], check=True)
    before, other_bytes = archive.read_bytes(), other.read_bytes()
    r = zotsink("recover", "arch.tar", "inputs.tar")
    assert r.returncode == 2, r.stderr
    assert b"inputs.tar (not named arch.tar.spill.<host>.<pid>)" in r.stderr
    assert other.read_bytes() == other_bytes and archive.read_bytes() == before


def test_a_fifo_named_as_a_spill_tar_is_left_without_hanging(
    archive: Path, tmp_path: Path, zotsink: Run
) -> None:
    fifo = tmp_path / f"arch.tar.spill.{HOST}.99"
    os.mkfifo(fifo)
    r = zotsink("recover", "arch.tar", fifo.name, timeout=20)
    assert r.returncode == 1, r.stderr
    assert f"left {fifo.name}: kept, it is not a regular file".encode() in r.stderr
    assert fifo.exists() and _names(archive) == ["a.txt", "b.txt"]


def test_a_fifo_at_the_index_name_hangs_neither_verify_nor_cat(
    archive: Path, tmp_path: Path, zotsink: Run
) -> None:
    """verify and cat --list used to open arch.tar.idx blocking: a FIFO there hung them."""
    idx = tmp_path / "arch.tar.idx"
    idx.unlink()
    os.mkfifo(idx)
    r = zotsink("verify", "arch.tar", timeout=20)
    assert r.returncode == 1, r.stderr
    assert (
        b"arch.tar.idx is a FIFO, not an index: `zotsink verify --repair` puts an index "
        b"rebuilt from the archive in its place" in r.stderr
    )
    r = zotsink("cat", "arch.tar", "--list", timeout=20)
    assert r.returncode == 0, r.stderr
    assert [line.split(b"\t")[2] for line in r.stdout.splitlines()[1:]] == [b"a.txt", b"b.txt"]
    assert b"arch.tar.idx is missing (or no regular file); walking the archive" in r.stderr
    r = zotsink("verify", "--repair", "arch.tar", timeout=20)
    assert r.returncode == 0, r.stderr
    assert idx.is_file() and not idx.is_fifo()
    assert zotsink("verify", "arch.tar", timeout=20).returncode == 0
    assert _names(archive) == ["a.txt", "b.txt"]


def test_a_link_named_as_a_spill_tar_is_not_followed(
    archive: Path, tmp_path: Path, zotsink: Run
) -> None:
    target = tmp_path / "elsewhere.tar"
    (tmp_path / "c.txt").write_bytes(b"gamma\n")
    subprocess.run(["tar", "cf", str(target), "-C", str(tmp_path), "c.txt"], check=True)
    link = tmp_path / f"arch.tar.spill.{HOST}.98"
    link.symlink_to(target)
    r = zotsink("recover", "arch.tar", link.name)
    assert r.returncode == 1, r.stderr
    assert b"kept, it is a symbolic link" in r.stderr
    assert link.is_symlink() and target.exists() and _names(archive) == ["a.txt", "b.txt"]


def test_a_spill_tar_is_taken_under_its_writers_lock(
    archive: Path, tmp_path: Path, zotsink: Run
) -> None:
    spill = _spill_by_lock_timeout(tmp_path, zotsink, "c.txt")
    held = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(spill)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert held.stdout is not None and held.stdout.readline() == b"held\n"
        # its writer holds it (it may be adding a batch): recover waits, then gives up
        r = zotsink("recover", "arch.tar", "--timeout", "0.3")
        assert r.returncode == 75, r.stderr
        assert spill.exists() and _names(archive) == ["a.txt", "b.txt"]
    finally:
        held.communicate(b"")
    r = zotsink("recover", "arch.tar")
    assert r.returncode == 0, r.stderr
    assert b"recovered 1 member from 1 spill tar" in r.stderr
    assert not spill.exists() and _names(archive) == ["a.txt", "b.txt", "c.txt"]


@pytest.fixture
def shared() -> Iterator[str]:
    d = sticky_dir()
    yield d
    remove_tree(d)


@needs_root
def test_a_spill_tar_planted_by_another_user_is_not_appended(shared: str) -> None:
    victim: User
    victim, attacker = make_users()
    r = victim.python(
        "open('a.txt', 'wb').write(b'alpha\\n'); open('evil.txt', 'wb').write(b'forged\\n')",
        cwd=shared,
    )
    assert r.returncode == 0, r.stderr
    assert victim.run("pack", "arch.tar", "a.txt", "--prefix", "", cwd=shared).returncode == 0
    planted = os.path.join(shared, "arch.tar.spill.node-b.99")
    r = attacker.python(
        "import sys, tarfile\nwith tarfile.open(sys.argv[1], 'w') as t: t.add('evil.txt')",
        planted,
        cwd=shared,
    )
    assert r.returncode == 0, r.stderr
    planted_bytes = Path(planted).read_bytes()
    for named in ((), (planted,)):
        r = victim.run("recover", "arch.tar", *named, cwd=shared)
        err = r.stderr.decode()
        assert r.returncode == 1, err
        assert planted in err or os.path.basename(planted) in err
        assert attacker.name in err and "Traceback" not in err
        assert _names(Path(shared) / "arch.tar") == ["a.txt"]
        assert Path(planted).read_bytes() == planted_bytes


def test_the_archive_its_index_and_its_spill_tars_are_never_packed_into_it(
    archive: Path, tmp_path: Path, zotsink: Run
) -> None:
    spill = _spill_by_lock_timeout(tmp_path, zotsink, "c.txt")
    before = archive.read_bytes()
    for name, why in (
        ("arch.tar", "arch.tar cannot be packed into itself"),
        ("./arch.tar.idx", "./arch.tar.idx is the index of arch.tar"),
        (spill.name, f"{spill.name} is a spill tar of arch.tar: `zotsink recover arch.tar`"),
    ):
        r = zotsink("pack", "arch.tar", "b.txt", name, "--prefix", "x/")
        assert r.returncode == 2, r.stderr
        assert f"{why}".encode() in r.stderr and b"nothing was appended" in r.stderr
        assert archive.read_bytes() == before
