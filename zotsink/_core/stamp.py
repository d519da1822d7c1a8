"""Provenance: the ``--stamp`` fields, read from the scheduler's environment.

``job`` is the array's job id for an array task and ``task`` its index, from Slurm, SGE,
PBS or LSF variables; ``time`` is UTC ISO-8601 with microseconds; ``tasknum`` is the task's
line in the task list, which ``zotsink run`` gives each task in ``ZOTSINK_TASKNUM``, and
``attempt`` which start of that task this is (1, 2, ...: ``ZOTSINK_ATTEMPT``); both are empty
outside ``run``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Final

from ..errors import UsageError

__all__ = [
    "ATTEMPT_VAR",
    "DEFAULT_STAMP",
    "STAMP_FIELDS",
    "TASKNUM_VAR",
    "parse_stamp",
    "stamp_values",
    "utc_now",
]

#: Provenance fields ``--stamp`` can prepend, and the ones a bare ``--stamp`` picks.
STAMP_FIELDS: Final = ("time", "host", "pid", "job", "task", "tasknum", "attempt")
DEFAULT_STAMP: Final = ("time", "host", "job", "task")
#: Where ``zotsink run`` tells each task its task number (its line in the task list).
TASKNUM_VAR: Final = "ZOTSINK_TASKNUM"
#: ... and which start of that task this is: a task stopped by a signal and run again prints
#: its first lines twice, and this field tells the attempts' lines apart.
ATTEMPT_VAR: Final = "ZOTSINK_ATTEMPT"


def parse_stamp(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """Validate ``--stamp`` fields; ``""`` or ``True``-like bare use means the default set."""
    if spec is None:
        return ()
    fields = [f.strip() for f in spec.split(",")] if isinstance(spec, str) else list(spec)
    fields = [f for f in fields if f]
    if not fields:
        return DEFAULT_STAMP
    bad = [f for f in fields if f not in STAMP_FIELDS]
    if bad:
        raise UsageError(f"unknown --stamp field {bad[0]!r}: choose from {','.join(STAMP_FIELDS)}")
    if len(set(fields)) != len(fields):
        raise UsageError(f"--stamp names a field twice: {','.join(fields)}")
    return tuple(fields)


def job_id(env: Mapping[str, str]) -> str:
    for var in ("SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID", "JOB_ID", "LSB_JOBID"):
        if env.get(var):
            return env[var]
    pbs = env.get("PBS_JOBID", "")
    return pbs.split("[", 1)[0] if pbs else ""


def task_id(env: Mapping[str, str]) -> str:
    for var in ("SLURM_ARRAY_TASK_ID", "SGE_TASK_ID", "PBS_ARRAY_INDEX", "PBS_ARRAYID"):
        val = env.get(var)
        # SGE sets SGE_TASK_ID=undefined outside arrays
        if val and val != "undefined":
            return val
    return env.get("LSB_JOBINDEX", "") if env.get("LSB_JOBINDEX", "0") != "0" else ""


def utc_now() -> str:
    """Current UTC time, ISO-8601 with microseconds (cut, not rounded, as ``datetime.now``
    does). The text up to the second is made once per second: ``run`` stamps two ledger rows
    per task, and a full format costs more than the rest of a row."""
    global _second
    us = time.time_ns() // 1000
    sec = us // 1_000_000
    if sec != _second[0]:
        _second = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    return f"{_second[1]}.{us % 1_000_000:06d}Z"


_second: tuple[int, str] = (-1, "")  # the last second utc_now formatted, and its text


def stamp_values(
    fields: Sequence[str], env: Mapping[str, str] | None = None, now: str | None = None
) -> list[str]:
    """Values for the provenance fields, in order."""
    env = os.environ if env is None else env
    out: list[str] = []
    for f in fields:
        if f == "time":
            out.append(now if now is not None else utc_now())
        elif f == "host":
            out.append(os.uname().nodename)
        elif f == "pid":
            out.append(str(os.getpid()))
        elif f == "job":
            out.append(job_id(env))
        elif f == "tasknum":
            out.append(env.get(TASKNUM_VAR, ""))
        elif f == "attempt":
            out.append(env.get(ATTEMPT_VAR, ""))
        else:
            out.append(task_id(env))
    return out
