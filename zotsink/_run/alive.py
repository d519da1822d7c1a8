"""Whether the run that wrote a ledger's ``start`` row is still alive.

On the same host the pid table answers, checked against the process's start time that the
row notes (a pid the kernel gave to another process since does not count); a run whose own
process is gone still counts as alive while a process it started lives on (a command task
in its own session survives a SIGKILL of its run, and must not be started twice at once):
every task carries the run's mark in its environment (:data:`RUN_VAR`, :func:`run_mark`).
For a run on another host the scheduler that ran its job does (Slurm's ``squeue`` about the
array element, Grid Engine's ``qstat``), asked at most once per :data:`ANSWER_TTL` seconds
per job, in a thread: ``status`` stops waiting for an
answer after a few seconds (:func:`scheduler_wait`) and says so, and takes the answer when
it comes on a later redraw.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Final

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
    scheduler that ran its job (Slurm: the array element ``JOB_ELEMENT``, not the whole
    array; Grid Engine); None when neither can tell (then the task counts as running in
    reports; a ``--pull`` run leaves it with its run, a chunked run may claim it again:
    its results still count once)."""
    if host == here:
        return process_alive(pid, note)
    return job_alive(f"{job}_{element}" if job and element else job)


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


#: Seconds an answer of the scheduler serves: an element that ends is seen within this,
#: without a question per claim.
ANSWER_TTL: Final = 30.0
_job_answers: dict[str, tuple[bool | None, float]] = {}  # answers got, and when
_last_answers: dict[str, bool | None] = {}  # the latest answer of each job, however old
_queries: dict[str, _Query] = {}  # questions still out
_deadline: float | None = None  # see scheduler_wait
_unanswered: set[str] = set()


def job_alive(job: str) -> bool | None:
    """Whether the scheduler still has job ``job`` queued or running; None when no
    scheduler command on this host can tell. Asked at most once per :data:`ANSWER_TTL`
    seconds per job; ``JOB_ELEMENT`` asks about one element of array job ``JOB``.

    Inside :func:`scheduler_wait` a question the scheduler has not answered by the deadline
    gives the job's previous answer (None when there was none) and is noted; the question
    stays out, and its answer serves the next call."""
    if not job:
        return None
    known = _job_answers.get(job)
    if known is not None and time.monotonic() - known[1] < ANSWER_TTL:
        return known[0]
    query = _queries.get(job)
    if query is None:
        query = _queries[job] = _Query(job)
    wait = None if _deadline is None else max(0.0, _deadline - time.monotonic())
    if not query.done.wait(wait):
        _unanswered.add(job)
        return _last_answers.get(job)
    del _queries[job]
    _job_answers[job] = query.answer, time.monotonic()
    _last_answers[job] = query.answer
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

    whole, _, element = job.partition("_")
    if not whole.isdigit() or not (element == "" or element.isdigit()):
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
        got = _command(["qstat", "-j", whole])  # Grid Engine answers of the whole job
        return None if got is None else got[0] == 0
    return None


def job_end(env: Mapping[str, str]) -> float | None:
    """When this process's job must end (its walltime), as ``time.time()`` seconds, from
    the scheduler (Slurm: ``squeue -o %e`` of ``SLURM_JOB_ID``); None when none tells."""
    import shutil
    from datetime import datetime

    job = env.get("SLURM_JOB_ID", "")
    if not job.isdigit() or not shutil.which("squeue"):
        return None
    got = _command(["squeue", "-h", "-j", job, "-o", "%e"])
    if got is None or got[0] != 0:
        return None
    text = got[1].decode("utf-8", "replace").strip()
    try:
        return datetime.fromisoformat(text).timestamp()  # local time, as squeue prints it
    except ValueError:
        return None  # "N/A", "Unknown": no limit known
