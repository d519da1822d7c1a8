"""``producer | zotsink OUT`` under the conditions that used to lose or misplace records.

Every test runs the real CLI in a child process reading a real pipe. "zotsink has read the
input" is observed, never slept for: FIONREAD on the pipe says how many bytes are unread.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from waiting import unread, wait_for

MAX_LINE = 16 * 1024 * 1024  # the documented line limit
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
ZOTSINK = [sys.executable, "-m", "zotsink"]


def feed(data: bytes) -> tuple[int, int]:
    """A pipe holding ``data`` whose write end stays open: (read end, write end)."""
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
    assert os.write(w, data) == len(data)
    return r, w


def start(args: list[str], stdin: int, env: dict[str, str], reap) -> subprocess.Popen:
    proc = reap(subprocess.Popen([*ZOTSINK, *args], stdin=stdin, stderr=subprocess.PIPE, env=env))
    os.close(stdin)
    return proc


def stop_when_read(proc: subprocess.Popen, w: int, sig: int, what: str) -> str:
    """Once zotsink has read everything in the pipe, send ``sig``; its stderr, after
    checking that it exited 128 + sig."""
    wait_for(lambda: unread(w) == 0, proc, what)
    proc.send_signal(sig)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 128 + sig, err
    return err


# -- numeric options are checked before anything is read -------------------------------
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--flush-interval", "inf"),
        ("--flush-interval", "nan"),
        ("--flush-interval", "1e9"),
        ("--flush-interval", "-1"),
        ("--timeout", "inf"),
        ("--timeout", "nan"),
        ("--timeout", "-0.5"),
        ("--batch-bytes", "0"),
        ("--batch-bytes", "99999999999999"),
    ],
)
def test_bad_numeric_option_exits_2_before_reading(
    tmp_path: Path, child_env, reap, option: str, value: str
) -> None:
    out = tmp_path / "out.txt"
    data = b"a\nb\n"
    r, w = feed(data)
    proc = start([option, value, str(out)], r, child_env(), reap)
    try:
        _, err_bytes = proc.communicate(timeout=60)
        err = err_bytes.decode()
        assert proc.returncode == 2, err
        assert unread(w) == len(data)  # not a byte was taken from the producer
    finally:
        os.close(w)
    assert f"Invalid value for '{option}'" in err, err
    assert "Traceback" not in err
    assert not out.exists()


# -- any error after reading began: what was read is saved ----------------------------
# The input pipe fails with EIO on the second read (a sick terminal or a network pipe):
# the lines of the first read must be in a spill file, not gone.
EIO_ON_SECOND_READ = r"""
import errno, os, sys
calls = 0
def failing(real):
    def read(fd, *args):
        global calls
        if fd == 0:
            calls += 1
            if calls == 2:
                raise OSError(errno.EIO, "Input/output error")
        return real(fd, *args)
    return read
