"""What one GlusterFS client knows about a file another client just appended to.

With the default client options a client reports a file's old size for up to about a
second after another client appended to it and fsynced, even to a process that holds the
lock: fstat, a new open, stat, statx with AT_STATX_FORCE_SYNC and an O_DIRECT read all
answer from the cache. O_APPEND writes still land at the true end on the server, so
records stay whole, but a writer must not take a decision on that size: whether OUT is
empty (and needs its header), or where to cut back after a failed write. Where the fsync
policy applies, the writer asks the server (fsync, then statx) before it decides.
"""

from __future__ import annotations

import os

import pytest
from settled import read_settled

from zotsink import append_record

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]


def test_a_client_reports_an_old_size_just_after_another_appended(gluster_dirs):
    path1, path2 = gluster_dirs.node1 / "out.txt", gluster_dirs.node2 / "out.txt"
    path1.touch()
    assert path2.stat().st_size == 0  # node2's client now caches the size 0
    with open(path1, "ab") as f:
        f.write(b"hello\n")
        f.flush()
        os.fsync(f.fileno())
    # Not a requirement on zotsink: the fact the test below depends on. If a GlusterFS
    # version stops caching, this fails and the test below proves nothing any more.
    assert path2.stat().st_size == 0


def test_first_records_through_two_clients_give_one_header(gluster_dirs):
    path1, path2 = gluster_dirs.node1 / "out.tsv", gluster_dirs.node2 / "out.tsv"
    path1.touch()
    assert path2.stat().st_size == 0  # node2's client caches the size 0
    append_record(path1, {"name": "first", "n": "1"})
    append_record(path2, {"name": "second", "n": "2"})
    want = b"name\tn\nfirst\t1\nsecond\t2\n"
    # node1 read what it wrote itself; through it, node2's record shows within a second
    assert read_settled(gluster_dirs.node1 / "out.tsv", len(want)) == want
