"""zotsink on a real MooseFS file system: two mfsmount clients act as two nodes.

Locks exclude across the mounts; four writers (two CLI pipelines, two append_record
loops) on two mounts keep every record whole and spill nothing; a writer SIGKILLed in
the middle of a record leaves one fragment and frees its lock; records met by a full
file system (whose ENOSPC may surface only at close) are kept and recovered.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("cluster")]

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "cluster"
N = 5000

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

# Waits for the file argv[1] to exist, then prints argv[3] records tagged argv[2], one
# write each, for a `zotsink OUT` reading its stdout.
PRODUCER = r"""
import os, sys, time
go, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
while not os.path.exists(go):
    time.sleep(0.005)
for i in range(n):
    os.write(1, b"%s %05d %s\n" % (tag.encode(), i, tag.encode() * 40))
"""

# The same records through append_record, one call (open, lock, append, fsync, unlock,
# close) each: the pattern that makes MooseFS refuse flock with ECANCELED now and then.
API_WRITER = r"""
import os, sys, time
from zotsink import append_record
go, out, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
while not os.path.exists(go):
    time.sleep(0.005)
for i in range(n):
    append_record(out, "%s %05d %s" % (tag, i, tag * 40))
"""

# The CLI (argv: OUT ARGS...), whose first write to OUT puts only the first 20 bytes of
# its data there before the process SIGKILLs itself, lock held: a writer killed in the
# middle of a large write on a slow file system.
TEARER = r"""
import os, signal, sys
target, real_write = os.path.realpath(sys.argv[1]), os.write

def write(fd, data):
    try:
        to_out = os.readlink(f"/proc/self/fd/{fd}") == target
    except OSError:
        to_out = False
    if to_out:
        real_write(fd, bytes(data)[:20])
        os.kill(os.getpid(), signal.SIGKILL)
    return real_write(fd, data)

os.write = write
sys.argv = ["zotsink", *sys.argv[2:]]
from zotsink.cli import main
main()
"""


def record(tag: str, i: int) -> bytes:
    return b"%s %05d %s" % (tag.encode(), i, tag.encode() * 40)


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def read_line(proc: subprocess.Popen, timeout: float = 30.0) -> bytes:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError(f"no output from pid {proc.pid} within {timeout} s")
    return proc.stdout.readline().strip()


def try_lock(path: Path, kind: str) -> int:
    """0 if an exclusive non-blocking lock of ``kind`` was taken (and dropped), else the errno."""
    fd = os.open(path, os.O_RDWR)
    lock = fcntl.flock if kind == "flock" else fcntl.lockf
    try:
        lock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock(fd, fcntl.LOCK_UN)
    except OSError as exc:
        return exc.errno
    finally:
        os.close(fd)
    return 0


def start_holder(path: Path, kind: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,
    )
    assert read_line(proc) == b"locked"
    return proc


def mountinfo_entry(path: Path) -> tuple[str, str, str]:
    """(device, fs type, source as written in mountinfo) of the mount exactly at path."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(path):
            rest = fields[fields.index("-") + 1 :]
            return fields[2], rest[0], rest[1]
    raise AssertionError(f"{path} is not a mount point")


def test_two_separate_moosefs_mounts(moosefs_mounts):
    entries = [mountinfo_entry(m) for m in moosefs_mounts]
    # plain "fuse": only the source says MooseFS, with its "#" escaped by the kernel
    assert [fstype for _, fstype, _ in entries] == ["fuse", "fuse"]
    assert all(source.startswith("mfs\\043") for _, _, source in entries), entries
    assert len({dev for dev, _, _ in entries}) == 2


@pytest.mark.parametrize("kind", ["flock", "lockf"])
def test_lock_through_one_mount_excludes_the_other(moosefs_dirs, kind):
    path1, path2 = moosefs_dirs.node1 / "locked", moosefs_dirs.node2 / "locked"
    holder = start_holder(path1, kind)
    try:
        assert try_lock(path2, kind) in (errno.EAGAIN, errno.EACCES)
        holder.stdin.write(b"release\n")
        assert read_line(holder) == b"released"
        assert try_lock(path2, kind) == 0
    finally:
        holder.stdin.close()
        holder.wait(timeout=20)
    assert holder.returncode == 0
    holder = start_holder(path1, kind)
    try:
        assert try_lock(path2, kind) in (errno.EAGAIN, errno.EACCES)
    finally:
        holder.kill()
        holder.wait(timeout=20)
    assert wait_for(lambda: try_lock(path2, kind) == 0, timeout=5)


