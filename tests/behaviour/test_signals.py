"""Walltime and cancel signals: everything read is written (or spilled), then exit 128+N.

The producer is the test itself: it writes every record into a pipe at once and keeps the
pipe open, so zotsink never sees end of input. "zotsink has read them all" is observed, not
slept for: FIONREAD on the pipe says how many bytes are still unread.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import unread, wait_for

from zotsink._core.stop import STOP_LOCK_TIMEOUT

N_RECORDS = 2000
STOP_SIGNALS = [
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
]
#: F_SETPIPE_SZ (Linux): room for every record, so the producer never blocks.
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

# Holds an exclusive flock on argv[1] until its stdin closes.
HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def records(tag: str = "sig") -> list[bytes]:
    return [f"{tag}-{i:05d}-payload\n".encode() for i in range(N_RECORDS)]


def start_stream(
    out: Path, lines: list[bytes], cmd: list[str], env: dict[str, str], reap, *args: str
) -> tuple[subprocess.Popen, int]:
    """zotsink OUT reading a pipe that holds ``lines`` and stays open; (process, write end)."""
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
    data = b"".join(lines)
    assert os.write(w, data) == len(data)
    proc = reap(
        subprocess.Popen(
            # Large batches, a long interval: everything read stays buffered until the signal.
            [*cmd, "--batch-bytes", "100000000", "--flush-interval", "3600", *args, str(out)],
            stdin=r,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
    )
    os.close(r)
    wait_for(lambda: unread(w) == 0, proc, "read its input")
    return proc, w


@pytest.mark.parametrize("sig", STOP_SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_signal_writes_everything_read_then_exits_128_plus_n(
    tmp_path: Path, zotsink_cmd: list[str], child_env, reap, sig: int
) -> None:
    out = tmp_path / "out.txt"
    lines = records()
    proc, w = start_stream(out, lines, zotsink_cmd, child_env(), reap)
    try:
        assert not out.exists()  # nothing flushed yet: all 2,000 are in zotsink's buffer
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(w)
    assert proc.returncode == 128 + sig, err
    assert out.read_bytes() == b"".join(lines)
    name = signal.Signals(sig).name
    assert err == f"zotsink: stopped by {name} after writing everything read\n"
    assert not list(tmp_path.glob("out.txt.spill.*"))


@pytest.mark.parametrize(
    ("flush_first", "sig"),
    [(False, signal.SIGTERM), (True, signal.SIGUSR2)],
    ids=["buffered", "waiting-for-lock"],
)
def test_signal_while_the_lock_is_held_elsewhere_spills_within_seconds(
    tmp_path: Path, zotsink_cmd: list[str], child_env, reap, flush_first: bool, sig: int
) -> None:
    """The lock wait after a stop is capped (the default --timeout is 600 s).

    ``waiting-for-lock``: the batch was already waiting for the lock when the signal came
    (a short --flush-interval), which must end the wait just the same.
    """
    out = tmp_path / "out.txt"
    out.write_bytes(b"before\n")
    holder = reap(
        subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
    )
    assert holder.stdout.readline() == b"held\n"
    lines = records()
    env = child_env()
    args = ("--flush-interval", "0") if flush_first else ()
    try:
        proc, w = start_stream(out, lines, zotsink_cmd, env, reap, *args)
        try:
            proc.send_signal(sig)
            # --timeout is 600 s: ending within this limit means the stop cap (plus at most
            # one 1 s wait slice) ended the wait.
            _, err = proc.communicate(timeout=STOP_LOCK_TIMEOUT + 25)
        finally:
            os.close(w)
    finally:
        holder.communicate(b"", timeout=10)
    assert proc.returncode == 128 + sig, err
    assert out.read_bytes() == b"before\n"
    spills = list(tmp_path.glob("out.txt.spill.*"))
    assert len(spills) == 1
    assert spills[0].read_bytes() == b"".join(lines)
    m = re.search(r"^zotsink: 2000 records are safe in (\S+); run `zotsink recover ", err, re.M)
    assert m and m.group(1) == str(spills[0]), err
    assert "the lock was still held by another writer after" in err
    name = signal.Signals(sig).name
    assert err.endswith(f"zotsink: stopped by {name} after writing or spilling everything read\n")
    assert "Traceback" not in err
    r = subprocess.run([*zotsink_cmd, "recover", str(out)], capture_output=True, env=env)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"before\n" + b"".join(lines)


# The recommended pattern for an application that writes through a Sink: the handler only
# notes the signal; the loop sees it and leaves the `with` block, which flushes. (Raising
# from the handler instead could interrupt a batch in the middle of its lock wait.)
SINK_APP = r"""
import signal, sys
from zotsink import Sink

stop = []
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, lambda signum, frame: stop.append(signum))
n = 0
with Sink(sys.argv[1], batch_bytes=1 << 30, flush_interval=3600) as sink:
    while not stop:
        sink.write(f"api-{n:07d}")
        n += 1
        if n == int(sys.argv[2]):
            print("written", flush=True)
print(n, flush=True)
sys.exit(128 + stop[0])
"""


def test_sink_with_a_flag_setting_handler_flushes_on_sigterm(
    tmp_path: Path, child_env, reap
) -> None:
    out = tmp_path / "out.txt"
    proc = reap(
        subprocess.Popen(
            [sys.executable, "-c", SINK_APP, str(out), str(N_RECORDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
    )
    assert proc.stdout.readline() == b"written\n"  # and it goes on writing
    proc.send_signal(signal.SIGTERM)
    written, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    n = int(written)
    assert n >= N_RECORDS
    assert out.read_bytes() == b"".join(f"api-{i:07d}\n".encode() for i in range(n))


# A handler that raises SystemExit also closes the Sink on the way out, as long as it does not
# land inside a Sink call (see the README): here the application waits for something else.
SINK_EXIT_APP = r"""
import signal, sys
from zotsink import Sink

def stop(signum, frame):
    raise SystemExit(128 + signum)

signal.signal(signal.SIGTERM, stop)
with Sink(sys.argv[1], batch_bytes=1 << 30, flush_interval=3600) as sink:
    for i in range(int(sys.argv[2])):
        sink.write(f"api-{i:05d}")
    print("written", flush=True)
    signal.pause()
"""


def test_sink_with_a_raising_handler_flushes_on_sigterm(tmp_path: Path, child_env, reap) -> None:
    out = tmp_path / "out.txt"
    proc = reap(
        subprocess.Popen(
            [sys.executable, "-c", SINK_EXIT_APP, str(out), str(N_RECORDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
    )
    assert proc.stdout.readline() == b"written\n"
    assert not out.exists()  # all still buffered in the Sink
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert out.read_bytes() == b"".join(f"api-{i:05d}\n".encode() for i in range(N_RECORDS))
