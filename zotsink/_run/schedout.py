"""What the batch schedulers' commands print, read: pure functions of the bytes a command
wrote (and the time now), no command run here. :mod:`zotsink._run.backends` runs the
commands; a parser meeting output it does not know says None ("cannot tell"), never
"dead" or "no limit"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = [
    "pbs_alive",
    "pbs_end",
    "pbs_fields",
    "sge_end",
    "sge_tasks",
    "slurm_end",
    "slurm_start_over",
    "submitted_job",
]

#: PBS job states of a job that ended: finished (history kept), a subjob that ended,
#: Torque's completed.
_PBS_ENDED: Final = frozenset({"F", "X", "C"})


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


#: The Slurm state of an element whose processes may still run: a requeued element is
#: COMPLETING (its earlier start's processes being ended) before it is PENDING again.
_SLURM_ENDING: Final = frozenset({"COMPLETING", "CG"})


def slurm_start_over(lines: list[str], restart: int) -> bool | None:
    """Whether the start ``restart`` of an element is over, by ``squeue -O
    State,RestartCnt`` lines (``RUNNING 2``): the element was started again since (its
    restart count is higher) and is no longer ending (the processes of its earlier start
    are gone: Slurm starts an element again only then). None: a line no parser knows."""
    over = True
    for line in lines:
        parts = line.split()
        if len(parts) < 2 or not parts[1].isdigit():
            return None
        state, count = parts[0], int(parts[1])
        if count <= restart or state in _SLURM_ENDING:
            over = False
    return over


def submitted_job(kind: str, out: bytes) -> str | None:
    """The job id a submission printed: ``sbatch --parsable`` (``JOB`` or
    ``JOB;CLUSTER``), ``qsub -terse`` of Grid Engine (``JOB``, or ``JOB.1-4:1`` for an
    array), PBS's ``qsub`` (``JOB.SERVER``). None: no id there."""
    text = out.decode("utf-8", "replace").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    last = lines[-1]
    if kind == "slurm":
        job = last.split(";", 1)[0]
        return job if job.isdigit() else None
    if kind == "sge":
        job = last.split(".", 1)[0]
        return job if job.isdigit() else None
    number = last.split(".", 1)[0].split("[", 1)[0]
    return last if number.isdigit() else None
