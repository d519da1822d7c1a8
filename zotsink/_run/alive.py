"""Whether the run that wrote a ledger's ``start`` row is still alive.

On the same host the pid table answers, checked against the process's start time that the
row notes (a pid the kernel gave to another process since does not count); a run whose own
process is gone still counts as alive while a process it started lives on (a command task
in its own session survives a SIGKILL of its run, and must not be started twice at once):
every task carries the run's mark in its environment (:data:`RUN_VAR`, :func:`run_mark`).
For a run on another host the scheduler that ran its job does (Slurm's ``squeue`` about the
array element; Grid Engine's ``qstat -g d`` about the array task, ``qstat -j`` about a
job; PBS's ``qstat -f`` about the subjob or job), asked at most once per
:data:`ANSWER_TTL` seconds per job, in a thread: ``status`` stops waiting for an
answer after a few seconds (:func:`scheduler_wait`) and says so, and takes the answer when
it comes on a later redraw.
"""

from __future__ import annotations

import atexit
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any, Final

__all__ = [
    "ANSWER_TTL",
    "PROC_START",
    "RUN_VAR",
    "SCHEDULER_WAIT",
    "Judge",
    "forget_jobs",
    "host_identity",
    "job_alive",
    "job_end",
    "pbs_alive",
    "pbs_end",
    "pbs_fields",
    "proc_start",
    "process_alive",
    "qualified_job",
    "run_alive",
    "run_mark",
    "scheduler_wait",
    "sge_end",
    "sge_tasks",
    "slurm_end",
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


#: The environment variables that name the cluster a job's id belongs to, per scheduler
#: (a PBS job's id names its server itself).
_CLUSTER_VARS: Final = ("SLURM_CLUSTER_NAME", "SGE_CLUSTER_NAME")


def qualified_job(job: str, env: Mapping[str, str]) -> str:
    """A job id as the ledger writes it: ``CLUSTER:JOB`` where the scheduler names its
    cluster (a site with several clusters has several jobs of one number), else ``JOB``."""
    if not job:
        return ""
    for name in _CLUSTER_VARS:
        cluster = env.get(name, "")
        if cluster:
            return f"{cluster}:{job}"
    return job


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
    now = proc_start(pid)
    return now is None or not start or now == start


class Judge:
    """Whether the runs and tasks of a ledger live, asked of this host's pid table where the
    row's host is this one (same boot, same pid namespace), else of the scheduler that ran
    the row's job (about the array element). Each run is asked once per judge: make one
    per look. ``wait``: seconds the scheduler may take in all (None: its own limit; 0: only
    what it answered before, the question stays out for the next look)."""

    def __init__(self, env: Mapping[str, str] | None = None, *, wait: float | None = 0.0) -> None:
        self.host, self.hostid = host_identity()
        self.cluster = qualified_job("x", os.environ if env is None else env)[:-2]
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
        cluster, sep, job = run.job.rpartition(":")
        if sep and cluster != self.cluster:
            return None  # a job of another cluster: not this scheduler's to judge
        name = f"{job}_{run.element}" if job and run.element else job
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

    def claims_held(self, run: Any) -> bool:
        if not self._here(run):
            return False  # another host: a dead element took everything with it
        if any(_exact_alive(pid, start) for pid, start in run.workers):
            return True
        return bool(run.start) and survivors(run_mark(run.pid, run.start))


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
    whole, _, element = job.partition("_")
    if element != "" and not element.isdigit():
        return None
    scheduler = _scheduler(os.environ)
    if scheduler == "slurm" and whole.isdigit():
        # a job Slurm no longer lists (or no longer knows) is neither queued nor running
        got = _command(["squeue", "-h", "-j", job, "-o", "%T"])
        if got is None:
            return None
        code, out, err = got
        if code == 0:
            return bool(out.strip())
        return False if b"Invalid job id" in err else None
    if scheduler == "sge" and whole.isdigit():
        if element:
            # `qstat -j` answers of the whole array: a task that ended would count as
            # alive while any sibling is queued or running
            listing = _sge_listing()
            return None if listing is None else (whole, element) in listing
        got = _command(["qstat", "-j", whole])
        if got is None:
            return None
        code, out, err = got
        if code == 0:
            return True
        return False if b"do not exist" in out + err else None
    if scheduler == "pbs" and _PBS_ID.match(whole):
        ident = f"{whole.partition('.')[0]}[{element}]" if element else whole
        got = _command(["qstat", "-f", ident])
        return None if got is None else pbs_alive(*got)
    return None


def _scheduler(env: Mapping[str, str]) -> str | None:
    """The scheduler to ask: the one this process runs under (its job's variables), else
    the one whose commands this host has (Slurm's ``squeue``; Grid Engine's and PBS's
    ``qstat``, told apart by the command the other has not: ``qconf``, ``pbsnodes``; a
    Grid Engine user's environment names its root). A host with the clients of two
    schedulers asks the one its job came from: another's "no such job" is no answer."""
    import shutil

    if env.get("SLURM_JOB_ID"):
        return "slurm" if shutil.which("squeue") else None
    if env.get("JOB_ID") and env.get("SGE_TASK_ID"):
        return "sge" if shutil.which("qstat") else None
    if env.get("PBS_JOBID"):
        return "pbs" if shutil.which("qstat") else None
    if env.get("SGE_ROOT") and shutil.which("qstat"):
        return "sge"
    if shutil.which("squeue"):
        return "slurm"
    if not shutil.which("qstat"):
        return None
    if shutil.which("qconf"):
        return "sge"
    return "pbs" if shutil.which("pbsnodes") else None


#: Seconds one listing of Grid Engine's tasks answers for every array task asked about:
#: the questions about many elements of one array come together.
SGE_LISTING_TTL: Final = 1.0
_sge_lock = threading.Lock()
_sge_last: tuple[float, frozenset[tuple[str, str]] | None] = (-SGE_LISTING_TTL, None)


def _sge_listing() -> frozenset[tuple[str, str]] | None:
    """Every (job, task) Grid Engine has queued or running, of every user (``qstat -g d``
    lists each array task on a line of its own); None when qstat fails."""
    global _sge_last
    with _sge_lock:
        at, listing = _sge_last
        if time.monotonic() - at < SGE_LISTING_TTL:
            return listing
        got = _command(["qstat", "-g", "d", "-u", "*"])
        listing = None if got is None or got[0] != 0 else sge_tasks(got[1])
        _sge_last = time.monotonic(), listing
        return listing


def sge_tasks(out: bytes) -> frozenset[tuple[str, str]]:
    """The (job, task) pairs of ``qstat -g d`` output: a job's line starts with its number
    and holds, for an array task, the task's under the header's ``ja-task-ID`` (a job
    without an array leaves it blank: its line ends with its slots)."""
    found = set()
    column = -1
    for line in out.decode("utf-8", "replace").splitlines():
        if column < 0:
            column = line.find("ja-task-ID")
            continue
        fields = line.split()
        task = line[column:].split()
        if fields and fields[0].isdigit() and task and task[0].isdigit():
            found.add((fields[0], task[0]))
    return frozenset(found)


#: A PBS job id as the ledger keeps it: the number, perhaps with its server.
_PBS_ID: Final = re.compile(r"^[0-9]+(\.[A-Za-z0-9.-]+)?$")
#: PBS job states of a job that ended: finished (history kept), a subjob that ended,
#: Torque's completed.
_PBS_ENDED: Final = frozenset({"F", "X", "C"})


def pbs_fields(out: bytes) -> dict[str, str]:
    """The ``name = value`` attributes of ``qstat -f`` output (long values wrapped onto
    lines that start with a tab are joined)."""
    fields: dict[str, str] = {}
    name = ""
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith("\t") and name:
            fields[name] += line.strip()
            continue
        key, eq, value = line.strip().partition(" = ")
        if eq:
            name = key
            fields[name] = value.strip()
    return fields


def pbs_alive(code: int, out: bytes, err: bytes) -> bool | None:
    """Whether ``qstat -f JOB`` (its exit code and output) shows a job queued or running."""
    if code == 0:
        state = pbs_fields(out).get("job_state")
        return None if state is None else state not in _PBS_ENDED
    said = out + err
    return False if b"Unknown Job Id" in said or b"Job has finished" in said else None


def job_end(env: Mapping[str, str]) -> float | None:
    """When this process's job must end (its walltime), as ``time.time()`` seconds, from
    the scheduler that runs it: Slurm (``squeue -o %e`` of ``SLURM_JOB_ID``), Grid Engine
    (the task's start and its ``h_rt`` or ``s_rt``, from ``qstat -j JOB_ID -xml``), PBS
    (``qstat -f`` of ``PBS_JOBID``: the walltime left, or the start and the walltime);
    None when none tells."""
    import shutil

    job = env.get("SLURM_JOB_ID", "")
    if job.isdigit() and shutil.which("squeue"):
        got = _command(["squeue", "-h", "-j", job, "-o", "%e"])
        if got is None or got[0] != 0:
            return None
        return slurm_end(got[1])
    job = env.get("JOB_ID", "")
    if job.isdigit() and "SGE_TASK_ID" in env and shutil.which("qstat"):
        got = _command(["qstat", "-j", job, "-xml"])
        if got is None or got[0] != 0:
            return None
        task = env.get("SGE_TASK_ID", "")
        return sge_end(got[1], task if task.isdigit() else "1")
    job = env.get("PBS_JOBID", "")
    if job and shutil.which("qstat"):
        got = _command(["qstat", "-f", job])
        if got is None or got[0] != 0:
            return None
        return pbs_end(pbs_fields(got[1]), time.time())
    return None


def slurm_end(out: bytes) -> float | None:
    """The end time ``squeue -o %e`` printed (local time), or None ("N/A", "Unknown")."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(out.decode("utf-8", "replace").strip()).timestamp()
    except ValueError:
        return None


def sge_end(xml: bytes, task: str) -> float | None:
    """The end of array task ``task`` (1 outside an array) by ``qstat -j JOB -xml``: its
    start time and the job's hard or soft run time limit, the sooner; None without either."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    limits = []
    for request in root.iter("qstat_l_requests"):
        if request.findtext("CE_name") in ("h_rt", "s_rt"):
            seconds = _number(request.findtext("CE_doubleval"))
            if seconds is not None and seconds > 0:
                limits.append(seconds)
    start = None
    for entry in root.iter("ulong_sublist"):
        if entry.findtext("JAT_task_number") == task:
            start = _number(entry.findtext("JAT_start_time"))
    if not limits or not start:
        return None
    while start > 1e11:  # milliseconds or microseconds since the epoch in some releases
        start /= 1000
    return start + min(limits)


def pbs_end(fields: Mapping[str, str], now: float) -> float | None:
    """The end of a PBS job by the attributes of its ``qstat -f``: Torque's
    ``Walltime.Remaining`` from ``now``, else its start (``stime``, PBS Pro, local time;
    ``start_time``, Torque, seconds since the epoch) and ``Resource_List.walltime``."""
    from datetime import datetime

    left = _number(fields.get("Walltime.Remaining"))
    if left is not None:
        return now + left
    walltime = _hms(fields.get("Resource_List.walltime", ""))
    if walltime is None:
        return None
    start = _number(fields.get("start_time"))
    if start is None:
        try:
            start = datetime.strptime(fields.get("stime", ""), "%a %b %d %H:%M:%S %Y").timestamp()
        except ValueError:
            return None
    return start + walltime


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _hms(text: str) -> float | None:
    """Seconds of ``[[HH:]MM:]SS``, None when it is not that."""
    parts = text.strip().split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds
