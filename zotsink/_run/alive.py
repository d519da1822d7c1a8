"""Whether the run that wrote a ledger's ``start`` row is still alive.

On the same host the pid table answers, checked against the process's start time that the
row notes (a pid the kernel gave to another process since does not count); for a run on
another host the scheduler that ran its job does (Slurm's ``squeue``, Grid Engine's
``qstat``), asked once per job per process, in a thread: ``status`` stops waiting for an
answer after a few seconds (:func:`scheduler_wait`) and says so, and takes the answer when
it comes on a later redraw.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Final

__all__ = [
    "PROC_START",
    "SCHEDULER_WAIT",
    "forget_jobs",
    "job_alive",
    "proc_start",
    "process_alive",
    "run_alive",
    "scheduler_wait",
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


#: Seconds ``zotsink status`` waits for the scheduler's answers in all (see
#: :func:`scheduler_wait`): a busy login node, or one whose controller is unreachable, can
#: take far longer, and the ledger's counts must not wait for it.
SCHEDULER_WAIT: Final = 3.0
#: Seconds a scheduler command may take before it counts as no answer: it runs in a thread
#: of its own, so only a caller without a deadline (``run`` claiming tasks) waits this long.
_ASK_TIMEOUT: Final = 30.0


class _Query:
    """One question to the scheduler about one job, asked in a thread of its own so that a
    caller with a deadline stops waiting while it still runs."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.answer: bool | None = None
        self.done = threading.Event()
        threading.Thread(target=self._ask, name=f"zotsink-scheduler-{job}", daemon=True).start()

    def _ask(self) -> None:
        try:
            self.answer = _ask_scheduler(self.job)
        finally:
            self.done.set()


_job_answers: dict[str, bool | None] = {}  # answers got since the last forget_jobs()
_last_answers: dict[str, bool | None] = {}  # the latest answer of each job, however old
_queries: dict[str, _Query] = {}  # questions still out
_deadline: float | None = None  # see scheduler_wait
_unanswered: set[str] = set()


def job_alive(job: str) -> bool | None:
    """Whether the scheduler still has job ``job`` queued or running; None when no
    scheduler command on this host can tell. Asked once per job per process.

    Inside :func:`scheduler_wait` a question the scheduler has not answered by the deadline
    gives the job's previous answer (None when there was none) and is noted; the question
    stays out, and its answer serves the next call."""
    if not job:
        return None
    if job in _job_answers:
        return _job_answers[job]
    query = _queries.get(job)
    if query is None:
        query = _queries[job] = _Query(job)
    wait = None if _deadline is None else max(0.0, _deadline - time.monotonic())
    if not query.done.wait(wait):
        _unanswered.add(job)
        return _last_answers.get(job)
    del _queries[job]
    _job_answers[job] = _last_answers[job] = query.answer
    return query.answer


def forget_jobs() -> None:
    """Ask the scheduler afresh from now on: a ``status --watch`` outlives the jobs it
    asked about, and must see them end."""
    _job_answers.clear()


@contextmanager
def scheduler_wait(seconds: float) -> Iterator[set[str]]:
    """Within the block, :func:`job_alive` waits at most ``seconds`` in all for the
    scheduler; the set given is filled, at the block's end, with the jobs it did not
    answer about in time."""
    global _deadline
    _deadline = time.monotonic() + seconds
    _unanswered.clear()
    late: set[str] = set()
    try:
        yield late
    finally:
        late.update(_unanswered)
        _deadline = None


_children: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _end_questions() -> None:
    # a scheduler command still out when this process ends is of no use to anybody
    for child in list(_children):
        with suppress(OSError):
            child.kill()


def _command(argv: list[str]) -> tuple[int, bytes, bytes] | None:
    """Run a scheduler command: its exit code, stdout and stderr; None when it cannot be
    started or takes longer than :data:`_ASK_TIMEOUT`."""
    try:
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError:
        return None
    _children.add(child)
    try:
        out, err = child.communicate(timeout=_ASK_TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return None
    finally:
        _children.discard(child)
    return child.returncode, out, err


def _ask_scheduler(job: str) -> bool | None:
    import shutil

    if not job.isdigit():
        return None
    if shutil.which("squeue"):
        # a job Slurm no longer lists (or no longer knows) is neither queued nor running
        got = _command(["squeue", "-h", "-j", job, "-o", "%T"])
        if got is None:
            return None
        code, out, err = got
        if code == 0:
            return bool(out.strip())
        return False if b"Invalid job id" in err else None
    if shutil.which("qstat"):
        got = _command(["qstat", "-j", job])
        return None if got is None else got[0] == 0
    return None
