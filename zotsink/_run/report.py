"""The attempts of a ledger, for people who would rather look than read: each attempt as
one record (:class:`Attempt`), read in one pass (:func:`iter_attempts`), and summed per
host or per array element (:func:`attempts_by`, ``status --by``). The ``--html`` page is
drawn from the same pass (:mod:`zotsink._run.page`).

An attempt is yielded once it is whole: an ended one at its end (the ledger's order of
ends), one that never ended at the end of the pass (``running``, or ``lost`` when its task
was claimed again since). Memory holds the attempts claimed and not ended, and a time per
run, never one entry per attempt. :func:`read_ledger` gives the events themselves.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any, Final, NamedTuple

from .._ledger.events import TaskEvent, task_events
from .._ledger.format import element_name
from .._ledger.read import Snapshot
from .advise import TaskUse
from .tasks import task_lines

__all__ = [
    "Attempt",
    "AttemptsBy",
    "attempts_by",
    "iter_attempts",
    "natural",
    "rate_text",
    "read_attempts",
    "read_ledger",
]


class Attempt(NamedTuple):
    """One attempt of a task: its start row and, once it ended, its end row."""

    tasknum: int
    line: str
    attempt: int
    job: str
    array_task: str  # the array element that ran it ("" outside an array)
    host: str
    start: float | None  # seconds since the epoch
    # None while it runs; for a ``lost`` attempt (its run died), the time of its run's last
    # row in the ledger: nothing of that run was seen after
    end: float | None
    status: str  # the end row's status, else "running" or "lost"
    seconds: float | None
    peak_kib: int | None = None  # what it used, when measured (see zotsink._run.usage)
    user_s: float | None = None
    sys_s: float | None = None

    @property
    def element(self) -> str:
        """The array element that ran it, as ``JOB[INDEX]`` (``JOB``, or the host's run
        outside an array), with ``restart R`` when the scheduler had started it again:
        a requeued element's attempts are counted as its own."""
        return element_name(self.job, self.array_task) or "-"

    def use(self) -> TaskUse:
        """What it used, as ``status --advise`` reads it."""
        return TaskUse(
            self.tasknum,
            self.element,
            self.host,
            self.seconds,
            self.peak_kib,
            self.user_s,
            self.sys_s,
            self.status,
        )


