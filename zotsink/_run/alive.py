"""Whether the run that wrote a ledger's ``start`` row is still alive.

On the same host the pid table answers, checked against the process's start time that the
row notes (a pid the kernel gave to another process since does not count); a run whose own
process is gone still counts as alive while a process it started lives on (a command task
in its own session survives a SIGKILL of its run, and must not be started twice at once):
every task carries the run's mark in its environment (:data:`RUN_VAR`, :func:`run_mark`).
For a run on another host the scheduler that ran its job answers, about the array element:
:mod:`zotsink._run.scheduler` asks it (:func:`job_alive`; ``status`` waits for it a few
seconds in all, :func:`scheduler_wait`, and takes a late answer on a later redraw).
"""

from __future__ import annotations

import os
import time
from typing import Final

from .scheduler import (
    ANSWER_TTL,
    SCHEDULER_WAIT,
    forget_jobs,
    job_alive,
    job_end,
    job_key,
    scheduler_wait,
)

__all__ = [
    "ANSWER_TTL",
    "PROC_START",
    "RUN_VAR",
    "SCHEDULER_WAIT",
    "forget_jobs",
    "job_alive",
    "job_end",
    "proc_start",
    "process_alive",
    "run_alive",
    "run_mark",
    "scheduler_wait",
    "survivors",
]


#: The note of a start row: the run process's start time (clock ticks after boot, from
#: /proc), so that a pid the kernel has since given to another process is not taken for it.
PROC_START: Final = "proc-start "


def proc_start(pid: int | str) -> str | None:
    """When process ``pid`` started (``/proc/PID/stat`` field 22), or None when unknown."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ")".
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


#: The environment variable that marks every process a run starts (its tasks, its
#: workers) with the run's pid and start time: a task that outlives its run is found by it.
RUN_VAR: Final = "ZOTSINK_RUN"


def run_mark(pid: int | str, started: str) -> str:
    """The value of :data:`RUN_VAR` for the run process ``pid`` that started at ``started``."""
    return f"{pid}:{started}"


#: Seconds a look for a gone run's survivors serves (one look at the pid table, not one
#: per task of the run).
SURVIVORS_TTL: Final = 1.0
_survivors: dict[str, tuple[bool, float]] = {}


def survivors(mark: str) -> bool:
    """Whether a process of this user on this host carries ``mark`` (:func:`run_mark`) in
    its environment: a task (or a process a task started) of a run that is gone."""
    known = _survivors.get(mark)
    if known is not None and time.monotonic() - known[1] < SURVIVORS_TTL:
        return known[0]
    found = _look_for(mark)
    _survivors[mark] = found, time.monotonic()
    return found


def _look_for(mark: str) -> bool:
    want = f"{RUN_VAR}={mark}".encode()
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return False
    for name in pids:
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:  # gone, or another user's
            continue
        if env.startswith(want + b"\0") or b"\0" + want + b"\0" in env:
            return True
    return False


def process_alive(pid: str, note: str = "") -> bool:
    """Whether the run process of a start row (its ``pid``, and ``note`` with its start
    time when the row has one) still runs on this host, or a process it started does."""
    started = note[len(PROC_START) :].strip() if note.startswith(PROC_START) else None
    try:
        os.kill(int(pid), 0)
    except (ValueError, OverflowError, ProcessLookupError):
        return started is not None and survivors(run_mark(pid, started))
    except PermissionError:
        pass  # another user's process: alive, unless its start time says it is another
    if started is not None:
        now = proc_start(pid)
        if now is not None and now != started:
            # the pid was given to another process since
            return survivors(run_mark(pid, started))
    return True


def run_alive(
    host: str, pid: str, note: str, job: str, here: str, element: str = ""
) -> bool | None:
    """Whether the run process of a ``start`` row (its host, pid, note, job and array
    element) still runs: from this host's pid table when it ran here, else from the
    scheduler that ran its job (the array element, not the whole array: Slurm's
    ``JOB_ELEMENT``, Grid Engine's task, PBS's ``JOB[ELEMENT]``); None when neither can
    tell (then the task counts as running in reports; a ``--pull`` run leaves it with its
    run, a chunked run may claim it again: its results still count once)."""
    if host == here:
        return process_alive(pid, note)
    return job_alive(job_key(job, element))
