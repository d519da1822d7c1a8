"""A run's options, checked: what ``run_tasks`` was asked to do, before anything is opened.

:func:`checked_options` turns ``run_tasks``'s arguments into :class:`RunOptions` or raises
the :class:`~zotsink.errors.UsageError` that names the first option that cannot work; the
steps of a run (:mod:`zotsink._run.runner`) read only the checked options.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .._arrays import scheduler_index
from .._core.fileio import same_file
from .._core.options import MAX_TIMEOUT, WriteOptions, check_seconds
from .._core.outcheck import check_side_file
from .._core.stop import Stopper
from ..errors import UsageError
from .alive import job_end
from .frames import names_file
from .relay import relay_lead
from .state import Progress
from .successor import relay_backend
from .worker import call_spec, function_spec

__all__ = ["RunOptions", "checked_options"]


def _check_runchecked_options(retries: int, grace: float, task_timeout: float | None) -> None:
    """run's own options, worded as the shared ones are (see write_options)."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise UsageError(f"retries (--retries) must be a whole number >= 0, not {retries!r}")
    check_seconds("grace", grace, MAX_TIMEOUT)
    if task_timeout is not None and check_seconds("task_timeout", task_timeout, MAX_TIMEOUT) == 0:
        raise UsageError("task_timeout (--task-timeout) must be more than 0 seconds, not 0")


def _call_shaped(command: Sequence[str]) -> bool:
    """Whether CMD is one argument shaped as ``--call`` takes it, ``FILE.py:FUNC`` (a file
    that exists) or ``package.module:FUNC``, and no command of that name is on PATH: the
    ``--call`` forgotten. Run as a command it would fail every task, and record a command
    in the ledger that was never meant."""
    if len(command) != 1:
        return False
    where, sep, name = command[0].rpartition(":")
    if not sep or not where or not name.isidentifier():
        return False
    if names_file(where):
        shaped = where.endswith(".py") and os.path.isfile(where)
    else:
        shaped = all(part.isidentifier() for part in where.split("."))
    return shaped and shutil.which(command[0]) is None


def _jobs(jobs: int | str, env: Mapping[str, str]) -> int:
    """``--jobs``: a number, or ``auto``."""
    if jobs == "auto":
        # the CPUs the scheduler gave this element (Slurm, Grid Engine's slots, PBS), else
        # the ones this process may run on
        for name in ("SLURM_CPUS_PER_TASK", "NSLOTS", "NCPUS"):
            cpus = env.get(name, "")
            if cpus.isdigit() and int(cpus) > 0:
                return int(cpus)
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    try:
        n = int(jobs)
    except ValueError:
        raise UsageError(f"--jobs must be a number or auto, not {jobs!r}") from None
    if n < 1:
        raise UsageError(f"--jobs must be at least 1, not {n}")
    return n


class RunOptions(NamedTuple):
    """run_tasks's options, checked: what the steps of a run read."""

    tasks: str
    out: str
    ledger_path: str
    log_path: str
    command: tuple[str, ...]
    call: str | None
    shell: bool
    index: int | None  # the array index (given, else the scheduler's); None: every task
    chunk: int
    base: int
    jobs: int
    rerun: bool
    retries: int
    task_timeout: float | None
    grace: float
    max_attempts: int | None
    halt_after: int | None
    new_settings: bool
    write: WriteOptions
    env: dict[str, str]
    stopper: Stopper | None
    progress: Callable[[Progress], None] | None
    pull: bool = False  # the whole list, whatever the index; dead runs' tasks taken over
    follow: bool = False  # lines appended while the run is live are tasks
    idle: float | None = None
    deadline: float | None = None  # time.time() seconds (given; a pull run: the scheduler's)
    task_time: float | None = None
    relay: int | None = None  # --relay N: keep the list's chain of elements at N
    relay_script: str | None = None  # what a successor is (absolute); None: this job's script
    max_relays: int | None = None


