"""One contract, every lock kind: exclusion across processes, shared locks, fallback."""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from zotsink import ZotsinkWarning, append_record
from zotsink._core.locking import Locker
from zotsink.cli._common import exit_code
from zotsink.errors import LockError, LockTimeout, UsageError

KINDS = ["flock", "fcntl", "lockfile"]

HOLDER = r"""
import os, sys, time
from zotsink._core.locking import Locker
path, kind, shared = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
fd = os.open(path, os.O_RDWR | os.O_CREAT)
locker = Locker(kind, path)  # keep it: a collected soft lock releases itself
locker.acquire(fd, 5, shared=shared)
print("held", flush=True)
sys.stdin.readline()  # hold until told
"""


class Holder:
    """Another process holding a lock of one kind until released."""

    def __init__(self, path: Path, kind: str, shared: bool = False) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path), kind, "1" if shared else "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.p.stdout is not None
        assert self.p.stdout.readline() == "held\n"

    def release(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write("go\n")
        self.p.stdin.close()
        assert self.p.wait(10) == 0


def _fd(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT)


@pytest.mark.parametrize("kind", KINDS)
def test_lock_held_by_another_process_times_out_then_succeeds(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    h = Holder(out, kind)
    fd = _fd(out)
    try:
        locker = Locker(kind, str(out))
        t0 = time.monotonic()
        with pytest.raises(LockTimeout, match=r"still held by another writer after 0\.3 s"):
            locker.acquire(fd, 0.3)
        assert 0.3 <= time.monotonic() - t0 < 2.0
        h.release()
        assert locker.acquire(fd, 5) >= 0.0
        locker.release()
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["flock", "fcntl"])
def test_shared_locks_coexist_and_exclude_writers(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    h = Holder(out, kind, shared=True)
    fd = os.open(out, os.O_RDONLY)
    try:
        locker = Locker(kind, str(out))
        assert locker.acquire(fd, 1, shared=True) == 0.0  # readers share
        locker.release()
        wfd = _fd(out)
        with pytest.raises(LockTimeout):
            Locker(kind, str(out)).acquire(wfd, 0.2)  # a writer waits for readers
        os.close(wfd)
    finally:
        h.release()
        os.close(fd)


def test_flock_and_fcntl_do_not_see_each_other_on_local_disks(tmp_path: Path) -> None:
    # the reason --lock fcntl exists: lockf peers are invisible to flock on ext4/xfs/tmpfs
    out = tmp_path / "out"
    h = Holder(out, "fcntl")
    fd = _fd(out)
    try:
        assert Locker("flock", str(out)).acquire(fd, 0.1) == 0.0
    finally:
        h.release()
        os.close(fd)


def test_lockfile_marker_is_removed_after_release(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fd = _fd(out)
    locker = Locker("lockfile", str(out))
    locker.acquire(fd, 1)
    assert (tmp_path / "out.lock").exists()
    locker.release()
    assert not (tmp_path / "out.lock").exists()
    os.close(fd)


def _unsupported(*_a: object) -> None:
    raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))


def test_auto_falls_back_on_enolck_with_a_warning(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    monkeypatch.setattr(fcntl, "flock", _unsupported)
    fd = _fd(out)
    locker = Locker("auto", str(out))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        locker.acquire(fd, 1)
    locker.release()
    assert locker.kind == "fcntl"
    assert [str(x.message) for x in w if x.category is ZotsinkWarning] == [
        f"{out}: flock locks are not supported here (No locks available); using fcntl locks"
    ]
    os.close(fd)


def test_explicit_kind_does_not_fall_back(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(fcntl, "flock", _unsupported)
    fd = _fd(tmp_path / "out")
    with pytest.raises(LockError, match="flock locks do not work on this filesystem") as e:
        Locker("flock", str(tmp_path / "out")).acquire(fd, 1)
    assert e.value.errno == errno.ENOLCK and exit_code(e.value) == 74
    os.close(fd)


def test_other_lock_errors_are_not_mistaken_for_unsupported(tmp_path: Path, monkeypatch) -> None:
    def ebadf(*_a: object) -> None:
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(fcntl, "flock", ebadf)
    with pytest.raises(LockError, match="cannot take a flock lock: Bad file descriptor"):
        Locker("auto", str(tmp_path / "out")).acquire(5, 1)


def test_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown lock kind 'posix'"):
        Locker("posix", "x")


@pytest.mark.parametrize("err", [errno.ECANCELED, errno.EINTR])
def test_a_lock_attempt_refused_in_passing_is_retried_not_spilled(
    tmp_path: Path, monkeypatch, err: int
) -> None:
    # MooseFS answers flock with ECANCELED now and then; it cannot be made to on demand.
    real_flock = fcntl.flock
    refused: list[int] = []

    def flaky(fd: int, op: int) -> None:
        if op & fcntl.LOCK_EX and len(refused) < 3:
            refused.append(op)
            raise OSError(err, os.strerror(err))
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flaky)
    out = tmp_path / "out.txt"
    append_record(str(out), "one", timeout=30)
    assert len(refused) == 3
    assert out.read_bytes() == b"one\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # nothing spilled
