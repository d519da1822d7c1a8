"""pack on a real GlusterFS volume and on a CephFS: 4 writers on two client mounts (two
"nodes") append to one tar; a third mount reads it back with tar, bsdtar and tarfile, and
verify passes."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from zotsink._pack.verify import verify_archive

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

WORKERS = Path(__file__).resolve().parent.parent / "behaviour" / "pack_workers.py"
CALLS = 60  # per writer; two members each


def _settled(path: Path, timeout: float = 10.0) -> None:
    # another client may serve a stale size for up to the FUSE attribute timeout
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        size = path.stat().st_size
        if size == last:
            return
        last = size
        time.sleep(0.2)


@pytest.mark.skipif(shutil.which("bsdtar") is None, reason="bsdtar (libarchive-tools) missing")
@pytest.mark.parametrize("fs", ["gluster", "ceph"])
def test_four_writers_on_two_mounts_pack_every_member_whole(fs_dirs, cluster_report):
    node1, node2, reader = fs_dirs
    mounts = [node1, node1, node2, node2]
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKERS),
                "writer",
                str(m / "out.tar"),
                str(i),
                str(CALLS),
                str(i),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i, m in enumerate(mounts)
    ]
    acked: dict[str, str] = {}
    try:
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, err.decode()
            for line in out.decode().splitlines():
                name, digest = line.split()
                acked[name] = digest
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    took = time.monotonic() - t0
    assert len(acked) == 4 * CALLS * 2

    archive = reader / "out.tar"
    _settled(archive)
    for cmd in (["tar", "tf", str(archive)], ["bsdtar", "-tf", str(archive)]):
        listing = subprocess.run(cmd, capture_output=True, check=False)
        assert listing.returncode == 0 and listing.stderr == b"", listing.stderr.decode()
        assert sorted(listing.stdout.decode().splitlines()) == sorted(acked)
    with tarfile.open(archive) as tf:
        for m in tf.getmembers():
            data = tf.extractfile(m).read()  # type: ignore[union-attr]
            assert hashlib.sha256(data).hexdigest() == acked[m.name], m.name
    report = verify_archive(archive)
    assert report.problems == [] and report.indexed == len(acked)
    cluster_report(f"pack: {len(acked)} members from 4 writers on 2 mounts intact, {took:.1f} s")
