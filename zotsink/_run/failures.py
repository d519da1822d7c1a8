"""Failed tasks told in few lines: grouped by the line they ended with, each shown with the
end of its stderr cut where a reader can follow it (a traceback's last frame and its
exception whole).

A wrong path or a missing module fails every task the same way: three thousand alike
failures are one group, its task numbers, and one tail.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

__all__ = ["FailedTask", "FailureGroup", "alike_key", "end_key", "failure_tail", "group_failures"]

#: The first line of a Python traceback, and of each chained one.
TRACEBACK: Final = "Traceback (most recent call last):"
_FRAME: Final = re.compile(r'^\s+File "')
_NUMBER: Final = re.compile(r"\d+")


class FailedTask(NamedTuple):
    """A task whose latest attempt failed, was killed or timed out (given up, too), with
    the last lines that attempt wrote to stderr."""

    tasknum: int
    line: str  # the task's line
    state: str  # failed, killed, timeout or given-up
    status: str  # the end row's: failed, killed or timeout
    attempt: int
    exit: str  # the exit code, "" when a signal ended it
    signal: str
    seconds: float | None
    stderr: list[str]  # its last lines in the log, oldest first

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class FailureGroup(NamedTuple):
    """Failed tasks that ended alike: the same state and the same last line of stderr once
    the task's own line and the numbers in it are set aside."""

    state: str  # failed, killed, timeout or given-up
    last_line: str  # the first task's last stderr line ("" when it wrote none)
    tasks: list[FailedTask]  # in task order; the first is the one shown

    @property
    def tasknums(self) -> list[int]:
        return [t.tasknum for t in self.tasks]

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "count": len(self.tasks),
            "last_line": self.last_line,
            "tasknums": self.tasknums,
            "example": self.tasks[0].tasknum,
        }


def _last_line(task: FailedTask) -> str:
    return next((line for line in reversed(task.stderr) if line.strip()), "")


def alike_key(state: str, last_line: str, task_line: str) -> tuple[str, str]:
    """The key by which failures are grouped: the state, and the last stderr line with the
    task's own line and the numbers in it set aside."""
    # the path or name of the task itself, and counts in the message, differ between tasks
    # that failed for one reason (`No such file: 'img/0042.jpg'`)
    # (as a number: a task line that is a number would else be set aside inside others)
    line = last_line
    if task_line.strip():
        line = line.replace(task_line, "#")
    return state, _NUMBER.sub("#", line)


def end_key(status: str, code: str, note: str, task_line: str = "") -> tuple[str, str]:
    """:func:`alike_key` of a task's end, which the ledger keeps without stderr: its exit
    code or signal and its note stand for the last line (a ``--call`` task's note names its
    exception)."""
    return alike_key(status, f"{code}/{note}", task_line)


def _alike(task: FailedTask) -> tuple[str, str]:
    return alike_key(task.state, _last_line(task), task.line)


def group_failures(found: Sequence[FailedTask]) -> list[FailureGroup]:
    """``found`` grouped by how the tasks ended (see :class:`FailureGroup`), the largest
    group first, then in the order of their first task."""
    groups: dict[tuple[str, str], list[FailedTask]] = {}
    for task in sorted(found, key=lambda t: t.tasknum):
        groups.setdefault(_alike(task), []).append(task)
    out = [FailureGroup(tasks[0].state, _last_line(tasks[0]), tasks) for tasks in groups.values()]
    out.sort(key=lambda g: (-len(g.tasks), g.tasks[0].tasknum))
    return out


def failure_tail(lines: Sequence[str], last: int) -> list[str]:
    """The end of a task's stderr to show: its ``last`` lines, except that a Python
    traceback is never cut inside its last frame: that frame (file, line, the code and its
    ``^^^^`` marks) and the exception after it are shown whole, under the traceback's first
    line, with ``...`` for the frames left out."""
    if last <= 0:
        return []
    tb = max((i for i, line in enumerate(lines) if line.startswith(TRACEBACK)), default=-1)
    frames = [i for i in range(tb + 1, len(lines)) if _FRAME.match(lines[i])]
    if not frames:
        return list(lines[-last:])
    start = frames[-1]
    # earlier lines (older frames) only as far as ``last`` leaves room
    room = max(tb + 1, min(start, len(lines) - last + 1))
    begin = min(f for f in frames if f >= room)  # at a frame's first line
    head = [TRACEBACK] + (["  ..."] if begin > tb + 1 else [])
    return head + list(lines[begin:])
