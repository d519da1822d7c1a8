"""A scheduler that hangs never holds a user's ``status`` or ``run``: a site's wrapper around
a hung ``squeue`` (its child sleeps holding stdout and stderr) is asked, SIGTERM comes, and
zotsink ends within a couple of seconds with 128+15, leaving no process of the question.

The stand-in ``squeue`` writes its pid and its child's into the FIFO ``asked`` as it
begins: the test waits on that, never on a clock."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import Book

ZOTSINK = [sys.executable, "-m", "zotsink"]
NO_JOB = {
    v: None
    for v in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_JOB_ID", "SGE_TASK_ID", "JOB_ID",
              "PBS_ARRAY_INDEX", "PBS_JOBID", "LSB_JOBID", "SGE_ROOT")
}  # fmt: skip
HUNG_SQUEUE = """#!/bin/sh
/bin/sleep 600 &
echo "$$ $!" > "{d}/asked"
wait
"""
#: Seconds from SIGTERM to zotsink's end: "a couple", and room for a loaded machine.
PROMPT = 5.0


@pytest.fixture
def hung(tmp_path: Path, child_env: Callable[..., dict[str, str]]) -> dict[str, str]:
    """The environment of a Slurm job on a node whose ``squeue`` hangs; a ledger whose task
    1 runs on another node (its job is asked about); tasks.txt of tasks a and b."""
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    book = Book(tmp_path / "out.txt.ledger", host="another-node", hostid="1.1", job="4711")
    book.claim(1, line="a").begin(1, pid=12345).write()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(HUNG_SQUEUE.format(d=tmp_path))
    (bin_dir / "squeue").chmod(0o755)
    os.mkfifo(tmp_path / "asked")
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    return child_env({**NO_JOB, "PATH": path, "SLURM_JOB_ID": "4712"})


def asked(d: Path, proc: subprocess.Popen[bytes]) -> list[int]:
    """The pids of the hung squeue and its child, once zotsink asked it."""
    fd = os.open(d / "asked", os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = b""
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, "squeue was never asked"
            assert proc.poll() is None, "zotsink ended before it asked squeue"
            data += os.read(fd, 100)
    finally:
        os.close(fd)
    return [int(p) for p in data.split()]


def gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` ends within ``within`` seconds (told by its pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within)[0])
    finally:
        os.close(fd)


def stopped(proc: subprocess.Popen[bytes], pids: list[int]) -> bytes:
    """SIGTERM to zotsink: it ends promptly with 143, and the squeue it asked with it."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("zotsink hung after SIGTERM while its scheduler hung")
    took = time.monotonic() - t0
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    assert took < PROMPT, f"{took:.1f} s from SIGTERM to the end"
    for pid in pids:
        assert gone(pid, 10), f"process {pid} of the hung squeue was left running"
    return err


def test_status_ends_at_sigterm_while_the_scheduler_hangs(
    tmp_path: Path, hung: dict[str, str], reap
) -> None:
    cmd = [*ZOTSINK, "status", "tasks.txt", "out.txt"]
    p = reap(subprocess.Popen(cmd, cwd=tmp_path, env=hung, stderr=subprocess.PIPE))
    stopped(p, asked(tmp_path, p))


@pytest.mark.parametrize("question", ["the job's end", "another node's element"])
def test_a_pull_run_ends_at_sigterm_while_the_scheduler_hangs(
    tmp_path: Path, hung: dict[str, str], reap, question: str
) -> None:
    # without --deadline the run asks first when its job ends; with one, about the
    # element that holds task a, once its own task b is done
    deadline = [] if question == "the job's end" else ["--deadline", "3600"]
    cmd = [*ZOTSINK, "run", "--pull", *deadline, "tasks.txt", "out.txt", "--", "echo"]
    p = reap(subprocess.Popen(cmd, cwd=tmp_path, env=hung, stderr=subprocess.PIPE))
    err = stopped(p, asked(tmp_path, p))
    assert b"stopped by SIGTERM" in err, err
