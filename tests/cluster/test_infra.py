"""Smoke tests of the cluster test infrastructure: the GlusterFS mounts behave like
separate nodes of one shared file system, and the Slurm cluster runs job arrays."""

from __future__ import annotations

import collections
import errno
import fcntl
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "cluster"

# Takes an exclusive flock on argv[1], says so, releases it when told, then waits
# for stdin to close.
HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
fcntl.flock(fd, fcntl.LOCK_UN)
print("released", flush=True)
sys.stdin.read()
"""

# One Slurm array task: append one line to the shared file through one of the two
# writer mounts (chosen by task parity), under flock, fsynced before the unlock.
ARRAY_TASK = r"""
import fcntl, os, sys
task = int(os.environ["SLURM_ARRAY_TASK_ID"])
node = 1 + task % 2
line = "%s\t%d\t%d\n" % (os.environ["SLURM_ARRAY_JOB_ID"], task, node)
fd = os.open(sys.argv[node], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, line.encode())
os.fsync(fd)
fcntl.flock(fd, fcntl.LOCK_UN)
os.close(fd)
"""


def wait_for(predicate, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def read_line(proc: subprocess.Popen, timeout: float = 20.0) -> bytes:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError(f"no output from pid {proc.pid} within {timeout} s")
    return proc.stdout.readline().strip()


def try_flock(path: Path) -> int:
    """0 if an exclusive non-blocking flock on path was taken (and dropped), else the errno."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Unlock explicitly: on FUSE the unlock done by close() travels with the
        # asynchronous RELEASE, so the lock can still be held a moment after close().
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError as exc:
        return exc.errno
    finally:
        os.close(fd)
    return 0


def start_holder(path: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,
    )
    assert read_line(proc) == b"locked"
    return proc


def mountinfo_entry(path: Path) -> tuple[str, str]:
    """(device major:minor, fs type) of the mount exactly at path."""
    found = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(path):
            found = (fields[2], fields[fields.index("-") + 1])
    assert found, f"{path} is not a mount point"
    return found


def test_three_separate_glusterfs_mounts(gluster_mounts):
    entries = [mountinfo_entry(m) for m in gluster_mounts]
    assert [fstype for _, fstype in entries] == ["fuse.glusterfs"] * 3
    # one FUSE connection (device) per mount = one glusterfs client process per mount
    assert len({dev for dev, _ in entries}) == 3


