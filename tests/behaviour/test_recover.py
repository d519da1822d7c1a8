"""zotsink recover: spill files from a lock timeout go back into OUT, exactly once."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from zotsink._core.sidefiles import find_spills

Run = Callable[..., subprocess.CompletedProcess]

ROWS = b"1\ta\n2\tb\n3\tc\n"

# recover with a fault injected: argv[1] names it, argv[2] is OUT.
FAULTY_RECOVER = r"""
import errno, os, sys
fault, out = sys.argv[1], sys.argv[2]
if fault == "fsync":
    def fsync(fd):
        raise OSError(errno.EIO, "Input/output error")
    os.fsync = fsync  # the disk fails after the records were written
elif fault == "kill-before-remove":
    os.remove = lambda path: os._exit(137)  # killed after the fsync, before the removal
from zotsink.cli import main
main(["recover", out])
"""


def _spill_by_lock_timeout(out: Path, zotsink: Run, *args: str, rows: bytes = ROWS) -> Path:
    """Run a real writer while OUT is locked: it times out and saves its records."""
    out.touch()
    with open(out, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        r = zotsink("--timeout", "0.2", *args, out, input=rows)
    assert r.returncode == 75, r.stderr
    spills = find_spills(str(out))
    assert len(spills) == 1 and spills[0].encode() in r.stderr
    assert f"zotsink recover {out}".encode() in r.stderr
    return Path(spills[0])


def test_lock_timeout_spill_is_recovered_exactly_once(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "out.tsv"
    spill = _spill_by_lock_timeout(out, zotsink, "--columns", "n,v")
    assert out.read_bytes() == b""  # nothing half-written
    assert spill.read_bytes() == b"n\tv\n" + ROWS  # the header travels with the records
    r = zotsink("recover", out)
    assert r.returncode == 0, r.stderr
    # (not "3 records": the count includes the header line the spill brought)
    assert b" records from 1 spill file into" in r.stderr
    assert out.read_bytes() == b"n\tv\n" + ROWS and not spill.exists()
    r = zotsink("recover", out)  # nothing left to do
    assert r.returncode == 0 and b"recovered 0 records from 0 spill files" in r.stderr
    assert out.read_bytes() == b"n\tv\n" + ROWS
    assert zotsink("verify", out).returncode == 0


def test_recover_drops_the_header_out_already_has(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "out.tsv"
    out.write_bytes(b"n\tv\n0\tz\n")
    spill = _spill_by_lock_timeout(out, zotsink, "--columns", "n,v")
    assert zotsink("recover", out).returncode == 0
    assert out.read_bytes() == b"n\tv\n0\tz\n" + ROWS and not spill.exists()


def test_failed_fsync_keeps_the_spill_and_a_rerun_is_exactly_once(
    tmp_path: Path, zotsink: Run, child_env: Callable[..., dict]
) -> None:
    out = tmp_path / "out.txt"
    spill = _spill_by_lock_timeout(out, zotsink)
    r = subprocess.run(
        [sys.executable, "-c", FAULTY_RECOVER, "fsync", str(out)],
        capture_output=True,
        env=child_env(),
        timeout=60,
    )
    assert r.returncode == 74 and b"Input/output error" in r.stderr, r.stderr
    assert spill.read_bytes() == ROWS  # the spill stays until its records are safe in OUT
    assert out.read_bytes() == b""  # the unsynced append was cut back
    assert zotsink("recover", out).returncode == 0
    assert out.read_bytes() == ROWS and not spill.exists()


def test_killed_before_the_removal_loses_nothing(
    tmp_path: Path, zotsink: Run, child_env: Callable[..., dict]
) -> None:
    out = tmp_path / "out.txt"
    spill = _spill_by_lock_timeout(out, zotsink)
    r = subprocess.run(
        [sys.executable, "-c", FAULTY_RECOVER, "kill-before-remove", str(out)],
        capture_output=True,
        env=child_env(),
        timeout=60,
    )
    assert r.returncode == 137
    assert out.read_bytes() == ROWS  # written and fsynced ...
    assert spill.read_bytes() == ROWS  # ... and the spill is still there


def test_rerun_after_a_kill_before_the_removal_is_exactly_once(
    tmp_path: Path, zotsink: Run, child_env: Callable[..., dict]
) -> None:
    out = tmp_path / "out.txt"
    _spill_by_lock_timeout(out, zotsink)
    subprocess.run(
        [sys.executable, "-c", FAULTY_RECOVER, "kill-before-remove", str(out)],
        capture_output=True,
        env=child_env(),
        timeout=60,
    )
    assert zotsink("recover", out).returncode == 0
    assert out.read_bytes() == ROWS


def test_lines_format_record_equal_to_outs_first_line_is_kept(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"ok\n")
    _spill_by_lock_timeout(out, zotsink, rows=b"ok\nok\n")
    assert zotsink("recover", out).returncode == 0
    assert out.read_bytes() == b"ok\nok\nok\n"


def test_a_running_writers_spill_is_left_alone(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"")
    # a spill file of a writer that still runs on this host: this test process
    live = tmp_path / f"out.txt.spill.{os.uname().nodename}.{os.getpid()}"
    live.write_bytes(b"late\n")
    r = zotsink("recover", out)
    assert r.returncode == 1 and b"its writer is still running" in r.stderr
    assert live.exists() and out.read_bytes() == b""
    r = zotsink("recover", "--force", out)
    assert r.returncode == 0 and out.read_bytes() == b"late\n" and not live.exists()


def test_recover_named_spill_files(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "out.txt"
    elsewhere = tmp_path / "scratch"
    elsewhere.mkdir()
    spill = elsewhere / "out.txt.spill.otherhost.12345"  # a spill from a full disk, elsewhere
    spill.write_bytes(b"x\ny")  # even one whose last line lost its newline
    r = zotsink("recover", out, spill)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"x\ny\n" and not spill.exists()
    r = zotsink("recover", out, elsewhere / "gone")
    assert r.returncode == 2 and b"Traceback" not in r.stderr


def test_two_recovers_at_once_append_each_spill_once(
    tmp_path: Path, zotsink_cmd: list[str], child_env: Callable[..., dict]
) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"")
    expected = []
    for n in range(30):  # spill files of writers on other nodes, all ended
        rows = [b"node%02d-rec%d" % (n, k) for k in range(50)]
        (tmp_path / f"out.txt.spill.node{n:02d}.4242").write_bytes(b"\n".join(rows) + b"\n")
        expected += rows
    procs = [
        subprocess.Popen(
            [*zotsink_cmd, "recover", str(out)], env=child_env(), stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    assert [p.wait(60) for p in procs] == [0, 0]
    assert sorted(out.read_bytes().splitlines()) == sorted(expected)
    assert find_spills(str(out)) == []
