"""Running a batch scheduler's command: with a deadline, never past it, nothing left behind.

:func:`run_command` is the one way zotsink runs ``squeue``, ``qstat``, ``sbatch``...:

- **A scheduler command never holds its caller past its deadline**: it runs in a session
  of its own with stdin from ``/dev/null`` (or the job script given, at most
  :data:`MAX_INPUT` bytes); at the deadline its whole process group is killed and its
  pipes are closed unread, so a hung grandchild of a site's wrapper script that holds them
  open is nobody's wait; it is reaped where nobody waits. A command still out when this
  process exits is killed with its group.
- A command that cannot be started, or gives no answer by its deadline, is None: never an
  answer that means anything.

What the commands print is parsed in :mod:`zotsink._run.schedout`, what they are asked by
:mod:`zotsink._run.backends`.
"""

from __future__ import annotations

import atexit
import math
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Final, NamedTuple

from .._core.fileio import file_kind, open_regular

__all__ = ["COMMAND_TIMEOUT", "MAX_INPUT", "Answer", "read_script", "run_command"]

#: Seconds a scheduler command may take before it counts as no answer (its process group
#: is then killed): a controller that does not answer must not hold a run.
COMMAND_TIMEOUT: Final = 30.0


# -- running a scheduler command ---------------------------------------------------------------
class Answer(NamedTuple):
    """What a scheduler command said: its exit code, stdout and stderr."""

    code: int
    out: bytes
    err: bytes


#: Commands still out, by pid: killed with their group when this process exits. A pid
#: leaves this table (under its lock) before its process is reaped, so that the exit
#: handler never signals a group whose number the kernel gave to another since.
_running: dict[int, subprocess.Popen[bytes]] = {}
_running_lock = threading.Condition()
_starting = 0  # commands being started, not in the table yet: the exit handler waits for them
_ending = False  # this process exits: no command is started any more
#: Longest wait of the exit handler for a command being started (a fork and an exec).
_START_WAIT: Final = 5.0


@atexit.register
def _end_commands() -> None:
    # a scheduler command still out when this process ends is of no use to anybody
    global _ending
    with _running_lock:
        _ending = True
        _running_lock.wait_for(lambda: _starting == 0, _START_WAIT)
        for pid in list(_running):
            _kill_group(pid)


def _kill_group(pid: int) -> None:
    with suppress(OSError):  # gone already, or a member we may not signal
        os.killpg(pid, signal.SIGKILL)


def _started(child: subprocess.Popen[bytes] | None) -> None:
    """A command being started is out (or could not be started: None)."""
    global _starting
    with _running_lock:
        _starting -= 1
        if child is not None:
            _running[child.pid] = child
            if _ending:  # the exit handler gave up waiting for it: it ends here
                _kill_group(child.pid)
        _running_lock.notify_all()


def run_command(
    argv: Sequence[str],
    timeout: float | None = None,
    *,
    input: bytes = b"",
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Answer | None:
    """Run a scheduler command: its :class:`Answer`; None when it cannot be started or has
    not ended (exited, and both its pipes closed) within ``timeout`` seconds (default
    :data:`COMMAND_TIMEOUT`). Never waits past the deadline for anything; whatever is left
    of the command's process group when this returns is killed. ``input``: what it reads
    on stdin (a job script: no more than a pipe holds, :data:`MAX_INPUT` bytes), else
    ``/dev/null``; ``env``, ``cwd``: its environment and directory (default: this
    process's)."""
    if len(input) > MAX_INPUT:
        raise ValueError(f"a scheduler command's input is {len(input)} bytes, over {MAX_INPUT}")
    global _starting
    limit = COMMAND_TIMEOUT if timeout is None else timeout
    with _running_lock:
        if _ending:
            return None
        _starting += 1
    try:
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own group: killed whole, untouched by ours
            close_fds=True,
            env=None if env is None else dict(env),
            cwd=cwd,
        )
    except OSError:
        _started(None)
        return None
    _started(child)
    if input:
        # the pipe holds it whole: written at once, never a wait on the command
        assert child.stdin is not None
        with suppress(OSError):
            child.stdin.write(input)
        with suppress(OSError):
            child.stdin.close()
    exited = False
    try:
        out, err, exited = _collect(child, time.monotonic() + limit)
    finally:
        with _running_lock:
            # What the command left behind (a helper that closed its pipes) goes with it:
            # the leader is not reaped yet, so its group's number is still its own.
            _kill_group(child.pid)
            del _running[child.pid]
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()
        child.stderr.close()
        if exited:
            child.wait()  # a zombie already: at once
        else:
            threading.Thread(target=child.wait, name="zotsink-reap", daemon=True).start()
    if not exited:
        return None
    return Answer(child.returncode, out, err)


#: Bytes a scheduler command may be given on stdin: what a pipe holds on Linux (a job
#: script is a few hundred), written before the command is waited for.
MAX_INPUT: Final = 65536


def read_script(path: str, what: str) -> tuple[bytes | None, str]:
    """A job script read for a submission: ``(its bytes, "")``, or ``(None, why not)`` when
    it cannot be read, is not a regular file (a FIFO planted at its name would hang the
    submission) or is over :data:`MAX_INPUT` bytes (no job script is; a wrong file is)."""
    try:
        fd, st = open_regular(path)
    except OSError as e:
        return None, f"cannot read {what} {path}: {e.strerror}"
    if fd < 0:
        return None, f"{what} {path} is {file_kind(st.st_mode)}, not a job script"
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_INPUT + 1)
    except OSError as e:
        return None, f"cannot read {what} {path}: {e.strerror}"
    if len(data) > MAX_INPUT:
        return None, f"{what} {path} is over {MAX_INPUT} bytes: not a job script"
    return data, ""


#: Seconds between looks for a command's exit where no pidfd tells it.
_EXIT_LOOK: Final = 0.02


def _collect(child: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes, bool]:
    """Read the child's stdout and stderr until both end and it exits (not reaped), or
    until ``deadline``: ``(stdout, stderr, ended)``."""
    assert child.stdout is not None and child.stderr is not None
    pipes = {child.stdout.fileno(): bytearray(), child.stderr.fileno(): bytearray()}
    poller = select.poll()
    for fd in pipes:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    pidfd = _pidfd(child.pid)
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    open_pipes = set(pipes)
    try:
        while True:
            exited = _exited(child.pid, pidfd)
            if exited and not open_pipes:
                out, err = (bytes(pipes[p.fileno()]) for p in (child.stdout, child.stderr))
                return out, err, True
            left = deadline - time.monotonic()
            if left <= 0:
                return b"", b"", False
            # without a pidfd (an old kernel) the exit is looked for between short waits
            wait = left if pidfd >= 0 else min(left, _EXIT_LOOK)
            for fd, _ in poller.poll(math.ceil(wait * 1000)):
                if fd == pidfd:
                    poller.unregister(pidfd)  # readable for good once it exited
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if chunk:
                    pipes[fd] += chunk
                else:
                    poller.unregister(fd)
                    open_pipes.discard(fd)
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _pidfd(pid: int) -> int:
    """A descriptor that becomes readable when process ``pid`` exits (-1: none here)."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined,no-any-return]
    except (AttributeError, OSError):
        return -1


def _exited(pid: int, pidfd: int) -> bool:
    """Whether the child exited, without reaping it (its group's number stays its own)."""
    if pidfd >= 0:
        return bool(select.select([pidfd], [], [], 0)[0])
    try:
        got = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return got is not None
