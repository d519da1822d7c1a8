"""One attempt of a task as a run's decisions see it: its life in named phases, its end.

An attempt runs a command (a process) or a call in a function worker. Its life, as
:attr:`Attempt.phase` says it:

- ``sent``: handed to a worker, its call not begun (a batch's later tasks);
- ``running``: begun; a :attr:`~Attempt.deadline` (``--task-timeout``, or ``--grace`` after
  a stop) is when it gets SIGTERM;
- ``terminating``: SIGTERM sent; the deadline is when SIGKILL follows;
- ``killed``: SIGKILL sent, its exit awaited;
- ``exited``: the process exited; pipes may still be open, held by something it started:
  the deadline is how long they may linger;
- ``ended``: exited and every pipe read to its end (a call: it returned).

What to do next is a decision (:meth:`Attempt.step`), and how it ended is its own
(:attr:`Attempt.status`, a :data:`~zotsink._run.events.EndStatus`), set only through its
methods. No I/O here: :mod:`zotsink._run.state` feeds it, the backends do the signals.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

from .events import EndStatus, Key
from .tasks import Task
from .usage import UNMEASURED, Usage

__all__ = ["KILL_AFTER", "PIPE_LINGER", "Attempt", "End", "Phase", "Step"]

#: Seconds between the SIGTERM and the SIGKILL of a task that has to go.
KILL_AFTER: Final = 5.0
#: Seconds a task's pipes may stay open after it exited (a background child holds them).
PIPE_LINGER: Final = 2.0

#: Where an attempt stands: handed to a worker (``sent``), ``running``, SIGTERM sent
#: (``terminating``), SIGKILL sent (``killed``), its process gone and its pipes not yet read
#: to their end (``exited``), ``ended``.
Phase = Literal["sent", "running", "terminating", "killed", "exited", "ended"]
#: What is to be done for an attempt now.
Step = Literal["end", "drain", "term", "kill", None]


class End(NamedTuple):
    """What one attempt's end row item says."""

    key: Key
    status: EndStatus
    code: str  # the exit code, or the signal's name
    seconds: float  # its own time
    wait: float | None  # from its claim to its begin
    records: int
    size: int
    in_out: bool
    usage: Usage
    note: str


class Attempt:
    """One attempt as the decisions see it: its phase, deadline and how it ended."""

    __slots__ = (
        "claimed_at",
        "closed",
        "code",
        "deadline",
        "ended_at",
        "ended_by",
        "key",
        "notes",
        "phase",
        "pid",
        "seconds",
        "start",
        "started",
        "task",
        "usage",
    )

    def __init__(self, task: Task, attempt: int, claimed_at: float, now: float) -> None:
        self.task = task
        self.key: Key = (task.num, attempt)
        self.claimed_at = claimed_at
        self.started = now
        self.phase: Phase = "running"
        self.deadline: float | None = None
        self.ended_by: EndStatus | None = None  # zotsink ended it: timeout, interrupted, killed
        self.code = 127
        self.usage = UNMEASURED
        self.seconds: float | None = None  # its own time, when measured apart (a call's)
        self.ended_at = now
        self.notes: list[str] = []
        self.pid = 0
        self.start = ""
        self.closed = False  # every pipe of it was read to its end

    # -- its life -------------------------------------------------------------------------
    def sent(self) -> None:
        """Handed to a worker; its call has not begun."""
        self.phase = "sent"

    def began(self, now: float, pid: int, start: str) -> None:
        self.phase = "running"
        self.started = now
        self.pid, self.start = pid, start

    def note(self, text: str) -> None:
        """What is unusual about it, for its end row's note."""
        self.notes.append(text)

    def interrupted(self) -> None:
        """It died of a stop signal and the run was stopped too: a stop's, not a failure."""
        self.ended_by = "interrupted"

    def limit(self, at: float) -> None:
        """SIGTERM is due at ``at`` (``--task-timeout``)."""
        self.deadline = at

    def exited(self, now: float, code: int, usage: Usage) -> None:
        """Its process exited; its pipes may linger a while."""
        self.code = code
        self.usage = usage
        self.ended_at = now
        if self.closed:
            self.phase, self.deadline = "ended", None
        else:
            self.phase, self.deadline = "exited", now + PIPE_LINGER

    def drained(self) -> None:
        """Every pipe of it was read to its end (before its exit was seen, or after)."""
        self.closed = True
        if self.phase == "exited":
            self.deadline = None
            self.phase = "ended"

    def returned(
        self, now: float, code: int, seconds: float | None, usage: Usage, *, died: bool = False
    ) -> None:
        """Its call ended (0 returned, 1 raised); ``died``: its worker died under it, and
        ``code`` is the worker's exit (killed, unless a signal says so itself; a stop's
        within the grace stays ``interrupted``)."""
        if died and self.ended_by is None and code >= 0:
            self.ended_by = "killed"
        self.code = code
        self.usage = usage
        self.seconds = seconds
        self.ended_at = now
        self.phase = "ended"
        self.deadline = None
        if self.ended_by == "interrupted" and not died:
            self.ended_by = None  # the call ended within the grace: its result stands

    def stop(self, now: float, grace: float) -> None:
        """The run stops: what it does ends ``interrupted``, SIGTERM after ``grace``. One
        that ended already (its process exited, its call returned, in the same turn as the
        stop) keeps how it ended."""
        if self.phase in ("exited", "ended"):
            return
        self.ended_by = "interrupted"
        if self.phase == "running":
            self.deadline = now + grace

    def terminated(self, now: float) -> None:
        if self.ended_by is None:
            self.ended_by = "timeout"
        self.phase = "terminating"
        self.deadline = now + KILL_AFTER

    def killed(self) -> None:
        self.phase = "killed"
        self.deadline = None

    def step(self, now: float) -> Step:
        if self.phase == "ended":
            return "end"
        if self.phase == "exited":
            return "drain" if self.deadline is not None and now >= self.deadline else None
        if self.deadline is None or now < self.deadline:
            return None
        if self.phase == "running":
            return "term"
        return "kill" if self.phase == "terminating" else None

    @property
    def status(self) -> EndStatus:
        """How it ended, as its process (or call) ended."""
        if self.ended_by is not None:
            return self.ended_by
        if self.usage.oom:
            return "oom"
        if self.code == 0:
            return "ok"
        return "killed" if self.code < 0 else "failed"

    def own_time(self) -> float:
        return self.seconds if self.seconds is not None else max(self.ended_at - self.started, 0.0)
