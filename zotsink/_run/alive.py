"""Whether the run that wrote a ledger's ``start`` row is still alive.

On the same host the pid table answers, checked against the process's start time that the
row notes (a pid the kernel gave to another process since does not count); for a run on
another host the scheduler that ran its job does (Slurm's ``squeue``, Grid Engine's
``qstat``), asked once per job per process.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["PROC_START", "forget_jobs", "job_alive", "proc_start", "process_alive", "run_alive"]


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


def process_alive(pid: str, note: str = "") -> bool:
    """Whether the run process of a start row (its ``pid``, and ``note`` with its start
    time when the row has one) still runs on this host."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, OverflowError, ProcessLookupError):
        return False
    except PermissionError:
        pass  # another user's process: alive, unless its start time says it is another
    if note.startswith(PROC_START):
        now = proc_start(pid)
        if now is not None and now != note[len(PROC_START) :].strip():
            return False  # the pid was given to another process since
    return True


def run_alive(host: str, pid: str, note: str, job: str, here: str) -> bool | None:
    """Whether the run process of a ``start`` row (its host, pid, note and job) still runs:
    from this host's pid table when it ran here, else from the scheduler that ran its job
    (Slurm, Grid Engine); None when neither can tell (then the task counts as running in
    reports, and a run may claim it again: its results still count once)."""
    if host == here:
        return process_alive(pid, note)
    return job_alive(job)


_job_answers: dict[str, bool | None] = {}


def job_alive(job: str) -> bool | None:
    """Whether the scheduler still has job ``job`` queued or running; None when no
    scheduler command on this host can tell. Asked once per job per process."""
    if not job:
        return None
    if job not in _job_answers:
        _job_answers[job] = _ask_scheduler(job)
    return _job_answers[job]


def forget_jobs() -> None:
    """Ask the scheduler afresh from now on: a ``status --watch`` outlives the jobs it
    asked about, and must see them end."""
    _job_answers.clear()


def _ask_scheduler(job: str) -> bool | None:
    import shutil
    import subprocess

    if not job.isdigit():
        return None
    if shutil.which("squeue"):
        # a job Slurm no longer lists (or no longer knows) is neither queued nor running
        try:
            r = subprocess.run(
                ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if r.returncode == 0:
            return bool(r.stdout.strip())
        return False if b"Invalid job id" in r.stderr else None
    if shutil.which("qstat"):
        try:
            r = subprocess.run(["qstat", "-j", job], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.returncode == 0
    return None
