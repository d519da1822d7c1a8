"""Waiting on events, not sleeps: how much of a pipe a zotsink child has read, and a
condition polled until it holds (failing early, with stderr, if the child died)."""

from __future__ import annotations

import array
import fcntl
import subprocess
import termios
import time
from collections.abc import Callable

import pytest


def unread(fd: int) -> int:
    """Bytes still unread in the pipe ``fd`` writes to (FIONREAD)."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf, True)
    return buf[0]


def wait_for(cond: Callable[[], bool], proc: subprocess.Popen, what: str, limit=60.0) -> None:
    """Poll ``cond`` until true; fail early with zotsink's stderr if it died instead."""
    end = time.monotonic() + limit
    while not cond():
        if proc.poll() is not None:
            pytest.fail(f"zotsink exited ({proc.returncode}) before {what}: {proc.stderr.read()}")
        if time.monotonic() > end:
            proc.kill()
            pytest.fail(f"zotsink never {what}")
        time.sleep(0.005)