def test_four_writers_cli_and_api_on_two_mounts_keep_every_record(
    moosefs_dirs, zotsink_cmd, tmp_path, cluster_report
):
    go = tmp_path / "go"
    spill_dir = tmp_path / "spills"
    spill_dir.mkdir()
    # A record that could not be appended would be spilled, beside OUT or here: both
    # are checked to stay empty.
    env = dict(os.environ, ZOTSINK_SPILL_DIR=str(spill_dir), TMPDIR=str(spill_dir))
    out1, out2 = moosefs_dirs.node1 / "out.txt", moosefs_dirs.node2 / "out.txt"
    procs = []
    try:
        for tag in ("cli1", "cli2"):  # node 1: producer | zotsink OUT
            producer = subprocess.Popen(
                [sys.executable, "-c", PRODUCER, str(go), tag, str(N)],
                stdout=subprocess.PIPE,
                env=env,
            )
            sink = subprocess.Popen(
                [*zotsink_cmd, "--batch-bytes", "4096", "--flush-interval", "0.02", str(out1)],
                stdin=producer.stdout,
                stderr=subprocess.PIPE,
                env=env,
            )
            producer.stdout.close()
            procs += [producer, sink]
        for tag in ("api1", "api2"):  # node 2: append_record loops
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", API_WRITER, str(go), str(out2), tag, str(N)],
                    stderr=subprocess.PIPE,
                    env=env,
                )
            )
        t0 = time.monotonic()
        go.touch()
        codes = [p.wait(timeout=600) for p in procs]
        took = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    errors = [p.stderr.read().decode() for p in procs if p.stderr]
    assert codes == [0] * len(procs), errors
    assert not any(errors), errors
    assert list(spill_dir.iterdir()) == []
    assert sorted(p.name for p in moosefs_dirs.node2.iterdir()) == ["out.txt"]

    want = collections.Counter(
        record(t, i) for t in ("cli1", "cli2", "api1", "api2") for i in range(N)
    )
    for path in (out1, out2):  # the same bytes through both clients
        data = path.read_bytes()
        assert data.endswith(b"\n")
        got = collections.Counter(data.split(b"\n")[:-1])
        assert got == want, f"{path}: {sum((want - got).values())} records lost or torn"
    cluster_report(f"4 writers x {N} (2 CLI, 2 API) on 2 mounts: all intact, {took:.1f} s")


def test_writer_killed_mid_record_leaves_one_fragment_and_frees_the_lock(moosefs_dirs, zotsink_cmd):
    from zotsink import verify

    out1, out2 = moosefs_dirs.node1 / "out.tsv", moosefs_dirs.node2 / "out.tsv"
    out1.write_bytes(b"name\tvalue\tend\n")
    killed = subprocess.run(
        [sys.executable, "-c", TEARER, str(out1), "--columns", "name,value,end", str(out1)],
        input=b"killed\t" + b"k" * 100 + b"\tend\n",
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    # The kill freed the lock at once: the next writer, on the other mount, gets it
    # within its 30 s and puts its records after the fragment, on lines of their own.
    rows = b"".join(b"next\t%d\tend\n" % i for i in range(3))
    res = subprocess.run(
        [*zotsink_cmd, "--timeout", "30", "--columns", "name,value,end", str(out2)],
        input=rows,
        capture_output=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    fragment = (b"killed\t" + b"k" * 100)[:20]
    assert out1.read_bytes() == b"name\tvalue\tend\n" + fragment + b"\n" + rows
    report = verify(out1)
    assert [p.line for p in report.problems] == [2], report.problems


def test_doctor_names_moosefs_trusts_its_locks_and_fsyncs(moosefs_dirs, zotsink_cmd):
    for d in moosefs_dirs:
        res = subprocess.run(
            [*zotsink_cmd, "doctor", str(d), "--json"], capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0, res.stderr
        report = json.loads(res.stdout)
        assert (report["fstype"], report["filesystem"], report["family"], report["fuse"]) == (
            "fuse.mfs",
            "MooseFS",
            "cluster",
            True,
        )
        assert report["source"].startswith("mfs#")
        assert (report["locks"], report["lock"], report["sync"]) == ("coherent", "flock", "fsync")
        assert all(p["ok"] for p in report["probes"].values())
        assert "ENOSPC" in report["sync_why"]
        assert "zotsink: locks       coherent: MooseFS passes them to its servers" in res.stderr
        assert res.stderr.endswith("zotsink: verdict: zotsink can be trusted here\n")
    assert list(moosefs_dirs.node2.iterdir()) == []  # the probe cleaned up after itself


@pytest.fixture
def moosefs_full(moosefs_mounts):
    """MooseFS with no free space, restored afterwards."""

    def space(state: str) -> None:
        res = subprocess.run(
            ["bash", str(SCRIPTS / "moosefs.sh"), "space", state],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr

    space("full")
    try:
        yield space
    finally:
        space("normal")


def test_records_met_by_a_full_file_system_are_spilled_and_recovered(
    moosefs_dirs, moosefs_full, zotsink_cmd, tmp_path
):
    out = moosefs_dirs.node1 / "out.txt"
    spill_dir = tmp_path / "spills"
    spill_dir.mkdir()
    env = dict(os.environ, ZOTSINK_SPILL_DIR=str(spill_dir))
    rows = b"".join(b"row %d\n" % i for i in range(5))
    res = subprocess.run(
        [*zotsink_cmd, str(out)], input=rows, capture_output=True, env=env, timeout=120
    )
    assert res.returncode != 0
    assert not out.exists() or out.read_bytes() == b""
    # Beside OUT there is no room either: the records went to the fallback directory,
    # whole, and the error names it.
    assert [p.name for p in moosefs_dirs.node1.iterdir() if p.name != "out.txt"] == []
    spills = list(spill_dir.iterdir())
    assert len(spills) == 1 and spills[0].read_bytes() == rows
    assert str(spills[0]).encode() in res.stderr

    moosefs_full("normal")
    res = subprocess.run(
        [*zotsink_cmd, "recover", str(out), str(spills[0])],
        capture_output=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == rows
    assert not spills[0].exists()
