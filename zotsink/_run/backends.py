"""The batch schedulers, one backend each: what a job is, how to ask about it, how to submit one.

A backend (:class:`Slurm`, :class:`GridEngine`, :class:`PBS`, behind :class:`Backend`)
knows one scheduler's commands (run by :func:`~zotsink._run.schedcmd.run_command`) and
what their output means (:mod:`zotsink._run.schedout`): whether a job or an array element
is queued or running, when this process's job must end, which cluster this job belongs
to, its script, and how a successor is submitted. The backend is chosen once per process
from the environment (:func:`choose`): the scheduler that started this process's job, else
the one whose commands are on ``PATH``.

Invariants:

- **None is "cannot tell", never "dead".** Only the scheduler's own word that it no
  longer has a job gives False; a command that fails, hangs, cannot be started or prints
  what no parser knows gives None.
- **A job of another cluster is never judged dead by this cluster's scheduler.** A job is
  named ``[CLUSTER:]JOB[_ELEMENT]`` (:func:`job_key`, :func:`parse_job`); Slurm asks the
  cluster named (``squeue -M CLUSTER``: a failure is None); Grid Engine and PBS say None
  about a cluster that is not theirs.
- **A start of an element is told from the element.** A key may name the start
  (``+RESTART``: Slurm's restart count when the run began): the scheduler's element,
  started again since (a requeue, a preemption, a node's failure) and no longer ending,
  says that start is over, while the element itself is queued or running again.
- **What one job submits is clean of the job it runs in** (:meth:`Backend.job_env`): a
  successor that inherited ``SLURM_ARRAY_TASK_ID`` or ``JOB_ID`` would take itself for
  another element, a ``TMPDIR`` of a job that ended would not exist.

Nothing here waits without end for its caller's sake: :mod:`zotsink._run.scheduler` asks
the backends in threads of their own.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import threading
import time
from collections.abc import Mapping
from typing import Final, NamedTuple, Protocol

from .schedcmd import COMMAND_TIMEOUT, MAX_INPUT, Answer, read_script, run_command
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
    "PBS",
    "SGE_LISTING_TTL",
    "Backend",
    "GridEngine",
    "JobRef",
    "Slurm",
    "array_alive",
    "choose",
    "job_cluster",
    "job_key",
    "parse_job",
    "single",
]

#: Seconds one listing of Grid Engine's tasks answers for every array task asked about:
#: the questions about many elements of one array come together.
SGE_LISTING_TTL: Final = 1.0


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


def array_alive(job: str) -> bool | None:
    """PBS about a whole array job (``JOB[].SERVER``), which a question about one subjob
    does not cover: queued or running (None: cannot tell)."""
    got = run_command(["qstat", "-f", job])
    return None if got is None else pbs_alive(*got)