os.read, os.readv = failing(os.read), failing(os.readv)
sys.argv[0] = "zotsink"
from zotsink.cli import main
main()
"""


def test_error_while_reading_spills_what_was_read(tmp_path: Path, child_env, reap) -> None:
    out = tmp_path / "out.txt"
    r, w = feed(b"one\ntwo\n")
    os.close(w)  # end of input: the second read comes at once
    proc = reap(
        subprocess.Popen(
            [sys.executable, "-c", EIO_ON_SECOND_READ, "--flush-interval", "3600", str(out)],
            stdin=r,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
    )
    os.close(r)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 74, err
    assert "Traceback" not in err
    spills = sorted(tmp_path.glob("out.txt.spill.*"))
    assert len(spills) == 1, err
    assert spills[0].read_bytes() == b"one\ntwo\n"
    assert "Input/output error" in err and str(spills[0]) in err
    assert not out.exists()


# -- every read loop honours stop and flush -------------------------------------------
def test_sigterm_during_an_over_long_line_flushes_earlier_records_and_stops(
    tmp_path: Path, child_env, reap
) -> None:
    """An over-long line arriving slowly: the record before it is flushed on time, and
    SIGTERM ends the stream at once, the unfinished long line refused, not lost."""
    out = tmp_path / "out.txt"
    r, w = os.pipe()
    proc = start(["--flush-interval", "0.2", str(out)], r, child_env(), reap)
    head = b"a" * (MAX_LINE + 1000)  # over the limit, and no newline yet

    def produce() -> None:
        _write_all(w, b"first\n")
        _write_all(w, head)  # then nothing: the producer is slow

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        wait_for(lambda: out.exists() and out.read_bytes() == b"first\n", proc, "flushed 'first'")
        writer.join()
        err = stop_when_read(proc, w, signal.SIGTERM, "read the long line's head")
    finally:
        os.close(w)
    assert out.read_bytes() == b"first\n"
    reason = f"byte 7: incomplete at stop (over the {MAX_LINE}-byte line limit)\t".encode()
    rejects = tmp_path / "out.txt.rejects"
    assert rejects.stat().st_size == len(reason) + len(head) + 1
    with open(rejects, "rb") as f:
        assert f.read(len(reason)) == reason
        body = f.read()
    assert body == head + b"\n"
    assert "1 record refused" in err and "stopped by SIGTERM" in err


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# -- an unterminated tail at a stop is not a record ----------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=lambda s: s.name)
def test_stop_mid_line_sends_the_part_to_rejects(
    tmp_path: Path, child_env, reap, sig: signal.Signals
) -> None:
    out = tmp_path / "out.tsv"
    data = b"a\t12345\nb\t12"  # the producer was stopped after printing part of a row
    r, w = feed(data)
    proc = start(["--flush-interval", "3600", str(out)], r, child_env(), reap)
    try:
        err = stop_when_read(proc, w, sig, "read its input")
    finally:
        os.close(w)
    assert out.read_bytes() == b"a\t12345\n"
    assert (tmp_path / "out.tsv.rejects").read_bytes() == b"byte 9: incomplete at stop\tb\t12\n"
    assert err == (
        f"zotsink: 1 record refused; they are in {out}.rejects\n"
        f"zotsink: stopped by {sig.name} after writing everything read\n"
    )


def test_stop_stamps_and_writes_the_lines_waiting_in_the_buffer(
    tmp_path: Path, child_env, reap
) -> None:
    # Stamped lines wait unstamped in the read buffer until their batch is due: a stop
    # must still stamp and append every whole one, and send the part line to rejects.
    out = tmp_path / "out.txt"
    r, w = feed(b"a\nb\nc")
    env = child_env({"SLURM_ARRAY_JOB_ID": "9", "SLURM_ARRAY_TASK_ID": "4"})
    proc = start(["--stamp", "job,task", "--flush-interval", "3600", str(out)], r, env, reap)
    try:
        err = stop_when_read(proc, w, signal.SIGTERM, "read its input")
    finally:
        os.close(w)
    assert err == (
        f"zotsink: 1 record refused; they are in {out}.rejects\n"
        "zotsink: stopped by SIGTERM after writing everything read\n"
    )
    assert out.read_bytes() == b"9\t4\ta\n9\t4\tb\n"
    assert (tmp_path / "out.txt.rejects").read_bytes() == b"line 3: incomplete at stop\tc\n"


def test_missing_final_newline_at_eof_is_a_record_with_a_note(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "out.txt"
    r = zotsink(out, input=b"one\ntwo")
    assert r.returncode == 0
    assert out.read_bytes() == b"one\ntwo\n"
    assert r.stderr == b"zotsink: note: the input did not end with a newline; one was added\n"
    q = zotsink("-q", tmp_path / "quiet.txt", input=b"x")
    assert (q.returncode, q.stderr) == (0, b"")
    assert (tmp_path / "quiet.txt").read_bytes() == b"x\n"


# -- key:value input whose key clashes with a --stamp field ----------------------------
def test_kv_key_that_is_a_stamp_field_is_rejected_with_a_reason(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "out.tsv"
    data = b"name:a v:1\nhost:h9 name:b v:2\nname:c v:3\n"
    r = zotsink("--kv", "--stamp", "host", out, input=data)
    assert r.returncode == 1, r.stderr
    host = os.uname().nodename.encode()
    assert out.read_bytes() == (b"host\tname\tv\n" + host + b"\ta\t1\n" + host + b"\tc\t3\n")
    assert (tmp_path / "out.tsv.rejects").read_bytes() == (
        b"line 2: key 'host' is also a --stamp field: rename the key or leave 'host' out "
        b"of --stamp\thost:h9 name:b v:2\n"
    )


# -- standard input that is OUT itself ---------------------------------------------------
def test_stdin_that_is_out_is_refused_before_reading(tmp_path: Path, child_env) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"r1\nr2\n")
    link = tmp_path / "link.txt"
    link.symlink_to(out)
    for name in (out, link):
        with open(out, "rb") as f:
            r = subprocess.run(
                [*ZOTSINK, str(name)], stdin=f, capture_output=True, env=child_env(), timeout=20
            )
            assert f.tell() == 0  # not read
        assert r.returncode == 2, r.stderr
        assert r.stderr.decode().startswith(
            f"zotsink: error: standard input is {name} itself: its records would be appended"
        )
        assert out.read_bytes() == b"r1\nr2\n"
