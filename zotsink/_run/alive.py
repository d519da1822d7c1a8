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
from collections.abc import Mapping
from typing import Any, Final

from .._core.stamp import TASKNUM_VAR
from .._ledger.format import element_text, parse_element
from .backends import job_cluster, job_key
from .scheduler import (
    ANSWER_TTL,
    SCHEDULER_WAIT,
    forget_jobs,
    job_alive,
    job_end,
    scheduler_wait,
)

__all__ = [
    "ANSWER_TTL",
    "PROC_START",
    "RUN_VAR",
    "SCHEDULER_WAIT",
    "Judge",
    "element_key",
    "forget_jobs",
    "host_identity",
    "job_alive",
    "job_end",
    "proc_start",
    "process_alive",
    "qualified_job",
    "run_alive",
    "run_element",
    "run_mark",
    "scheduler_wait",
    "survivor_tasks",
    "survivors",
]


#: The note of a start row: the run process's start time (clock ticks after boot, from
#: /proc), so that a pid the kernel has since given to another process is not taken for it.
PROC_START: Final = "proc-start "


def proc_start(pid: int | str) -> str | None:
    """When process ``pid`` started (``/proc/PID/stat`` field 22), or None when unknown."""
    got = _stat(pid)
    return None if got is None else got[1]


