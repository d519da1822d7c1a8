"""An Executor's elements: ``elements`` processes that each run ``zotsink run CALLS OUT
--follow --call zotsink._executor.serve:call`` (through :mod:`zotsink._executor.element`),
started as one array job of a scheduler or as processes of this machine; whether they live;
and the cancel of those still queued.

Invariants: an element is nobody's child in a way that ends it with the client. A local
element runs in a session of its own (no terminal's hang-up or Ctrl-C reaches it), with
stdin, stdout and stderr on ``/dev/null`` (no pipe to the client that a dead client would
break); a scheduler's element is the scheduler's. Its Python is the client's
(``sys.executable``), with the client's import path and working directory, so that it
imports what the client could; the scheduler's own output goes to ``/dev/null`` (no file per
element: what an element has to say goes to the Executor's settings file, the run's log
and its ledger). What was started is recorded by the caller as an event, so that a client
attached later knows which elements to ask about.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from .._run.alive import job_alive, proc_start
from .._run.backends import array_alive, choose
from .._run.schedcmd import run_command
from ..errors import UsageError

__all__ = [
    "SCHEDULERS",
    "Started",
    "alive",
    "cancel_queued",
    "element_argv",
    "pick_scheduler",
    "start",
]

#: The schedulers an Executor submits to, and the command that submits to each.
SUBMIT: Final = {"slurm": "sbatch", "sge": "qsub", "pbs": "qsub"}
SCHEDULERS: Final = ("local", *SUBMIT)
#: The name the scheduler shows for an Executor's array job.
JOB_NAME: Final = "zotsink-executor"
#: Seconds a scheduler's command may take.
COMMAND_TIMEOUT: Final = 60.0


def pick_scheduler(choice: str) -> str:
    """The scheduler for ``choice`` (``auto``: the one this host has, as the run asks it,
    :func:`~zotsink._run.backends.choose`, when its submit command is here too; else
    ``local``); UsageError for an unknown one, or one whose command is missing."""
    if choice == "auto":
        backend = choose(os.environ)
        if backend is not None and shutil.which(SUBMIT[backend.name]):
            return backend.name
        return "local"
    if choice not in SCHEDULERS:
        raise UsageError(
            f"scheduler {choice!r}: choose auto, {', '.join(SCHEDULERS)} (local: processes "
            "on this machine)"
        )
    command = SUBMIT.get(choice)
    if command is not None and not shutil.which(command):
        raise UsageError(
            f"scheduler {choice!r}: {command} is not on PATH here (load the scheduler's "
            "module, or run where it is); scheduler='local' runs the elements on this machine"
        )
    return choice


class Started(NamedTuple):
    """Elements started at once: an array job (``job``), or processes on ``host``."""

    scheduler: str
    count: int
    job: str = ""  # the scheduler's job id
    host: str = ""  # local: where the processes run
    pids: tuple[tuple[int, str], ...] = ()  # local: (pid, its start time)

    def key(self) -> tuple[str, str, tuple[tuple[int, str], ...]]:
        """What tells these elements from others: the same job, or the same processes."""
        return (self.scheduler, self.job, self.pids)

    def to_event(self) -> dict[str, Any]:
        return {
            "event": "elements",
            "scheduler": self.scheduler,
            "count": self.count,
            "job": self.job,
            "pids": [list(p) for p in self.pids],
        }

    @classmethod
    def of_event(cls, event: dict[str, Any]) -> Started | None:
        """The elements an ``elements`` event names; None for a malformed one."""
        try:
            pids = tuple((int(p), str(s)) for p, s in event.get("pids", ()))
            return cls(
                str(event["scheduler"]),
                int(event["count"]),
                str(event.get("job", "")),
                str(event.get("host", "")),
                pids,
            )
        except (KeyError, TypeError, ValueError):
            return None


def element_argv(directory: str) -> list[str]:
    """The command of one element: this Python, with this process's import path and
    working directory, running :func:`zotsink._executor.element.main` on ``directory``."""
    home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path: list[str] = []
    for p in [home, *sys.path]:
        full = os.path.abspath(p) if p else os.getcwd()
        if full not in path:
            path.append(full)
    code = (
        f"import os, sys; sys.path[:0] = {path!r}; os.chdir({os.getcwd()!r}); "
        "from zotsink._executor.element import main; sys.exit(main(sys.argv[1]))"
    )
    return [sys.executable, "-c", code, os.path.abspath(directory)]


def start(
    scheduler: str,
    count: int,
    directory: str,
    submit_args: Sequence[str],
) -> tuple[Started, list[subprocess.Popen[bytes]]]:
    """Start ``count`` elements for the Executor in ``directory``: what was started, and
    the local processes (for their parent to reap). UsageError when the scheduler refuses."""
    argv = element_argv(directory)
    if scheduler == "local":
        procs = [
            subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
            for _ in range(count)
        ]
        pids = tuple((p.pid, proc_start(p.pid) or "") for p in procs)
        return Started("local", count, "", os.uname().nodename, pids), procs
    script = "#!/bin/sh\nexec " + shlex.join(argv) + "\n"
    if scheduler == "slurm":
        command = [
            "sbatch",
            "--parsable",
            f"--array=1-{count}",
            f"--job-name={JOB_NAME}",
            "--output=/dev/null",
            *submit_args,
        ]
    elif scheduler == "sge":
        command = [
            "qsub",
            "-terse",
            "-t",
            f"1-{count}",
            "-N",
            JOB_NAME,
            "-S",
            "/bin/sh",
            "-V",
            "-j",
            "y",
            "-o",
            "/dev/null",
            *submit_args,
        ]
    else:  # pbs: an array needs two elements or more
        array = ["-J", f"1-{count}"] if count > 1 else []
        command = ["qsub", *array, "-N", JOB_NAME, "-V", "-j", "oe", "-o", "/dev/null"]
        command += submit_args
    job = _submit(command, script)
    return Started(scheduler, count, job, os.uname().nodename), []


def _submit(command: list[str], script: str) -> str:
    """Submit ``script`` (on stdin) with ``command``: the job id it printed."""
    got = run_command(command, COMMAND_TIMEOUT, input=script.encode())
    if got is None:
        raise UsageError(
            f"{shlex.join(command)} could not submit the elements: it could not be started, "
            f"or did not end within {COMMAND_TIMEOUT:g} s"
        )
    out = got.out.decode("utf-8", "replace").strip()
    if got.code != 0 or not out:
        said = (got.err or got.out).decode("utf-8", "replace").strip()
        raise UsageError(
            f"{shlex.join(command)} refused the elements (exit {got.code}): "
            f"{said or 'no reason given'}; check submit_args"
        )
    # sbatch --parsable: JOB[;CLUSTER]; qsub -terse: JOB.1-N:1; PBS: JOB[].SERVER or JOB.SERVER
    first = out.splitlines()[-1].split(";")[0]
    return first.split(".")[0] if command[0] == "qsub" and "-terse" in command else first


def alive(started: Started, procs: Sequence[subprocess.Popen[bytes]] = ()) -> bool:
    """Whether an element of ``started`` may still run: queued or running for the
    scheduler (or the scheduler cannot tell), a process that lives (or one on another
    host, which nothing here can tell of). ``procs``: the ones this process started, whose
    ends it reaps."""
    if started.scheduler == "local":
        if procs:
            return any(p.poll() is None for p in procs)
        if started.host != os.uname().nodename:
            return True
        return any(_process_alive(pid, start) for pid, start in started.pids)
    if started.scheduler == "pbs":
        return array_alive(started.job) is not False
    return job_alive(started.job) is not False


def _process_alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` is the one started at ``start`` and has not ended (a zombie
    has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return False
    if not fields or fields[0] == b"Z":
        return False
    return not start or proc_start(pid) == start


def cancel_queued(started: Started) -> None:
    """Cancel what is still queued of ``started`` (Slurm: the pending elements; Grid Engine
    and PBS: the job, whose running elements end as at a walltime stop). Local elements
    have nothing queued. A scheduler that cannot be asked is let be: the elements that
    begin later find the cancel in the settings file."""
    if started.scheduler == "local" or not started.job:
        return
    if started.scheduler == "slurm":
        command = ["scancel", "--state=PENDING", started.job]
    else:
        command = ["qdel", started.job]
    run_command(command, COMMAND_TIMEOUT)
