"""The last cluster test: once every cluster is down, nothing of them is left on this host.

No daemon, FUSE client, node namespace or holder process; no mount; no bridge or veth;
no brick, chunk, Ceph store, controller state, pid file or admin socket. The collection
hook in conftest.py runs this module after every other cluster test; the fixture waits for
other pytest-xdist workers to drop their clusters too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

BASE = "/var/tmp/zotsink-cluster"
# what the scripts' processes carry in their command lines: state paths, mount points,
# the argv[0]/argv markers of the node and network-namespace holders
MARKERS = (BASE, "/mnt/zotsink-", "zotsink-node", "zotsink-moosefs-netns")
DAEMONS = {
    "glusterd",
    "glusterfsd",
    "glusterfs",
    "slurmctld",
    "slurmd",
    "slurmstepd",
    "mfsmaster",
    "mfschunkserver",
    "mfsmount",
    "sge_qmaster",
    "sge_execd",
    "sge_shepherd",
    "ceph-mon",
    "ceph-mgr",
    "ceph-osd",
    "ceph-mds",
    "ceph-fuse",
}


def our_processes() -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile
        if state == "Z" or int(pid) == os.getpid():
            continue
        # every cluster daemon counts (CI runs none of its own); others only when marked
        if comm in DAEMONS or any(m in cmdline for m in MARKERS):
            found.append(f"{pid} {comm}: {cmdline[:120]}")
    return found


def our_mounts() -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        rest = fields[fields.index("-") + 1 :]
        if (
            fields[4].startswith(("/mnt/zotsink-", BASE))
            or rest[0] in ("fuse.glusterfs", "fuse.ceph-fuse")
            or rest[1].startswith("mfs\\043")
        ):
            found.append(line)
    return found


def test_nothing_of_the_clusters_is_left_behind(clusters_down):
    assert our_processes() == []
    assert our_mounts() == []
    links = os.listdir("/sys/class/net")
    assert [n for n in links if n == "zsbr0" or n.startswith(("zsv-", "zsp-"))] == []
    # data and run state; logs and the lock files may stay for a post-mortem
    base = Path(BASE)
    leftovers = [
        str(p)
        for p in base.rglob("*")
        if p.name.endswith(".pid")
        or p.name.endswith(".asok")
        or re.search(r"/(gluster/brick|moosefs/data|ceph/data|slurm/ctld|slurm/spool)(/|$)", str(p))
        or (p.parent.name == "leases" and not p.name.startswith("."))
    ]
    assert leftovers == []
    assert not Path("/var/lib/glusterd/vols/zotsink").exists()
    # Grid Engine's execd spool per node (job scripts, active jobs) goes with sge.sh down
    assert [p.name for p in Path("/var/spool/gridengine/execd").glob("node*")] == []
    assert [p.name for p in Path("/mnt").glob("zotsink-*")] == []
    conf = Path("/etc/slurm/slurm.conf")
    assert not (conf.is_symlink() and os.readlink(conf).startswith(BASE))
