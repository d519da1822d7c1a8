"""Asking the batch scheduler: one backend per scheduler, one runner of its commands, one asker.

A backend (:class:`Slurm`, :class:`GridEngine`, :class:`PBS`, behind :class:`Backend`)
knows one scheduler's commands and what their output means: whether a job or an array
element is queued or running, when this process's job must end, and which cluster this
job belongs to. The backend is chosen once per process from the environment
(:func:`choose`): the scheduler that started this process's job, else the one whose
commands are on ``PATH``.

Invariants:

- **None is "cannot tell", never "dead".** Only the scheduler's own word that it no
  longer has a job gives False; a command that fails, hangs, cannot be started or prints
  what no parser knows gives None.
- **A job of another cluster is never judged dead by this cluster's scheduler.** A job is
  named ``[CLUSTER:]JOB[_ELEMENT]`` (:func:`job_key`, :func:`parse_job`); Slurm asks the
  cluster named (``squeue -M CLUSTER``: a failure is None); Grid Engine and PBS say None
  about a cluster that is not theirs.
- **A scheduler command never holds its caller past its deadline** (:func:`run_command`):
  it runs in a session of its own with stdin from ``/dev/null``; at the deadline its whole
  process group is killed and its pipes are closed unread, so a hung grandchild of a site's
  wrapper script that holds them open is nobody's wait; it is reaped where nobody waits.
  A command still out when this process exits is killed with its group.
- **A start of an element is told from the element.** A key may name the start
  (``+RESTART``: Slurm's restart count when the run began): the scheduler's element,
  started again since (a requeue, a preemption, a node's failure) and no longer ending,
  says that start is over, while the element itself is queued or running again.
- **What one job submits is clean of the job it runs in** (:meth:`Backend.job_env`): a
  successor that inherited ``SLURM_ARRAY_TASK_ID`` or ``JOB_ID`` would take itself for
  another element, a ``TMPDIR`` of a job that ended would not exist.
- **The thread that must obey stop signals never waits on a scheduler without end.**
  :meth:`Asker.ask` answers at once (from what is known) and asks in a daemon thread, at
  most one question per job at a time, each answer kept :data:`ANSWER_TTL` seconds;
  :meth:`Asker.wait` waits for an answer at most as long as it is told, and not past a
  stop signal that the process's :class:`~zotsink._core.stop.Stopper` notes.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Final, Generic, NamedTuple, Protocol, TypeVar

from .._core.fileio import file_kind, open_regular
from .._core.stop import current_stopper
from .schedout import (
    pbs_alive,
    pbs_end,
    pbs_fields,
    sge_end,
    sge_tasks,
    slurm_end,
    slurm_start_over,
    submitted_job,
)

__all__ = [
    "ANSWER_TTL",
    "COMMAND_TIMEOUT",
    "MAX_INPUT",
    "PBS",
    "SCHEDULER_WAIT",
    "SGE_LISTING_TTL",
    "Answer",
    "Asker",
    "Backend",
    "Errand",
    "GridEngine",
    "JobRef",
    "Slurm",
    "array_alive",
    "asker",
    "choose",
    "forget_jobs",
    "job_alive",
    "job_cluster",
    "job_end",
    "job_key",
    "parse_job",
    "read_script",
    "reset",
    "run_command",
    "scheduler_wait",
]

T = TypeVar("T")

#: Seconds a scheduler command may take before it counts as no answer (its process group
#: is then killed): a controller that does not answer must not hold a run.
COMMAND_TIMEOUT: Final = 30.0
#: Seconds an answer of the scheduler serves: an element that ends is seen within this,
#: without a question per claim.
ANSWER_TTL: Final = 30.0
#: Seconds ``zotsink status`` waits for the scheduler's answers in all (see
#: :func:`scheduler_wait`): a busy login node, or one whose controller is unreachable, can
#: take far longer, and the ledger's counts must not wait for it.
SCHEDULER_WAIT: Final = 3.0
#: Seconds one listing of Grid Engine's tasks answers for every array task asked about:
#: the questions about many elements of one array come together.
SGE_LISTING_TTL: Final = 1.0


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


def array_alive(job: str) -> bool | None:
    """PBS about a whole array job (``JOB[].SERVER``), which a question about one subjob
    does not cover: queued or running (None: cannot tell)."""
    got = run_command(["qstat", "-f", job])
    return None if got is None else pbs_alive(*got)


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


# -- naming a job ------------------------------------------------------------------------------
class JobRef(NamedTuple):
    """A job as asked about: its cluster ("" when not named), its id, its array element
    ("" for the whole job) and, when the question is about one start of it, that start's
    restart count (-1: any start; the job or element as it is now)."""

    cluster: str
    job: str
    element: str
    restart: int = -1


def job_key(job: str, element: str = "", cluster: str = "", restart: int = -1) -> str:
    """The key of a job for :meth:`Asker.ask`: ``[CLUSTER:]JOB[_ELEMENT][+RESTART]`` (""
    without a job); ``+RESTART`` asks whether that start of it is still under way."""
    if not job:
        return ""
    key = f"{job}_{element}" if element else job
    if restart >= 0:
        key += f"+{restart}"
    return f"{cluster}:{key}" if cluster else key


def job_cluster(env: Mapping[str, str]) -> str:
    """The cluster the job of environment ``env`` belongs to, as the ledger qualifies its
    job ids with: Slurm's ``SLURM_CLUSTER_NAME``; Grid Engine's ``SGE_CLUSTER_NAME``, else
    ``SGE_CELL``; "" for PBS (its job id names its server) and outside a job."""
    if env.get("SLURM_JOB_ID"):
        return env.get("SLURM_CLUSTER_NAME", "")
    if env.get("JOB_ID") and env.get("SGE_TASK_ID"):
        return env.get("SGE_CLUSTER_NAME") or env.get("SGE_CELL", "")
    return ""


def parse_job(key: str) -> JobRef:
    """A key of :func:`job_key` as its parts."""
    cluster, colon, rest = key.partition(":")
    if not colon:
        cluster, rest = "", key
    rest, plus, restart = rest.rpartition("+") if "+" in rest else (rest, "", "")
    job, _, element = rest.partition("_")
    return JobRef(cluster, job, element, int(restart) if plus and restart.isdigit() else -1)


# -- the backends ------------------------------------------------------------------------------
class Backend(Protocol):
    """One scheduler's commands, and what their output means."""

    #: What the scheduler is called: ``slurm``, ``sge``, ``pbs``.
    name: str
    #: The cluster this process's job belongs to; "" when its environment does not say.
    cluster: str
    #: Whether the environment it was chosen from is a job of this scheduler.
    in_job: bool

    def alive(self, job: JobRef) -> bool | None:
        """Whether the scheduler still has ``job`` (an array element when it names one)
        queued or running; False only on the scheduler's word, None when it cannot tell."""
        ...

    def end(self) -> float | None:
        """When this process's job must end (its walltime), as ``time.time()`` seconds;
        None when the scheduler does not tell."""
        ...

    def job_script(self, env: Mapping[str, str]) -> tuple[bytes | None, str]:
        """The script of the job of environment ``env`` as it was submitted (None, and
        why, when the scheduler does not tell)."""
        ...

    def job_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` without what this scheduler set for the job it describes (its ids, its
        array index, its temporary directory): the environment a job it submits starts
        from."""
        ...

    def submit(
        self,
        script: bytes,
        env: Mapping[str, str],
        like: Mapping[str, str],
        cwd: str | None = None,
    ) -> tuple[str | None, str]:
        """Submit ``script`` (given on stdin, its array directives dropped: one job) with
        the environment ``env``, from directory ``cwd`` (the job's working directory;
        default: this process's), named and placed like the job of environment ``like``
        (its name, and for Slurm its partition, account, QOS, CPUs and memory: the options
        a first submission may have given on its command line); the new job's id, or
        None and the scheduler's message."""
        ...


def _ids_ok(job: JobRef) -> bool:
    return job.job.isdigit() and (job.element == "" or job.element.isdigit())


class Slurm:
    """Slurm: ``squeue`` about a job or element (``-M CLUSTER`` about another cluster's),
    ``squeue -o %e`` for this job's end; the cluster is ``SLURM_CLUSTER_NAME``."""

    name = "slurm"

    def __init__(self, env: Mapping[str, str]) -> None:
        self.cluster = env.get("SLURM_CLUSTER_NAME", "")
        self._job = env.get("SLURM_JOB_ID", "")
        self.in_job = bool(self._job)
        self._no_restarts = False  # this squeue knows no RestartCnt

    def alive(self, job: JobRef) -> bool | None:
        if not _ids_ok(job):
            return None
        ident = f"{job.job}_{job.element}" if job.element else job.job
        other = job.cluster != "" and job.cluster != self.cluster
        where = ["-M", job.cluster] if other else []
        starts = job.restart >= 0 and not self._no_restarts
        # the restart count tells a start of an element from a later one (-O: a squeue
        # older than that field refuses the format, and is asked as before)
        form = ["-O", "State,RestartCnt"] if starts else ["-o", "%T"]
        got = run_command(["squeue", *where, "-h", "-j", ident, *form])
        if got is None:
            return None
        if got.code == 0:
            # a job Slurm no longer lists is neither queued nor running; with -M a line
            # names the cluster before its jobs
            said = got.out.decode("utf-8", "replace").splitlines()
            lines = [s for s in said if s.strip() and not s.startswith("CLUSTER:")]
            if not lines:
                return False
            if starts and len(lines[0].split()) >= 2:
                over = slurm_start_over(lines, job.restart)
                return None if over is None else not over
            return True
        if starts and b"format" in got.err:
            self._no_restarts = True
            return self.alive(job)
        if other:
            return None  # that cluster could not be asked: no word about its job
        # a job Slurm no longer knows at all is not queued or running either
        return False if b"Invalid job id" in got.err else None

    def job_script(self, env: Mapping[str, str]) -> tuple[bytes | None, str]:
        job = env.get("SLURM_JOB_ID", "")
        if not job.isdigit():
            return None, "no Slurm job here (SLURM_JOB_ID is not set)"
        got = run_command(["scontrol", "write", "batch_script", job, "-"])
        if got is None:
            return None, "scontrol write batch_script gave no answer in time"
        if got.code != 0 or not got.out.startswith(b"#!"):
            return None, f"scontrol write batch_script {job}: {_said(got)}"
        return got.out, ""

    def job_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {
            k: v
            for k, v in env.items()
            if not k.startswith(("SLURM_", "SLURMD_")) or k in _SLURM_KEEP
        }

    def submit(
        self,
        script: bytes,
        env: Mapping[str, str],
        like: Mapping[str, str],
        cwd: str | None = None,
    ) -> tuple[str | None, str]:
        argv = ["sbatch", "--parsable"]
        for var, option in _SLURM_CARRY:
            if like.get(var):
                argv.append(f"{option}={like[var]}")
        memory = like.get("SLURM_MEM_PER_NODE") or ""
        if memory.isdigit():
            argv.append(f"--mem={memory}M")
        elif (like.get("SLURM_MEM_PER_CPU") or "").isdigit():
            argv.append(f"--mem-per-cpu={like['SLURM_MEM_PER_CPU']}M")
        return _submitted("slurm", argv, single(script, b"#SBATCH", _SLURM_ARRAY), env, cwd)

    def end(self) -> float | None:
        if not self._job.isdigit():
            return None
        got = run_command(["squeue", "-h", "-j", self._job, "-o", "%e"])
        if got is None or got.code != 0:
            return None
        return slurm_end(got.out)


class GridEngine:
    """Grid Engine: ``qstat -g d`` lists every array task (one listing serves the questions
    about many), ``qstat -j`` about a job, ``qstat -j -xml`` for this task's end; the
    cluster is ``SGE_CLUSTER_NAME``, else ``SGE_CELL``."""

    name = "sge"

    def __init__(self, env: Mapping[str, str]) -> None:
        self.cluster = env.get("SGE_CLUSTER_NAME") or env.get("SGE_CELL", "")
        self._job = env.get("JOB_ID", "")
        self.in_job = bool(self._job)
        task = env.get("SGE_TASK_ID", "")
        self._task = task if task.isdigit() else "1"  # "undefined" outside an array
        self._lock = threading.Lock()
        self._listing: tuple[float, frozenset[tuple[str, str]] | None] = (-math.inf, None)

    def alive(self, job: JobRef) -> bool | None:
        if not _ids_ok(job) or job.cluster not in ("", self.cluster):
            return None  # another cell's qstat: "no such job" would be no answer
        if job.element:
            # `qstat -j` answers of the whole array: a task that ended would count as
            # alive while any sibling is queued or running
            listing = self._tasks()
            return None if listing is None else (job.job, job.element) in listing
        got = run_command(["qstat", "-j", job.job])
        if got is None:
            return None
        if got.code == 0:
            return True
        return False if b"do not exist" in got.out + got.err else None

    def _tasks(self) -> frozenset[tuple[str, str]] | None:
        """Every (job, task) Grid Engine has queued or running, of every user; None when
        qstat fails. One listing serves for :data:`SGE_LISTING_TTL` seconds."""
        with self._lock:
            at, listing = self._listing
            if time.monotonic() - at < SGE_LISTING_TTL:
                return listing
            got = run_command(["qstat", "-g", "d", "-u", "*"])
            listing = None if got is None or got.code != 0 else sge_tasks(got.out)
            self._listing = time.monotonic(), listing
            return listing

    def end(self) -> float | None:
        if not self._job.isdigit():
            return None
        got = run_command(["qstat", "-j", self._job, "-xml"])
        if got is None or got.code != 0:
            return None
        return sge_end(got.out, self._task)

    def job_script(self, env: Mapping[str, str]) -> tuple[bytes | None, str]:
        path = env.get("JOB_SCRIPT", "")
        if not path:
            return None, "no Grid Engine job here (JOB_SCRIPT is not set)"
        return read_script(path, "this job's script")

    def job_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {
            k: v
            for k, v in env.items()
            if k not in _SGE_JOB_VARS and not k.startswith(("SGE_TASK_", "SGE_O_"))
        }

    def submit(
        self,
        script: bytes,
        env: Mapping[str, str],
        like: Mapping[str, str],
        cwd: str | None = None,
    ) -> tuple[str | None, str]:
        argv = ["qsub", "-terse"]
        if like.get("JOB_NAME"):
            argv += ["-N", like["JOB_NAME"]]
        # -V in a script exports what qsub is given; these reach the job either way
        names = [k for k in env if k.startswith("ZOTSINK_")]
        if names:
            argv += ["-v", ",".join(names)]
        return _submitted("sge", argv, single(script, b"#$", _SGE_ARRAY), env, cwd)


#: A PBS job id as the ledger keeps it: the number, perhaps with its server.
_PBS_ID: Final = re.compile(r"^[0-9]+(\.[A-Za-z0-9.-]+)?$")


class PBS:
    """PBS Pro and Torque: ``qstat -f`` about a job or subjob, and for this job's end; the
    cluster is the server of ``PBS_JOBID``, else ``PBS_SERVER``."""

    name = "pbs"

    def __init__(self, env: Mapping[str, str]) -> None:
        self._job = env.get("PBS_JOBID", "")
        self.in_job = bool(self._job)
        server = self._job.partition(".")[2]
        self.cluster = server or env.get("PBS_SERVER", "")

    def alive(self, job: JobRef) -> bool | None:
        if not _PBS_ID.match(job.job) or not (job.element == "" or job.element.isdigit()):
            return None
        if job.cluster not in ("", self.cluster):
            return None  # another server's job: its "unknown job" would be no answer
        ident = f"{job.job.partition('.')[0]}[{job.element}]" if job.element else job.job
        got = run_command(["qstat", "-f", ident])
        return None if got is None else pbs_alive(*got)

    def end(self) -> float | None:
        if not self._job:
            return None
        got = run_command(["qstat", "-f", self._job])
        if got is None or got.code != 0:
            return None
        return pbs_end(pbs_fields(got.out), time.time())

    def job_script(self, env: Mapping[str, str]) -> tuple[bytes | None, str]:
        # PBS keeps a job's script in the MOM's spool, which the job cannot read
        return None, "PBS does not give a job its own script: give --relay-script FILE"

    def job_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {
            k: v
            for k, v in env.items()
            if not (k.startswith("PBS_") and k not in _PBS_KEEP) and k not in _PBS_JOB_VARS
        }

    def submit(
        self,
        script: bytes,
        env: Mapping[str, str],
        like: Mapping[str, str],
        cwd: str | None = None,
    ) -> tuple[str | None, str]:
        argv = ["qsub"]
        if like.get("PBS_JOBNAME"):
            argv += ["-N", like["PBS_JOBNAME"]]
        names = [k for k in env if k.startswith("ZOTSINK_")]
        if names:
            argv += ["-v", ",".join(names)]
        return _submitted("pbs", argv, single(script, b"#PBS", _PBS_ARRAY), env, cwd)


# -- submitting: what a job carries, and what it drops ------------------------------------------
#: Slurm's variables a job keeps for the client commands it runs (set by the user, not by
#: the job): the configuration, the clusters asked, the time format.
_SLURM_KEEP: Final = frozenset({"SLURM_CONF", "SLURM_CLUSTERS", "SLURM_TIME_FORMAT"})
#: What a Slurm job's environment says of it that its successor is submitted with: a
#: first submission's command line (``sbatch --cpus-per-task=8 job.sbatch``) is not in
#: its script.
_SLURM_CARRY: Final = (
    ("SLURM_JOB_NAME", "--job-name"),
    ("SLURM_JOB_PARTITION", "--partition"),
    ("SLURM_JOB_ACCOUNT", "--account"),
    ("SLURM_JOB_QOS", "--qos"),
    ("SLURM_CPUS_PER_TASK", "--cpus-per-task"),
)
#: Grid Engine's variables of a job (man sge_intro, qsub's ENVIRONMENTAL VARIABLES), and
#: the temporary directory it makes and removes with the job.
_SGE_JOB_VARS: Final = frozenset(
    {
        "JOB_ID", "JOB_NAME", "JOB_SCRIPT", "NSLOTS", "NHOSTS", "NQUEUES", "QUEUE", "PE",
        "PE_HOSTFILE", "RESTARTED", "REQUEST", "ENVIRONMENT", "ARC", "HOSTNAME",
        "SGE_STDIN_PATH", "SGE_STDOUT_PATH", "SGE_STDERR_PATH", "SGE_JOB_SPOOL_DIR",
        "SGE_CWD_PATH", "SGE_BINARY_PATH", "SGE_ARCH", "TMPDIR", "TMP",
    }
)  # fmt: skip
#: PBS's client settings a job keeps; the job's own variables besides PBS_* (PBS Pro sets
#: NCPUS and OMP_NUM_THREADS from its request, and a TMPDIR of its own).
_PBS_KEEP: Final = frozenset({"PBS_SERVER", "PBS_CONF_FILE", "PBS_EXEC", "PBS_HOME"})
_PBS_JOB_VARS: Final = frozenset({"NCPUS", "OMP_NUM_THREADS", "TMPDIR", "ENVIRONMENT"})
#: The array directives of a job script, by scheduler: a successor is one job.
_SLURM_ARRAY: Final = re.compile(rb"^#SBATCH[ \t]+(--array\b|-a\b|-a\S)")
_SGE_ARRAY: Final = re.compile(rb"^#\$[ \t]+-t\b")
_PBS_ARRAY: Final = re.compile(rb"^#PBS[ \t]+-[Jt]\b")


def single(script: bytes, prefix: bytes, array: re.Pattern[bytes]) -> bytes:
    """``script`` without the array directives of its leading block of comments (where a
    scheduler reads directives: up to the first line that is neither blank nor a
    comment): one job, not an array of them."""
    out: list[bytes] = []
    leading = True
    for line in script.splitlines(keepends=True):
        bare = line.strip()
        if leading and bare and not bare.startswith(b"#"):
            leading = False
        if leading and bare.startswith(prefix) and array.match(bare):
            continue
        out.append(line)
    return b"".join(out)


def _said(got: Answer) -> str:
    """A failed command's words: its last line of stderr (else of stdout), or its exit."""
    for stream in (got.err, got.out):
        lines = [ln for ln in stream.decode("utf-8", "replace").splitlines() if ln.strip()]
        if lines:
            return lines[-1].strip()
    return f"exit {got.code}, no message"


def _submitted(
    kind: str, argv: list[str], script: bytes, env: Mapping[str, str], cwd: str | None
) -> tuple[str | None, str]:
    """Run a submission command with ``script`` on stdin: the job id, or None and why."""
    if len(script) > MAX_INPUT:
        return None, f"the job script is {len(script)} bytes, over the {MAX_INPUT} submitted"
    got = run_command(argv, input=script, env=env, cwd=cwd)
    if got is None:
        return None, f"{argv[0]} gave no answer within {COMMAND_TIMEOUT:g} s"
    if got.code != 0:
        return None, f"{argv[0]} exited {got.code}: {_said(got)}"
    job = submitted_job(kind, got.out)
    if job is None:
        return None, f"{argv[0]} printed no job id: {_said(got)}"
    return job, ""


def choose(env: Mapping[str, str]) -> Backend | None:
    """The scheduler to ask: the one this process runs under (its job's variables), else
    the one whose commands this host has (Slurm's ``squeue``; Grid Engine's and PBS's
    ``qstat``, told apart by the command the other has not: ``qconf``, ``pbsnodes``; a
    Grid Engine user's environment names its root). A host with the clients of two
    schedulers asks the one its job came from: another's "no such job" is no answer.
    None when no scheduler's commands are here."""
    path = env.get("PATH") or os.environ.get("PATH", os.defpath)
    has = {c: shutil.which(c, path=path) is not None for c in ("squeue", "qstat")}
    kind: type[Slurm | GridEngine | PBS] | None
    if env.get("SLURM_JOB_ID"):
        kind = Slurm if has["squeue"] else None
    elif env.get("JOB_ID") and env.get("SGE_TASK_ID"):
        kind = GridEngine if has["qstat"] else None
    elif env.get("PBS_JOBID"):
        kind = PBS if has["qstat"] else None
    elif env.get("SGE_ROOT") and has["qstat"]:
        kind = GridEngine
    elif has["squeue"]:
        kind = Slurm
    elif not has["qstat"]:
        kind = None
    elif shutil.which("qconf", path=path):
        kind = GridEngine
    else:
        kind = PBS if shutil.which("pbsnodes", path=path) else None
    return None if kind is None else kind(env)


# -- asking without waiting --------------------------------------------------------------------
class _Question(Generic[T]):
    """One question in a daemon thread of its own; waited for with a deadline, and not past
    a stop signal (see :meth:`wait`)."""

    def __init__(self, name: str, work: Callable[[], T]) -> None:
        self.answer: T | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._wakers: list[int] = []  # write ends of the pipes waiters poll
        threading.Thread(
            target=self._ask, args=(work,), name=f"zotsink-scheduler-{name}", daemon=True
        ).start()

    def _ask(self, work: Callable[[], T]) -> None:
        try:
            self.answer = work()
        except Exception:  # output no parser foresaw is no answer, and no crash
            self.answer = None
        finally:
            with self._lock:
                self.done.set()
                for fd in self._wakers:
                    with suppress(OSError):
                        os.write(fd, b"!")

    def wait(self, timeout: float | None) -> bool:
        """Whether the answer came within ``timeout`` seconds (None: as long as it takes,
        which :data:`COMMAND_TIMEOUT` bounds). A stop signal noted by the process's
        :class:`~zotsink._core.stop.Stopper` ends the wait at once: a run told to stop
        does not wait for the scheduler."""
        stopper = current_stopper()
        if stopper is None:
            return self.done.wait(timeout)
        with self._lock:
            if self.done.is_set():
                return True
            r, w = os.pipe()
            self._wakers.append(w)
        try:
            poller = select.poll()
            poller.register(r, select.POLLIN)
            poller.register(stopper.wakeup_fd, select.POLLIN)
            end = None if timeout is None else time.monotonic() + timeout
            while not self.done.is_set():
                if stopper.signum is not None:
                    return False
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                for fd, _ in poller.poll(None if left is None else math.ceil(left * 1000)):
                    if fd == stopper.wakeup_fd:
                        # a signal's byte: the stopper's handler has noted it by the next
                        # look at signum; emptied, or the poll would spin on it
                        _empty(fd)
            return True
        finally:
            with self._lock:
                self._wakers.remove(w)
            os.close(r)
            os.close(w)


class Errand(Generic[T]):
    """Work that may take a scheduler command's whole deadline (a submission), done in a
    daemon thread of its own for a poll loop that must not wait: :meth:`fileno` becomes
    readable once it is done, and :meth:`result` then holds what it gave (None, and the
    exception's words, when it raised)."""

    def __init__(self, name: str, work: Callable[[], T]) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self._answer: T | None = None
        self._error = ""
        self.done = threading.Event()
        threading.Thread(target=self._do, args=(work,), name=f"zotsink-{name}", daemon=True).start()

    def _do(self, work: Callable[[], T]) -> None:
        try:
            self._answer = work()
        except Exception as e:  # what the work did not foresee is its answer, no crash
            self._error = f"{type(e).__name__}: {e}"
        finally:
            self.done.set()
            # the write end is the thread's own: closed here, never by another, so that
            # its number is never another file's when the byte is written
            with suppress(OSError):
                os.write(self._w, b"!")
            os.close(self._w)

    def fileno(self) -> int:
        return self._r

    def result(self) -> tuple[T | None, str]:
        """What the work gave, and the words of an exception it raised ("")."""
        return self._answer, self._error

    def close(self) -> None:
        """Let go of the read end (the thread, if still at work, ends on its own)."""
        with suppress(OSError):
            os.close(self._r)


def _empty(fd: int) -> None:
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        with suppress(OSError):
            os.read(fd, 512)
    finally:
        os.set_blocking(fd, blocking)


class Asker:
    """Questions to one backend about jobs (keys of :func:`job_key`), asked in daemon
    threads, at most one out per job; each answer serves :data:`ANSWER_TTL` seconds."""

    def __init__(self, backend: Backend | None) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._fresh: dict[str, tuple[bool | None, float]] = {}  # answers, and when got
        self._last: dict[str, bool | None] = {}  # the latest answer of each job, however old
        self._out: dict[str, _Question[bool | None]] = {}  # questions still out
        self._asked: dict[str, float] = {}  # when each answer's question was asked (wall)
        self._sent: dict[str, float] = {}  # when each question out was asked (wall)

    def ask(self, key: str) -> bool | None:
        """At once: the answer about job ``key`` got within :data:`ANSWER_TTL` seconds;
        else a question is asked (unless one is out already) and the latest answer, however
        old, is given meanwhile (None when there was none). None for "" and where no
        scheduler is."""
        return self._look(key)[0]

    def since(self, key: str, after: float) -> bool | None:
        """At once: the answer about job ``key`` to a question asked at ``after``
        (``time.time()`` seconds) or later, whatever its age; else None, and a question is
        asked (unless one is out already). A job the scheduler once said it no longer has
        is gone for good: False, however old that answer. For a decision that needs a word
        newer than an event (an element said it exits: is it gone now?)."""
        if not key or self.backend is None:
            return None
        with self._lock:
            self._settle()
            last = self._last.get(key, None)
            if key in self._last and (last is False or self._asked.get(key, -math.inf) >= after):
                return last
            if key not in self._out:
                backend, job = self.backend, parse_job(key)
                self._out[key] = _Question(key, lambda: backend.alive(job))
                self._sent[key] = time.time()
            return None

    def wait(self, key: str, timeout: float | None) -> bool | None:
        """The answer about job ``key``, waiting for it at most ``timeout`` seconds (None:
        until the command's deadline) and not past a stop signal; when it has not come by
        then, what :meth:`ask` gives (the question stays out)."""
        answer, question = self._look(key)
        if question is None or not question.wait(timeout):
            return answer
        return self._look(key)[0]

    def answers(self) -> dict[str, bool | None]:
        """The answers that still serve, by job."""
        now = time.monotonic()
        with self._lock:
            self._settle()
            return {k: a for k, (a, at) in self._fresh.items() if now - at < ANSWER_TTL}

    def pending(self) -> frozenset[str]:
        """The jobs a question is out about."""
        with self._lock:
            self._settle()
            return frozenset(self._out)

    def forget(self) -> None:
        """Ask afresh from now on (the latest answers still serve while the questions are
        out): a ``status --watch`` outlives the jobs it asked about, and must see them end."""
        with self._lock:
            self._settle()
            self._fresh.clear()

    def _look(self, key: str) -> tuple[bool | None, _Question[bool | None] | None]:
        """What is known about ``key`` now, and the question out about it (None: an answer
        that serves, or nothing to ask)."""
        if not key or self.backend is None:
            return None, None
        with self._lock:
            self._settle()
            got = self._fresh.get(key)
            if got is not None and time.monotonic() - got[1] < ANSWER_TTL:
                return got[0], None
            question = self._out.get(key)
            if question is None:
                backend, job = self.backend, parse_job(key)
                question = self._out[key] = _Question(key, lambda: backend.alive(job))
                self._sent[key] = time.time()
            return self._last.get(key), question

    def _settle(self) -> None:
        """Take the answers that came in (under the lock)."""
        for key, question in list(self._out.items()):
            if question.done.is_set():
                del self._out[key]
                self._fresh[key] = question.answer, time.monotonic()
                self._last[key] = question.answer
                self._asked[key] = self._sent.pop(key, 0.0)


_asker: Asker | None = None
_asker_lock = threading.Lock()


def asker() -> Asker:
    """This process's :class:`Asker`, its backend chosen once from its environment."""
    global _asker
    with _asker_lock:
        if _asker is None:
            _asker = Asker(choose(os.environ))
        return _asker


def reset() -> None:
    """Choose the backend again at the next question, and forget every answer: for a
    process whose environment changed (tests)."""
    global _asker
    with _asker_lock:
        _asker = None


# -- today's callers: status waits a while, run until an answer or a stop ----------------------
_deadline: float | None = None  # see scheduler_wait
_unanswered: set[str] = set()


def job_alive(job: str) -> bool | None:
    """Whether the scheduler still has job ``job`` (a key of :func:`job_key`) queued or
    running; None when no scheduler command on this host can tell. Waits for the answer
    until the command's deadline or a stop signal; inside :func:`scheduler_wait` at most
    until the block's deadline, and a job not answered about by then is noted (its
    previous answer serves, None when there was none; the question stays out, and its
    answer serves the next call)."""
    ask = asker()
    if _deadline is None:
        return ask.wait(job, None)
    got = ask.wait(job, max(0.0, _deadline - time.monotonic()))
    if job in ask.pending():
        _unanswered.add(job)
    return got


def forget_jobs() -> None:
    """Ask the scheduler afresh from now on: a ``status --watch`` outlives the jobs it
    asked about, and must see them end."""
    asker().forget()


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


def job_end(env: Mapping[str, str]) -> float | None:
    """When the job of the environment ``env`` must end (its walltime), as ``time.time()``
    seconds, from the scheduler that runs it: Slurm (``squeue -o %e`` of
    ``SLURM_JOB_ID``), Grid Engine (the task's start and its ``h_rt`` or ``s_rt``, from
    ``qstat -j JOB_ID -xml``), PBS (``qstat -f`` of ``PBS_JOBID``: the walltime left, or
    the start and the walltime); None when none tells, or when a stop signal comes first."""
    backend = choose(env)
    if backend is None:
        return None
    question = _Question("end", backend.end)
    return question.answer if question.wait(None) else None