def read_ledger(
    path: str | os.PathLike[str],
    *,
    tasks: str | os.PathLike[str] | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[TaskEvent]:
    """What a ledger says happened to each task, in its order (claims, begins, ends,
    releases: :class:`~zotsink._ledger.events.TaskEvent`), from a consistent snapshot;
    nothing when it does not exist yet. With ``tasks`` (the task list) each event carries
    its task's line as ``key``. A torn row is passed by with a warning."""
    keys = task_lines(tasks)[0] if tasks is not None else None
    with Snapshot(path, lock=lock, timeout=timeout) as snap:
        yield from task_events(snap.rows(), keys)


def iter_attempts(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[Attempt]:
    """Every attempt of the tasks of ``tasks`` that ``ledger`` holds that began (a task
    claimed and given back never ran), from one pass over a snapshot: each ended attempt
    at its end, then those that never ended.

    An ended attempt ran for its own seconds from its begin (its claim's time and its
    wait; else its begin row's time; else its end less its seconds). One still running
    ran from its begin (end None). One whose task was claimed again while it had not
    ended is ``lost`` (its run died): it ends where its run's last row is."""
    keys, _ = task_lines(tasks)
    opened: dict[tuple[int, int], list[Any]] = {}  # claim time, begin time, run
    by_task: dict[int, list[tuple[int, int]]] = {}  # task -> its attempts claimed, open
    runs: dict[str, tuple[str, str, str]] = {}  # run -> job, element, host
    last_row: dict[str, float] = {}  # run -> its latest row's time
    lost: list[tuple[tuple[int, int], list[Any]]] = []
    with Snapshot(ledger, lock=lock, timeout=timeout) as snap:
        for ev in task_events(snap.rows()):
            last_row[ev.run] = ev.time
            if ev.run not in runs:
                runs[ev.run] = (ev.job, ev.array_task, ev.host)
            if ev.tasknum not in keys:
                continue
            key = (ev.tasknum, ev.attempt)
            kind = ev.event
            if kind == "claim":
                for other in by_task.pop(ev.tasknum, ()):
                    got = opened.pop(other, None)
                    if got is not None and got[1] is not None:
                        lost.append((other, got))  # begun, never ended: its run died
                opened[key] = [ev.time, None, ev.run]
                by_task[ev.tasknum] = [key]
            elif kind == "begin":
                got = opened.get(key)
                if got is not None:
                    got[1] = ev.time
            elif kind == "release":
                opened.pop(key, None)
                by_task.pop(ev.tasknum, None)
            elif kind == "end":
                got = opened.pop(key, None)
                by_task.pop(ev.tasknum, None)
                secs = ev.seconds
                if got is not None and ev.wait is not None:
                    begun: float | None = got[0] + ev.wait
                elif got is not None and got[1] is not None:
                    begun = got[1]
                else:
                    begun = ev.time - (secs or 0.0)
                end = None if begun is None or secs is None else begun + secs
                job, element, host = runs.get(ev.run, ("", "", ""))
                yield Attempt(
                    ev.tasknum,
                    keys[ev.tasknum],
                    ev.attempt,
                    job,
                    element,
                    host,
                    begun,
                    end,
                    ev.status or "failed",
                    secs,
                    ev.peak_kib,
                    ev.cpu_user,
                    ev.cpu_sys,
                )
    for (num, att), (_claimed, begun, run) in lost:
        job, element, host = runs.get(run, ("", "", ""))
        end = last_row.get(run)
        secs = None if end is None or begun is None else max(end - begun, 0.0)
        yield Attempt(num, keys[num], att, job, element, host, begun, end, "lost", secs)
    for (num, att), (_claimed, begun, run) in opened.items():
        if begun is None:
            continue  # claimed, never begun: no attempt ran
        job, element, host = runs.get(run, ("", "", ""))
        yield Attempt(num, keys[num], att, job, element, host, begun, None, "running", None)


def read_attempts(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> list[Attempt]:
    """Every attempt of :func:`iter_attempts`, in the order they started. A list holds
    every attempt: a report over a large ledger reads :func:`iter_attempts` instead."""
    out = list(iter_attempts(tasks, ledger, lock=lock, timeout=timeout))
    out.sort(key=lambda a: (a.start is None, a.start or 0.0, a.tasknum))
    return out


#: The columns of :func:`attempts_by`'s rows, in order.
BY_COLUMNS: Final = ("attempts", "ok", "not_ok", "running", "busy_s", "mean_s", "max_s")


class AttemptsBy:
    """The attempts summed per host, array job or array element as they come (what
    :func:`attempts_by` returns, for a reader that makes one pass for several views)."""

    def __init__(self, by: str) -> None:
        if by not in ("host", "job", "element"):
            raise ValueError(f"attempts_by: by {by!r}: host, job or element")
        self.by = by
        self._rows: dict[str, dict[str, Any]] = {}

    def add(self, a: Attempt) -> None:
        by = self.by
        name = a.host if by == "host" else a.element if by == "element" else a.job or "-"
        r = self._rows.get(name)
        if r is None:
            r = self._rows[name] = dict.fromkeys(BY_COLUMNS, 0)
        r["attempts"] += 1
        if a.status == "ok":
            r["ok"] += 1
        elif a.status == "running":
            r["running"] += 1
        else:
            r["not_ok"] += 1
        if a.seconds is not None:
            r["busy_s"] += a.seconds
            r["max_s"] = max(r["max_s"], a.seconds)

    def rows(self) -> list[tuple[str, dict[str, Any]]]:
        """The sums, in the order of their names, each with its mean. A job is named
        ``CLUSTER:JOB`` where the scheduler names its cluster; when every job is of one
        cluster (most sites have one), the name is the job's as ``squeue`` shows it."""
        rows = self._rows
        if self.by != "host":
            clusters = {name.partition(":")[0] for name in rows if ":" in name}
            if len(clusters) == 1:
                rows = {}
                for name, r in self._rows.items():
                    bare = name.partition(":")[2] or name
                    if bare in rows:  # the same job named with and without its cluster
                        for col in BY_COLUMNS:
                            if col == "max_s":
                                rows[bare][col] = max(rows[bare][col], r[col])
                            elif col != "mean_s":
                                rows[bare][col] += r[col]
                    else:
                        rows[bare] = r
        for r in rows.values():
            ended = r["attempts"] - r["running"]
            r["mean_s"] = r["busy_s"] / ended if ended else 0.0
        return sorted(rows.items(), key=lambda kv: natural(kv[0]))


def attempts_by(attempts: Iterable[Attempt], by: str) -> list[tuple[str, dict[str, Any]]]:
    """The attempts summed per ``by``: ``host``, ``job`` (the array job) or ``element``
    (``JOB[INDEX]``): attempts, ok, not ok, running, the seconds they took in all, their
    mean and their longest; in the order of their names. ``attempts`` is read once (an
    iterator of :func:`iter_attempts` keeps memory flat)."""
    summed = AttemptsBy(by)
    for a in attempts:
        summed.add(a)
    return summed.rows()


def natural(name: str) -> tuple[Any, ...]:
    """A sort key for names with numbers: node2 before node10, 7[2] before 7[10]."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def rate_text(per_second: float) -> str:
    """A rate in the unit that gives it a few digits before the point: tasks/s, /min, /h."""
    for unit, per in (("s", 1.0), ("min", 60.0), ("h", 3600.0)):
        value = per_second * per
        if value >= 1 or unit == "h":
            break
    if value >= 100:
        return f"{value:,.0f} tasks/{unit}"
    return f"{value:.{1 if value >= 10 else 2}f} tasks/{unit}"