def _stat(pid: int | str) -> tuple[str, str] | None:
    """Process ``pid``'s state letter and start time (``/proc/PID/stat`` fields 3 and
    22), or None when unknown."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ")".
    fields = data[data.rfind(b")") + 2 :].split()
    return (fields[0].decode(), fields[19].decode()) if len(fields) > 19 else None


def _ended(got: tuple[str, str] | None) -> bool:
    """A zombie (``Z``) or a dead task (``X``) has ended: nobody reaped it yet (a run's
    worker whose run was killed, until init collects it)."""
    return got is not None and got[0] in ("Z", "X")


#: The environment variable that marks every process a run starts (its tasks, its
#: workers) with the run's pid and start time: a task that outlives its run is found by it.
RUN_VAR: Final = "ZOTSINK_RUN"


def run_mark(pid: int | str, started: str) -> str:
    """The value of :data:`RUN_VAR` for the run process ``pid`` that started at ``started``."""
    return f"{pid}:{started}"


#: Seconds a look for a gone run's survivors serves (one look at the pid table, not one
#: per task of the run).
SURVIVORS_TTL: Final = 1.0
_survivors: dict[str, tuple[frozenset[str], float]] = {}


def survivors(mark: str) -> bool:
    """Whether a process of this user on this host carries ``mark`` (:func:`run_mark`) in
    its environment: a task (or a process a task started) of a run that is gone."""
    return bool(survivor_tasks(mark))


def survivor_tasks(mark: str) -> frozenset[str]:
    """The task numbers (``ZOTSINK_TASKNUM``, "" for a process without one) of the processes
    of this user on this host that carry ``mark``: a task that began in the moment before
    its run wrote its ``begin`` row is found by its own number, and a helper another task
    left behind (a daemon it started) speaks for that task only."""
    known = _survivors.get(mark)
    if known is not None and time.monotonic() - known[1] < SURVIVORS_TTL:
        return known[0]
    found = _look_for(mark)
    _survivors[mark] = found, time.monotonic()
    return found


def _look_for(mark: str) -> frozenset[str]:
    want = f"{RUN_VAR}={mark}".encode()
    task_var = TASKNUM_VAR.encode() + b"="
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return frozenset()
    found: set[str] = set()
    for name in pids:
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:  # gone, or another user's
            continue
        if not (env.startswith(want + b"\0") or b"\0" + want + b"\0" in env):
            continue
        num = ""
        for item in env.split(b"\0"):
            if item.startswith(task_var):
                num = item[len(task_var) :].decode("ascii", "replace")
        found.add(num)
    return frozenset(found)


def host_identity() -> tuple[str, str]:
    """This host's name and what tells its pid table from any other's: its boot (a pid of
    before a reboot is no process now) and its pid namespace (two containers with one host
    name see two tables), as ``BOOT.PIDNS``."""
    host = os.uname().nodename
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip().replace("-", "")[:12]
    except OSError:
        boot = "0"
    try:
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        ns = "0"
    return host, f"{boot}.{ns}"


def run_element(index: str, env: Mapping[str, str]) -> str:
    """The ``element`` a run's row names: its array index, and how often the scheduler had
    started the element again when the run began (Slurm's ``SLURM_RESTART_COUNT``: a
    requeue, a preemption, a node's failure), so that the runs of an element's earlier
    start are never taken for the live one's."""
    restart = env.get("SLURM_RESTART_COUNT", "") if env.get("SLURM_JOB_ID") else ""
    return element_text(index, int(restart) if restart.isdigit() else 0)


def element_key(job: str, element: str) -> str:
    """The key a run's job (``[CLUSTER:]JOB``, as its row names it) and element are asked
    about as a whole, whichever start of it: ``[CLUSTER:]JOB[_INDEX]`` ("" without a job)."""
    cluster, _, bare = job.rpartition(":")
    return job_key(bare, parse_element(element)[0], cluster)


def qualified_job(job: str, env: Mapping[str, str]) -> str:
    """A job id as the ledger writes it: ``CLUSTER:JOB`` where the scheduler names its
    cluster (:func:`~zotsink._run.backends.job_cluster`; a site with several clusters has
    several jobs of one number), else ``JOB``."""
    if not job:
        return ""
    cluster = job_cluster(env)
    return f"{cluster}:{job}" if cluster else job


def _exact_alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` lives and started at ``start`` (a pid given to another
    process since is not it)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError, ValueError):
        return False
    except PermissionError:
        pass  # another user's process: alive, unless its start time says it is another
    got = _stat(pid)
    if _ended(got):
        return False
    return got is None or not start or got[1] == start


class Judge:
    """Whether the runs and tasks of a ledger live, asked of this host's pid table where the
    row's host is this one (same boot, same pid namespace), else of the scheduler that ran
    the row's job (about the array element). Each run is asked once per judge: make one
    per look. ``wait``: seconds the scheduler may take in all (None: its own limit; 0: only
    what it answered before, the question stays out for the next look)."""

    def __init__(self, *, wait: float | None = 0.0) -> None:
        self.host, self.hostid = host_identity()
        self.wait = wait

    def _here(self, run: Any) -> bool | None:
        """True: the run's pid table is this one; False: surely another host's, or of a
        boot gone; None: a format 1 row (judged by host name, as that release did)."""
        if not run.hostid:
            return None
        return run.hostid == self.hostid

    def _gone_boot(self, run: Any) -> bool:
        """The run's host is this one, before a reboot: nothing of it lives."""
        if not run.hostid or run.host != self.host:
            return False
        theirs, mine = run.hostid.partition(".")[0], self.hostid.partition(".")[0]
        return theirs != mine

    def _scheduler(self, run: Any) -> bool | None:
        if run.superseded:
            return False  # a later start of its element wrote its run row: this one is over
        # a job of another cluster: the backend asks that cluster, or says None; about
        # this run's start of the element (a requeued element is alive again, and the
        # runs of its earlier start are not)
        cluster, _, job = run.job.rpartition(":")
        index, restart = parse_element(run.element)
        name = job_key(job, index, cluster, restart if job else -1)
        if self.wait is None:
            return job_alive(name)
        with scheduler_wait(self.wait):
            return job_alive(name)

    def run_alive(self, run: Any) -> bool | None:
        here = self._here(run)
        if here:
            return _exact_alive(int(run.pid or 0), run.start)
        if here is None and run.host == self.host:
            return process_alive(run.pid, PROC_START + run.start if run.start else "")
        if self._gone_boot(run):
            return False
        return self._scheduler(run)

    def task_alive(self, run: Any, pid: int, start: str) -> bool | None:
        here = self._here(run)
        if here:
            return _exact_alive(pid, start)
        if here is None and run.host == self.host:
            return process_alive(str(pid), PROC_START + start if start else "")
        if self._gone_boot(run):
            return False
        element = self._scheduler(run)
        return None if element else element  # the element lives on: its process is unseen

    def workers_alive(self, run: Any) -> bool:
        if not self._here(run):
            return False  # another host: a dead element took everything with it
        return any(_exact_alive(pid, start) for pid, start in run.workers)

    def claim_held(self, run: Any, num: int) -> bool:
        if not self._here(run) or not run.start:
            return False
        return str(num) in survivor_tasks(run_mark(run.pid, run.start))


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
    got = _stat(pid)
    if _ended(got):
        return started is not None and survivors(run_mark(pid, started))
    if started is not None and got is not None and got[1] != started:
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
