"""zotsink doctor on real mounts: the GlusterFS volume, a local directory, and a FUSE
passthrough (bindfs) that keeps locks in the local kernel."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

# the lock scripts/cluster/lib.sh queues apt-get runs on
APT_LOCK = Path("/var/tmp/zotsink-cluster/apt.lock")

HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


def unavailable(reason: str, report=None) -> None:
    if os.environ.get("ZOTSINK_CLUSTER_REQUIRED") == "1":
        pytest.fail(f"{reason} (ZOTSINK_CLUSTER_REQUIRED=1)", pytrace=False)
    if report is not None:
        report(f"skipped: {reason}")  # shown in the summary without -rs
    pytest.skip(reason)


def doctor(zotsink_cmd: list[str], directory: Path | str, *args: str) -> tuple[int, dict, str]:
    r = subprocess.run(
        [*zotsink_cmd, "doctor", "--json", *args, str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout), r.stderr


def test_doctor_on_the_gluster_mounts(gluster_dirs, zotsink_cmd):
    for d in gluster_dirs:
        rc, report, err = doctor(zotsink_cmd, d)
        assert rc == 0, err
        assert (report["fstype"], report["family"], report["fuse"]) == (
            "fuse.glusterfs",
            "cluster",
            True,
        )
        assert (report["locks"], report["lock"], report["sync"]) == ("coherent", "flock", "fsync")
        assert all(p["ok"] for p in report["probes"].values())
        assert "zotsink: filesystem  fuse.glusterfs: GlusterFS, a FUSE cluster filesystem" in err
        assert "zotsink: locks       coherent: GlusterFS passes them to its servers" in err
        assert "zotsink: sync auto = fsync: " in err
        assert err.endswith("zotsink: verdict: zotsink can be trusted here\n")
    assert list(gluster_dirs.reader.iterdir()) == []  # the probe cleaned up after itself


def test_doctor_on_tmp_reports_a_local_filesystem(zotsink_cmd):
    rc, report, err = doctor(zotsink_cmd, "/tmp")
    assert rc == 0, err
    assert (report["family"], report["locks"], report["sync"]) == ("local", "coherent", "none")
    assert "a local filesystem" in err and "only processes on this host" in err


def _install_bindfs(report) -> None:
    if shutil.which("bindfs"):
        return
    if os.getuid() != 0:
        unavailable("bindfs is not installed, and installing it needs root", report)
    APT_LOCK.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    apt = ["apt-get", "-q", "-o", "DPkg::Lock::Timeout=300"]
    install = [*apt, "install", "-y", "--no-install-recommends", "bindfs"]
    with open(APT_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # gluster.sh and slurm.sh may be installing
        r = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:  # stale package lists: refresh once
            subprocess.run([*apt, "update"], env=env, capture_output=True, timeout=600)
            r = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not shutil.which("bindfs"):
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        unavailable(f"cannot install bindfs with apt-get: {last}", report)


def _fstype_at(path: Path) -> str | None:
    """The type of the topmost mount exactly at ``path``, None if nothing is mounted there."""
    found = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if left.split()[4] == str(path):
            found = right.split()[0]
    return found


@pytest.fixture
def bindfs_mount(tmp_path: Path, cluster_report) -> Iterator[tuple[Path, Path]]:
    """(source, mount point): a bindfs view of a local directory, without lock forwarding."""
    if not os.path.exists("/dev/fuse"):
        unavailable("no /dev/fuse on this machine", cluster_report)
    _install_bindfs(cluster_report)
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    log = open(tmp_path / "bindfs.log", "w+")  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(
        ["bindfs", "-f", str(src), str(mnt)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 20
        # bindfs (libfuse 2) mounts as plain "fuse", without a subtype
        while _fstype_at(mnt) not in ("fuse", "fuse.bindfs"):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                unavailable(
                    f"bindfs did not mount (exit {proc.poll()}): {log.read().strip()}",
                    cluster_report,
                )
            time.sleep(0.05)
        yield src, mnt
    finally:
        if (
            _fstype_at(mnt) is not None
            and subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0
        ):
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        assert _fstype_at(mnt) is None, f"{mnt} is still mounted"


def test_doctor_warns_on_a_fuse_mount_without_lock_forwarding(bindfs_mount, zotsink_cmd):
    src, mnt = bindfs_mount
    rc, report, err = doctor(zotsink_cmd, mnt)
    assert rc == 1, err
    assert report["fstype"] in ("fuse", "fuse.bindfs")
    assert (report["fuse"], report["family"], report["locks"], report["ok"]) == (
        True,
        "fuse",
        "node-local",
        False,
    )
    assert "zotsink: warning: flock locks: " in err and "keeps locks in this host's kernel" in err
    assert (
        "zotsink: verdict: zotsink cannot be trusted here: flock locks here are node-local" in err
    )
    # and that is so: a lock on the file through the source does not exclude the mount
    (src / "out.txt").touch()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(src / "out.txt")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"locked\n"
        fd = os.open(mnt / "out.txt", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # would raise if excluded
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        holder.stdin.close()
        holder.wait(timeout=20)
        holder.stdout.close()
    # OUT.lock marker files are the same files on both sides: that choice is trusted
    rc, report, err = doctor(zotsink_cmd, mnt, "--lock", "lockfile")
    assert (rc, report["lock"], report["locks"]) == (0, "lockfile", "marker"), err
