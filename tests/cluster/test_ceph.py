"""zotsink on a real CephFS: three ceph-fuse clients act as three nodes, and the metadata
server (MDS) grants their locks, as a Lustre MDS does.

Locks exclude across the mounts, flock and lockf each; a killed holder's lock is freed at
once; flock and lockf locks do not exclude each other (what ``zotsink doctor`` tells a
user); the doctor names CephFS and trusts its locks on every mount.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

# Takes an exclusive lock of kind argv[2] (flock or lockf) on argv[1], says so, releases
# it when told, then waits for stdin to close.
HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
lock = fcntl.flock if sys.argv[2] == "flock" else fcntl.lockf
lock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
lock(fd, fcntl.LOCK_UN)
print("released", flush=True)
sys.stdin.read()
"""


def start_holder(path: Path, kind: str) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout.readline() == b"locked\n"
    return holder


def try_lock(path: Path, kind: str) -> int:
    """0 if a non-blocking exclusive lock of ``kind`` was granted (and dropped), else errno."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if kind == "flock":
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return 0
    except OSError as exc:
        return exc.errno
    finally:
        os.close(fd)


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def mountinfo_entry(path: Path) -> tuple[str, str, str]:
    """(device, fstype, source) of the mount at ``path``."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(path):
            rest = fields[fields.index("-") + 1 :]
            return fields[2], rest[0], rest[1]
    raise AssertionError(f"{path} is not a mount point")


def test_three_separate_ceph_fuse_mounts(ceph_mounts):
    entries = [mountinfo_entry(m) for m in ceph_mounts]
    assert [(fstype, source) for _, fstype, source in entries] == [
        ("fuse.ceph-fuse", "ceph-fuse")
    ] * 3
    assert len({dev for dev, _, _ in entries}) == 3  # a client each


@pytest.mark.parametrize("kind", ["flock", "lockf"])
def test_lock_through_one_mount_excludes_the_others(ceph_dirs, kind):
    first, *others = (d / "locked" for d in ceph_dirs)
    holder = start_holder(first, kind)
    try:
        for path in others:
            assert try_lock(path, kind) in (errno.EAGAIN, errno.EACCES)
        holder.stdin.write(b"release\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == b"released\n"
        assert all(try_lock(path, kind) == 0 for path in others)
    finally:
        holder.stdin.close()
        holder.wait(timeout=20)
    assert holder.returncode == 0
    # a killed holder's lock goes with its process, not with its client's session
    holder = start_holder(first, kind)
    try:
        assert try_lock(others[0], kind) in (errno.EAGAIN, errno.EACCES)
    finally:
        holder.kill()
        holder.wait(timeout=20)
    assert wait_for(lambda: try_lock(others[0], kind) == 0, timeout=5)


def test_flock_and_lockf_do_not_exclude_each_other(ceph_dirs):
    # The MDS keeps the two kinds apart (unlike GlusterFS and NFS): a peer that takes the
    # other kind is not excluded, which the doctor says.
    holder = start_holder(ceph_dirs.node1 / "locked", "flock")
    try:
        assert try_lock(ceph_dirs.node2 / "locked", "flock") in (errno.EAGAIN, errno.EACCES)
        assert try_lock(ceph_dirs.node2 / "locked", "lockf") == 0
    finally:
        holder.stdin.close()
        holder.wait(timeout=20)


def test_doctor_names_cephfs_trusts_its_locks_and_fsyncs(ceph_dirs, zotsink_cmd):
    for d in ceph_dirs:
        res = subprocess.run(
            [*zotsink_cmd, "doctor", str(d), "--json"], capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
        report = json.loads(res.stdout)
        assert (report["fstype"], report["filesystem"], report["family"], report["fuse"]) == (
            "fuse.ceph-fuse",
            "CephFS, ceph-fuse client",
            "cluster",
            True,
        )
        assert report["source"] == "ceph-fuse"
        assert (report["locks"], report["lock"], report["sync"]) == ("coherent", "flock", "fsync")
        assert all(p["ok"] for p in report["probes"].values())
        assert (
            "zotsink: filesystem  fuse.ceph-fuse: CephFS, ceph-fuse client, a FUSE cluster"
            " filesystem" in res.stderr
        )
        assert (
            "zotsink: locks       coherent: ceph-fuse passes them to the Ceph metadata server"
            " (MDS), which grants them across clients" in res.stderr
        )
        assert "a lock taken with fcntl does not exclude one taken with flock" in res.stderr
        assert res.stderr.endswith("zotsink: verdict: zotsink can be trusted here\n")
    assert list(ceph_dirs.reader.iterdir()) == []  # the probe cleaned up after itself
