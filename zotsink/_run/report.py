"""The attempts of a ledger, for people who would rather look than read: each attempt as
one record (:class:`Attempt`), read in one pass (:func:`iter_attempts`), and summed per
host or per array element (:func:`attempts_by`, ``status --by``). The ``--html`` page is
drawn from the same pass (:mod:`zotsink._run.page`).

An attempt is yielded once it is whole: an ended one at its end row (the ledger's order of
ends), one that never ended at the end of the pass (``running``, or ``lost`` when its task
was started again since). Memory holds the attempts begun and not ended, and a time per
run, never one entry per attempt.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any, Final, NamedTuple

from .._ledgerfile import read_ledger
from .advise import TaskUse
from .status import ledger_time
from .tasks import task_lines

__all__ = [
    "Attempt",
    "AttemptsBy",
    "attempts_by",
    "iter_attempts",
    "natural",
    "rate_text",
    "read_attempts",
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
        outside an array)."""
        if not self.job:
            return "-"
        return f"{self.job}[{self.array_task}]" if self.array_task else self.job

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


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


class _Clock:
    """Ledger times as seconds since the epoch, read as :func:`ledger_time` reads them, each
    hour's start parsed once: a pass over a ledger of millions of rows parses a few hours."""

    def __init__(self) -> None:
        self._hours: dict[str, float | None] = {}

    def __call__(self, stamp: str) -> float | None:
        # the ledger's one form: 2026-11-24T10:00:00.000000Z
        if len(stamp) != 27 or stamp[13] != ":" or stamp[16] != ":" or stamp[26] != "Z":
            return ledger_time(stamp)
        hour = stamp[:13]
        base = self._hours.get(hour, 0.0)
        if base == 0.0:
            base = self._hours[hour] = ledger_time(hour + ":00:00.000000Z")
        if base is None:
            return None
        minute, second = stamp[14:16], stamp[17:26]
        if not (minute.isdigit() and minute < "60" and second[:2].isdigit() and second < "60"):
            return ledger_time(stamp)
        try:
            return base + int(minute) * 60 + float(second)
        except ValueError:
            return ledger_time(stamp)


def iter_attempts(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[Attempt]:
    """Every attempt of the tasks of ``tasks`` that ``ledger`` holds, from one pass over a
    snapshot: each ended attempt at its end row, then those that never ended.

    An ended attempt ran for its seconds before its end (its start row may be older: a run
    claims tasks ahead). One with no end whose task was started again since is ``lost``
    (its run died) and ends where its run's last row is; one with no end and no later start
    is ``running`` (end None)."""
    keys, _ = task_lines(tasks)
    open_: dict[tuple[int, str], tuple[Attempt, tuple[str, str]]] = {}
    started: dict[int, set[str]] = {}  # task -> its attempts begun and not ended
    last_row: dict[tuple[str, str], float] = {}  # a run (host, pid) -> its last row's time
    clock = _Clock()
    for row in read_ledger(ledger, lock=lock, timeout=timeout):
        at = clock(row.time)
        run = (row.host, row.pid)
        if at is not None:
            last_row[run] = at
        if keys.get(row.tasknum) != row.key:
            continue
        if row.event == "start":
            for other in started.get(row.tasknum, ()):
                # A run starts a task again only once the ledger no longer counts it as
                # running elsewhere: that attempt's run died (a lost node, a killed job) and
                # it will never end. An end row that comes after all still says how it ended.
                a, where = open_[row.tasknum, other]
                open_[row.tasknum, other] = (a._replace(status="lost"), where)
            number = int(row.attempt) if row.attempt.isdigit() else 0
            began = Attempt(
                row.tasknum,
                row.key,
                number,
                row.job,
                row.array_task,
                row.host,
                at,
                None,
                "running",
                None,
            )
            open_[row.tasknum, row.attempt] = (began, run)
            started.setdefault(row.tasknum, set()).add(row.attempt)
            continue
        secs = _float(row.seconds)
        found = open_.pop((row.tasknum, row.attempt), None)
        if found is not None:
            left = started[row.tasknum]
            left.discard(row.attempt)
            if not left:
                del started[row.tasknum]
        if found is None:
            begun = None if at is None or secs is None else at - secs
            yield Attempt(
                row.tasknum,
                row.key,
                int(row.attempt) if row.attempt.isdigit() else 0,
                row.job,
                row.array_task,
                row.host,
                begun,
                at,
                row.status,
                secs,
            )
            continue
        # a run writes the start rows of the tasks it claims ahead of running them: the end
        # and its seconds tell when the task itself ran
        a = found[0]
        begun = a.start
        if at is not None and secs is not None:
            begun = at - secs if begun is None else max(begun, at - secs)
        yield a._replace(start=begun, end=at, status=row.status or "failed", seconds=secs)
    for a, run in open_.values():
        if a.status == "lost":
            end = last_row.get(run)
            yield a._replace(end=None if end is None else max(end, a.start or end))
        else:
            yield a


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
        """The sums, in the order of their names, each with its mean."""
        for r in self._rows.values():
            ended = r["attempts"] - r["running"]
            r["mean_s"] = r["busy_s"] / ended if ended else 0.0
        return sorted(self._rows.items(), key=lambda kv: natural(kv[0]))


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