def checked_options(
    tasks: str | os.PathLike[str],
    out: str | os.PathLike[str],
    command: Sequence[str],
    *,
    call: str | None,
    function: Callable[[str], Any] | None,
    index: int | None,
    chunk: int,
    base: int,
    jobs: int | str,
    shell: bool,
    rerun: bool,
    retries: int,
    task_timeout: float | None,
    grace: float,
    max_attempts: int | None,
    halt_after: int | None,
    new_settings: bool,
    ledger: str | os.PathLike[str] | None,
    log: str | os.PathLike[str] | None,
    write: WriteOptions,
    env: dict[str, str],
    stopper: Stopper | None,
    progress: Callable[[Progress], None] | None,
    pull: bool = False,
    follow: bool = False,
    idle: float | None = None,
    deadline: str | float | None = None,
    task_time: float | None = None,
    relay: int | None = None,
    relay_script: str | os.PathLike[str] | None = None,
    max_relays: int | None = None,
) -> RunOptions:
    """The option checks: a usage error names the first option that cannot work."""
    out = os.fspath(out)
    script = _relay_checks(relay, relay_script, max_relays, pull=pull, env=env)
    if idle is not None and not follow:
        raise UsageError("--idle ends a --follow run that has nothing to do: give --follow")
    if (deadline is not None or task_time is not None) and not pull:
        raise UsageError("--deadline and --task-time apply to --pull runs: give --pull")
    if pull and index is not None:
        raise UsageError("--pull takes the next tasks of the whole list: give no --index")
    if pull and (chunk != 1 or base != 1):
        raise UsageError(
            "--pull takes the tasks of the whole list a block at a time, each block sized by "
            "the run's own rate: give no --chunk (nor --base)"
        )
    if idle is not None:
        check_seconds("idle", idle, MAX_TIMEOUT)
    if task_time is not None:
        check_seconds("task_time", task_time, MAX_TIMEOUT)
    ends = _deadline(deadline, env) if pull else None
    if relay is not None and deadline is None and ends is not None:
        # the job's own end: a relay run leaves room to hand its place on before it
        ends -= relay_lead(ends - time.time())
    if function is not None:
        if call is not None:
            raise UsageError("give call or function, not both")
        call = function_spec(function)
    if call is not None:
        if command or shell:
            raise UsageError(
                "--call runs a Python function per task: give no CMD and no --shell with it"
            )
        call_spec(call)
    elif shell and command:
        raise UsageError("--shell runs each task line as a command: give no CMD with it")
    elif not shell and not command:
        raise UsageError(
            "give the command to run after --, --call FILE.py:FUNC, or --shell for a list "
            "of commands"
        )
    elif not shell and _call_shaped(command):
        raise UsageError(
            f"CMD {command[0]} is a Python function's name, not a command: did you mean "
            f"--call {command[0]}?"
        )
    _check_runchecked_options(retries, grace, task_timeout)
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise UsageError(
            f"max_attempts (--max-attempts) must be a whole number >= 1, not {max_attempts!r}"
        )
    if halt_after is not None and (
        isinstance(halt_after, bool) or not isinstance(halt_after, int) or halt_after < 0
    ):
        raise UsageError(
            f"halt_after (--halt-after) must be a whole number >= 0, not {halt_after!r}"
        )
    njobs = _jobs(jobs, env)
    ledger_path = os.fspath(ledger) if ledger is not None else out + ".ledger"
    log_path = os.fspath(log) if log is not None else out + ".log"
    if len({os.path.abspath(p) for p in (out, ledger_path, log_path)}) < 3:
        raise UsageError("OUT, --ledger and --log must be three different files")
    for side in (ledger_path, log_path):  # named by the user: a device is refused here
        check_side_file(side)
    named = (
        ("OUT", out, "OUT"),
        ("the ledger", ledger_path, "--ledger"),
        ("the log", log_path, "--log"),
    )
    for what, path, opt in named:
        if same_file(os.fspath(tasks), path):
            # `zotsink run tasks.txt tasks.txt -- CMD` would append to its own task list,
            # and the next array element would run the output as tasks
            raise UsageError(
                f"the task list {os.fspath(tasks)} is also {what}: give {opt} another name"
            )
    return RunOptions(
        tasks=os.fspath(tasks),
        out=out,
        ledger_path=ledger_path,
        log_path=log_path,
        command=tuple(command),
        call=call,
        shell=shell,
        # a pull run ignores the array index: every element takes from the whole list
        index=None if pull else scheduler_index(env) if index is None else index,
        chunk=chunk,
        base=base,
        jobs=njobs,
        rerun=rerun,
        retries=retries,
        task_timeout=task_timeout,
        grace=grace,
        max_attempts=max_attempts,
        halt_after=halt_after,
        new_settings=new_settings,
        write=write,
        env=env,
        stopper=stopper,
        progress=progress,
        pull=pull,
        follow=follow,
        idle=idle,
        deadline=ends,
        task_time=task_time,
        relay=relay,
        relay_script=script,
        max_relays=max_relays,
    )


def _relay_checks(
    relay: int | None,
    script: str | os.PathLike[str] | None,
    max_relays: int | None,
    *,
    pull: bool,
    env: Mapping[str, str],
) -> str | None:
    """``--relay``, ``--relay-script`` and ``--max-relays``, checked; the script's absolute
    path (a successor reads it where the first element found it)."""
    if relay is None:
        if script is not None or max_relays is not None:
            raise UsageError(
                "--relay-script and --max-relays shape a --relay chain: give --relay N"
            )
        return None
    if isinstance(relay, bool) or not isinstance(relay, int) or relay < 1:
        raise UsageError(f"relay (--relay) must be a whole number >= 1, not {relay!r}")
    if max_relays is not None and (
        isinstance(max_relays, bool) or not isinstance(max_relays, int) or max_relays < 0
    ):
        raise UsageError(
            f"max_relays (--max-relays) must be a whole number >= 0, not {max_relays!r}"
        )
    if not pull:
        raise UsageError(
            "--relay keeps elements that take the next tasks of the whole list: give --pull "
            "(or --follow)"
        )
    path = None
    if script is not None:
        path = os.path.abspath(os.fspath(script))
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise UsageError(f"--relay-script {os.fspath(script)} is not a file this user can read")
    relay_backend(env, path)
    return path


def _deadline(given: str | float | None, env: Mapping[str, str]) -> float | None:
    """The end of this run's allocation as ``time.time()`` seconds: ``given`` (seconds
    from now, or an ISO time), else the scheduler's end of the job, else None."""
    if given is None:
        return job_end(env)
    if isinstance(given, (int, float)) and not isinstance(given, bool):
        return time.time() + check_seconds("deadline", float(given), MAX_TIMEOUT)
    text = str(given).strip()
    try:
        return time.time() + check_seconds("deadline", float(text), MAX_TIMEOUT)
    except (ValueError, UsageError):
        pass
    from datetime import datetime

    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UsageError(
            f"--deadline must be seconds from now or a time such as 2026-11-26T18:00, not {text!r}"
        ) from None