def test_volume_keeps_write_behind_on(gluster_mounts):
    # The product's durability promise is tested against this default; it must not be
    # switched off by the test setup.
    res = subprocess.run(
        ["bash", str(SCRIPTS / "gluster.sh"), "status"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"^performance\.write-behind\s+on\b", res.stdout, re.M), res.stdout


def test_file_written_through_one_mount_reads_back_through_the_others(gluster_dirs):
    data = b"".join(b"line %d written through node1\n" % i for i in range(1000))
    with open(gluster_dirs.node1 / "shared.txt", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    for path in (gluster_dirs.node2 / "shared.txt", gluster_dirs.reader / "shared.txt"):
        got = wait_for(lambda p=path: p.exists() and p.read_bytes() == data and p.read_bytes())
        assert got == data, f"{path}: {len(got or b'')} of {len(data)} bytes"


def test_flock_through_one_mount_excludes_the_others(gluster_dirs):
    holder = start_holder(gluster_dirs.node1 / "locked")
    try:
        assert try_flock(gluster_dirs.node2 / "locked") == errno.EWOULDBLOCK
        assert try_flock(gluster_dirs.reader / "locked") == errno.EWOULDBLOCK
        holder.stdin.write(b"release\n")
        assert read_line(holder) == b"released"
        # the unlock has returned in the holder, so it has reached the brick
        assert try_flock(gluster_dirs.node2 / "locked") == 0
        assert try_flock(gluster_dirs.reader / "locked") == 0
    finally:
        holder.stdin.close()
        holder.wait(timeout=20)
    assert holder.returncode == 0


def test_flock_is_freed_when_its_holder_is_killed(gluster_dirs):
    holder = start_holder(gluster_dirs.node1 / "locked")
    try:
        assert try_flock(gluster_dirs.node2 / "locked") == errno.EWOULDBLOCK
    finally:
        holder.kill()
        holder.wait(timeout=20)
    # the client sends the release when the killed process's descriptor is closed
    assert wait_for(lambda: try_flock(gluster_dirs.node2 / "locked") == 0, timeout=5)


def test_slurm_up_prints_the_lines_to_eval(slurm_cluster):
    # `eval "$(slurm.sh up)"` points this shell and the commands it starts at the cluster
    script = f'eval "$(bash {SCRIPTS / "slurm.sh"} up 2>/dev/null)"; bash -c \'echo "$SLURM_CONF"\''
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    res = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(slurm_cluster.conf)


def test_slurm_array_tasks_append_one_line_each(gluster_dirs, slurm_cluster, tmp_path):
    n = 5
    task = tmp_path / "task.py"
    task.write_text(ARRAY_TASK)
    node1_out, node2_out = gluster_dirs.node1 / "out.tsv", gluster_dirs.node2 / "out.tsv"
    # The tasks open with O_CREAT and no retry; two nodes creating it at the same moment
    # may be answered EEXIST by GlusterFS (what zotsink's own open retries): create it first.
    node1_out.touch()
    t0 = time.monotonic()
    res = slurm_cluster.run(
        "sbatch",
        "--wait",
        "--parsable",
        f"--array=1-{n}",
        f"--chdir={tmp_path}",
        f"--output={tmp_path}/slurm-%A_%a.out",
        f"--wrap={sys.executable} {task} {node1_out} {node2_out}",
        timeout=180,
        check=False,
    )
    took = time.monotonic() - t0
    logs = "".join(p.read_text() for p in sorted(tmp_path.glob("slurm-*.out")))
    assert res.returncode == 0, f"sbatch exited {res.returncode}: {res.stderr}\n{logs}"
    job_id = res.stdout.strip().split(";")[0]
    assert job_id.isdigit(), res.stdout

    out = gluster_dirs.reader / "out.tsv"

    def complete():
        lines = out.read_text().splitlines() if out.exists() else []
        return lines if len(lines) >= n else None

    lines = wait_for(complete)
    content = out.read_text() if out.exists() else "no file"
    assert lines, f"{out} has {content!r} after {took:.1f} s\n{logs}"
    rows = sorted((line.split("\t") for line in lines), key=lambda r: int(r[1]))
    assert rows == [[job_id, str(t), str(1 + t % 2)] for t in range(1, n + 1)], lines
    assert out.read_bytes().endswith(b"\n")


# One array task: a zotsink record naming the task's node and the device of the
# shared filesystem's mount it writes through (read from mountinfo inside the job). No --columns:
# this test is about the nodes, not about the header (see test_slurm.py for that).
NODE_TASK = r"""
import os, subprocess, sys
out, mount = sys.argv[1], sys.argv[2]
dev = next(ln.split()[2] for ln in open("/proc/self/mountinfo") if ln.split()[4] == mount)
rec = "%s\t%s\t%s\n" % (os.environ["SLURMD_NODENAME"], dev, os.environ["SLURM_ARRAY_TASK_ID"])
cmd = [sys.executable, "-m", "zotsink", "--stamp", "host", out]
sys.exit(subprocess.run(cmd, input=rec.encode()).returncode)
"""


@pytest.fixture(params=["gluster", "moosefs", "ceph"])
def shared_fs(request: pytest.FixtureRequest, slurm_cluster) -> tuple[Path, Path, tuple[Path, ...]]:
    """(where the nodes write, a mount that reads it back, the host's mounts) on each
    shared filesystem. MooseFS and CephFS come up after the Slurm nodes here: they mount
    themselves in them, which is what this test shows for them."""
    dirs = request.getfixturevalue(f"{request.param}_dirs")
    mounts = request.getfixturevalue(f"{request.param}_mounts")
    return dirs.node1, dirs[-1], tuple(mounts)  # the reader; MooseFS's node2


def test_array_runs_on_three_nodes_each_with_its_own_client(
    shared_fs, slurm_cluster, tmp_path, cluster_report
):
    n = 60
    written, reader, mounts = shared_fs
    task = tmp_path / "task.py"
    task.write_text(NODE_TASK)
    out = written / "out.txt"
    t0 = time.monotonic()
    res = slurm_cluster.run(
        "sbatch",
        "--wait",
        "--parsable",
        f"--array=1-{n}",
        f"--output={tmp_path}/slurm-%A_%a.out",
        f"--wrap={sys.executable} {task} {out} {mounts[0]}",
        timeout=300,
        check=False,
    )
    took = time.monotonic() - t0
    logs = "".join(p.read_text() for p in sorted(tmp_path.glob("slurm-*.out")))
    assert res.returncode == 0, f"sbatch exited {res.returncode}: {res.stderr}\n{logs}"
    path = reader / "out.txt"
    lines = wait_for(lambda: len(path.read_text().splitlines()) == n and path.read_text())
    assert lines, f"{path}: {path.read_text()!r}\n{logs}"
    rows = [ln.split("\t") for ln in lines.splitlines()]
    assert all(len(r) == 4 for r in rows), rows  # host stamp, node, device, task
    assert sorted(int(r[3]) for r in rows) == list(range(1, n + 1))
    # the host stamp is the node's own hostname, the one Slurm knows it by
    assert all(r[0] == r[1] for r in rows), rows
    hosts = collections.Counter(r[0] for r in rows)
    assert set(hosts) == set(slurm_cluster.nodes) and len(hosts) == 3, hosts
    # each node writes through its own FUSE client: one device per node, none of the host's
    devs = collections.defaultdict(set)
    for r in rows:
        devs[r[0]].add(r[2])
    assert all(len(d) == 1 for d in devs.values()), devs
    node_devs = {next(iter(d)) for d in devs.values()}
    assert len(node_devs) == 3, devs
    assert not node_devs & {mountinfo_entry(m)[0] for m in mounts}
    spread = dict(sorted(hosts.items()))
    cluster_report(
        f"{n}-task array over {len(hosts)} nodes on {mounts[0]} ({spread}) in {took:.1f} s"
    )
