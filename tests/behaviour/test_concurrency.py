"""Many real processes appending to one file: every record whole and present once."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ZOTSINK = [sys.executable, "-m", "zotsink"]
N = 5000
BIG = 200 * 1024  # larger than a pipe buffer: one record cannot be written atomically

PRODUCER = r"""
import sys
w, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout
for i in range(n):
    out.write(f"{w}-{i:06d}-" + "c" * 40 + "\n")
    if big and i % (n // big) == 0:
        out.write(f"{w}-big{i:06d}-" + "B" * 204800 + "\n")
"""

API_WRITER = r"""
import sys
from zotsink import append_record
out, w, n, big = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    append_record(out, f"{w}-{i:06d}-" + "a" * 40)
    if big and i % (n // big) == 0:
        append_record(out, f"{w}-big{i:06d}-" + "B" * 204800)
"""

LINE = re.compile(rb"^(cli\d|api\d)-(big)?(\d{6})-(c{40}|a{40}|B{204800})$")


def _run_writers(out: Path, big_each: int) -> list[str]:
    procs = []
    for w in range(4):
        prod = subprocess.Popen(
            [sys.executable, "-c", PRODUCER, f"cli{w}", str(N), str(big_each)],
            stdout=subprocess.PIPE,
        )
        cons = subprocess.Popen([*ZOTSINK, "--batch-bytes", "8192", str(out)], stdin=prod.stdout)
        prod.stdout.close()
        procs += [prod, cons]
    for w in range(4):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", API_WRITER, str(out), f"api{w}", str(N), str(big_each)]
            )
        )
    return [p.wait(300) for p in procs]


def _check(out: Path, big_each: int) -> None:
    lines = out.read_bytes().split(b"\n")
    assert lines.pop() == b""  # ends with a newline
    bad = [ln[:80] for ln in lines if not LINE.match(ln)]
    assert bad == []
    assert len(lines) == len(set(lines))  # each present once
    expected = 8 * N + 8 * big_each
    assert len(lines) == expected
    for w in [f"cli{i}" for i in range(4)] + [f"api{i}" for i in range(4)]:
        small = [ln for ln in lines if re.match(rb"^" + w.encode() + rb"-\d{6}-", ln)]
        assert len(small) == N, w


def test_eight_writers_forty_thousand_records(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    assert _run_writers(out, 0) == [0] * 12
    _check(out, 0)


def test_big_records_are_never_interleaved(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    assert _run_writers(out, 5) == [0] * 12  # 8 writers x 5 = 40 records of 200 KiB
    _check(out, 5)


PERL = r"""
use Fcntl qw(:flock);
my ($out, $n) = @ARGV;
for my $i (0 .. $n - 1) {
    open(my $fh, '>>', $out) or die;
    flock($fh, 2) or die;
    print $fh sprintf("perl-%06d-%s\n", $i, "p" x 40);
    close($fh);
}
"""

LOCKF = r"""
import fcntl, os, sys
out, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    # two writes under the lock: without exclusion another writer could land between
    os.write(fd, f"lockf-{i:06d}-".encode())
    os.write(fd, b"l" * 40 + b"\n")
    os.close(fd)
"""

SLOW_PRODUCER = r"""
import sys
w, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    sys.stdout.write(f"{w}-{i:06d}-" + "z" * 40 + "\n")
"""


def _zotsink_pipes(out: Path, n: int, lock: str, count: int = 2) -> list[subprocess.Popen]:
    procs = []
    for w in range(count):
        prod = subprocess.Popen(
            [sys.executable, "-c", SLOW_PRODUCER, f"zot{w}", str(n)], stdout=subprocess.PIPE
        )
        cons = subprocess.Popen(
            [*ZOTSINK, "--lock", lock, "--batch-bytes", "512", str(out)], stdin=prod.stdout
        )
        prod.stdout.close()
        procs += [prod, cons]
    return procs


@pytest.mark.skipif(
    not shutil.which("perl") or not shutil.which("flock"), reason="needs perl and flock(1)"
)
def test_interop_with_flock1_and_perl(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    n = 1500
    procs = _zotsink_pipes(out, n, "auto")
    # flock(1) writing a record in two pieces: only the lock keeps it whole
    piece = 'printf "flock-%06d-" "$1" >> "$0"; printf "%040d\\n" 0 >> "$0"'
    shell = f'for i in $(seq 0 {n // 3 - 1}); do flock "$0" sh -c \'{piece}\' "$0" "$i"; done'
    procs.append(subprocess.Popen(["bash", "-c", shell, str(out)]))
    procs.append(subprocess.Popen(["perl", "-e", PERL, str(out), str(n)]))
    assert [p.wait(300) for p in procs] == [0] * len(procs)
    lines = out.read_text().splitlines()
    pat = re.compile(r"^(zot\d-\d{6}-z{40}|flock-\d{6}-0{40}|perl-\d{6}-p{40})$")
    assert [ln for ln in lines if not pat.match(ln)] == []
    assert len(lines) == 2 * n + n // 3 + n == len(set(lines))


def test_interop_with_lockf_writers_under_lock_fcntl(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    n = 2000
    procs = _zotsink_pipes(out, n, "fcntl")
    procs.append(subprocess.Popen([sys.executable, "-c", LOCKF, str(out), str(n)]))
    assert [p.wait(300) for p in procs] == [0] * len(procs)
    lines = out.read_text().splitlines()
    pat = re.compile(r"^(zot\d-\d{6}-z{40}|lockf-\d{6}-l{40})$")
    assert [ln for ln in lines if not pat.match(ln)] == []
    assert len(lines) == 3 * n == len(set(lines))


FIRST_MAPPING = r"""
import sys
from zotsink import append_record
out, w = sys.argv[1], sys.argv[2]
sys.stdin.readline()  # start together
append_record(out, {"writer": w, "value": 1})
"""


def test_sixteen_first_writers_write_one_header(tmp_path: Path) -> None:
    out = tmp_path / "out.tsv"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FIRST_MAPPING, str(out), str(w)], stdin=subprocess.PIPE
        )
        for w in range(16)
    ]
    for p in procs:  # all started and importing; release them at once
        p.stdin.write(b"go\n")
    for p in procs:
        p.stdin.close()
    assert [p.wait(60) for p in procs] == [0] * 16
    lines = out.read_text().splitlines()
    assert lines[0] == "writer\tvalue"
    assert lines.count("writer\tvalue") == 1
    assert sorted(lines[1:]) == sorted(f"{w}\t1" for w in range(16))


def test_fork_child_gets_its_own_lock(tmp_path: Path) -> None:
    # a forked child must not share the parent's open file description (flock is per OFD)
    out = tmp_path / "out.txt"
    code = rf"""
import os, sys
from zotsink import append_record
append_record({str(out)!r}, "parent-0")
pids = []
for c in range(4):
    pid = os.fork()
    if pid == 0:
        for i in range(2000):
            append_record({str(out)!r}, f"child{{c}}-{{i:05d}}-" + "x" * 30)
        os._exit(0)
    pids.append(pid)
for i in range(2000):
    append_record({str(out)!r}, f"parent-{{i:05d}}-" + "y" * 30)
assert all(os.waitpid(p, 0)[1] == 0 for p in pids)
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 10000 == len(set(lines))
    assert all(re.match(r"^(child\d|parent)-\d{5}-(x{30}|y{30})$", ln) for ln in lines[1:])
