"""The relay rows of a ledger, folded: the chain of jobs that keeps a task list's runs
allocated (``zotsink run --relay N``, ``zotsink add --relay SCRIPT``).

A chain is the elements (batch jobs) whose runs take the list's tasks, each submitted by
an element before it (or by ``add``, or by you); no server and no login-node daemon: the
decision "submit one successor" is a row written under the ledger's lock, so that two runs
never fill one place and the rows alone say how many elements are queued or running.
Every ``relay`` row names what happened (its ``what``), and, as it applies, the
``ticket`` of a submission (a number of the run that decided it: the row's run and the
ticket name one submission), the ``job`` it concerns (``[CLUSTER:]JOB[_INDEX]``, as the
scheduler is asked about it), the ``count`` a decision saw (``C/N``: elements queued or
running, and submissions under way, against the chain's N) and a ``note``:

- ``join``: a run of the chain began in job ``job``; note: ``{"n": N, "max": M, "by":
  "RUN.TICKET"}`` (the decision that submitted it, for a successor: its element is the
  job that decision's ``job`` row names, however either spells the job's cluster);
- ``decide``: its run decided to submit one successor (ticket ``ticket``), having counted
  ``count``; note: why (``fill``: work waits and places are free; ``handoff``: the last
  element leaves with work left);
- ``job``: ticket's submission gave job ``job`` (queued until its run joins);
- ``fail``: ticket's submission failed; note: the scheduler's message. The next try waits,
  longer after each failure in a row (:meth:`Chain.retry_at`): never a storm;
- ``exit``: the run in job ``job`` ends: its element leaves the chain (its job may still
  be shown by the scheduler a moment);
- ``handoff``: the run in job ``job``, the last of the chain to leave with work left, hands
  its place on: the others leaving now leave it to it (one holder, so that they never
  wait on each other);
- ``gone``: the scheduler no longer has job ``job`` queued or running (an element killed,
  cancelled, or gone after its ``exit``);
- ``end``: the chain ended; note: ``REASON: words`` (``done``, ``stopped``, ``max-relays``,
  ``failing``, ``given-up``, ``idle``, ``broken``);
- ``refused``: a run in job ``job`` was refused before it began; note: why (a batch job's
  output often goes nowhere: here ``status`` shows it).

:class:`Chain` is the fold (pure, fed rows in the ledger's order, like
:class:`~zotsink._ledger.control.Control`); :func:`relay_fields` makes a row's fields.
A chain begins with a ``join`` or a ``decide`` when none is under way (or after an
``end``), and its counts (submissions, failures in a row) are its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, NamedTuple

from .format import Row, iso_time

__all__ = [
    "RELAY_WHATS",
    "Chain",
    "Element",
    "Ended",
    "Failure",
    "Handing",
    "Submission",
    "Ticket",
    "join_note",
    "relay_fields",
]

#: What a relay row may say.
RELAY_WHATS: Final = (
    "join", "decide", "job", "fail", "exit", "handoff", "gone", "end", "refused"
)  # fmt: skip
#: Characters of a note kept (a scheduler's message can be long; its head says what failed).
NOTE_MAX: Final = 500


def relay_fields(
    what: str, *, ticket: str = "", job: str = "", count: str = "", note: str = ""
) -> list[str]:
    """A relay row's fields, in order; the note on one line (no tab, no newline: a row is
    one line), cut to :data:`NOTE_MAX` characters."""
    one = " ".join(note.replace("\t", " ").split())
    if len(one) > NOTE_MAX:
        one = one[: NOTE_MAX - 3] + "..."
    return [what, ticket, job, count, one]


class Element(NamedTuple):
    """An element of the chain: its job, ``queued`` (submitted, its run not begun),
    ``running`` (its run joined) or ``exited`` (its run ended; the scheduler may still
    show it a moment), the offset and time of the row that said so, and that row's run."""

    job: str
    state: Literal["queued", "running", "exited"]
    at: int
    time: float
    run: str


class Ticket(NamedTuple):
    """A submission decided, its outcome not written yet."""

    run: str
    ticket: str
    at: int
    time: float
    count: str
    why: str


class Submission(NamedTuple):
    time: float
    run: str
    ticket: str
    job: str


class Failure(NamedTuple):
    time: float
    run: str
    ticket: str
    message: str


class Ended(NamedTuple):
    """Why the chain ended: ``reason`` (a word), ``words`` (for a person), who said so."""

    time: float
    at: int
    reason: str
    words: str
    job: str


class Handing(NamedTuple):
    """The element that hands its place on, since its ``handoff`` row (offset, time)."""

    job: str
    at: int
    time: float
    run: str


class Refusal(NamedTuple):
    time: float
    job: str
    message: str


class Chain:
    """The relay rows of a ledger, folded (see the module's docstring); memory bounded by
    the elements open at once and the submissions made."""

    def __init__(self) -> None:
        self.epoch_at = -1  # where the chain under way began (-1: none yet)
        self.elements: dict[str, Element] = {}  # the chain's elements, until gone or ended
        self.tickets: dict[tuple[str, str], Ticket] = {}  # decided, no outcome yet
        self.decided: dict[tuple[str, str], int] = {}  # every decision's offset
        self.jobs: dict[tuple[str, str], str] = {}  # a decision's job, this chain's
        self.joined_by: dict[tuple[str, str], str] = {}  # a decision's element, joined
        self.submitted = 0  # successful submissions of the chain under way
        self.joined = 0  # runs that joined it
        self.fails_in_row = 0
        self.last_job: Submission | None = None
        self.last_fail: Failure | None = None
        self.ended: Ended | None = None
        self.handing: Handing | None = None  # the element handing its place on
        self.refused: Refusal | None = None
        self.n: int | None = None  # the latest joined run's --relay
        self.max: int | None = None  # ... and its --max-relays
        self.rows = 0  # relay rows folded

    # -- folding ------------------------------------------------------------------------------
    def feed(self, rows: Iterable[tuple[int, Row]]) -> None:
        for at, row in rows:
            if row.kind == "relay":
                self.fold(at, row)

    def fold(self, at: int, row: Row) -> None:
        """A relay row at byte ``at`` (rows are folded in the ledger's order); a ``what``
        this release does not know changes nothing."""
        f = row.fields
        what, ticket, job = f["what"], f["ticket"], f["job"]
        self.rows += 1
        if what in ("join", "decide") and not self.active:
            self._begin(at)
        if what == "join":
            self.joined += 1
            n, most, by = _join_note(f["note"])
            if by is not None:
                queued = self.jobs.get(by)
                if queued is not None and queued != job:
                    self.elements.pop(queued, None)  # the same job, spelled otherwise
                self.joined_by[by] = job
            self.elements[job] = Element(job, "running", at, row.time, row.run)
            if n is not None:
                self.n, self.max = n, most
        elif what == "decide":
            why = f["note"]
            self.tickets[(row.run, ticket)] = Ticket(row.run, ticket, at, row.time, f["count"], why)
            self.decided[(row.run, ticket)] = at
        elif what == "job":
            self.tickets.pop((row.run, ticket), None)
            self.submitted += 1
            self.fails_in_row = 0
            self.last_job = Submission(row.time, row.run, ticket, job)
            self.jobs[(row.run, ticket)] = job
            if self.handing is not None and self.handing.run == row.run:
                self.handing = None  # handed on
            # its run may have joined first (the scheduler was quick)
            if (row.run, ticket) not in self.joined_by and job not in self.elements:
                self.elements[job] = Element(job, "queued", at, row.time, row.run)
        elif what == "fail":
            self.tickets.pop((row.run, ticket), None)
            self.fails_in_row += 1
            self.last_fail = Failure(row.time, row.run, ticket, f["note"])
        elif what == "exit":
            self.elements[job] = Element(job, "exited", at, row.time, row.run)
        elif what == "handoff":
            self.handing = Handing(job, at, row.time, row.run)
        elif what == "gone":
            self.elements.pop(job, None)
            if self.handing is not None and self.handing.job == job:
                self.handing = None
        elif what == "end":
            reason, _, words = f["note"].partition(": ")
            self.ended = Ended(row.time, at, reason, words, job)
            self.elements.clear()
            self.tickets.clear()
            self.handing = None
        elif what == "refused":
            self.refused = Refusal(row.time, job, f["note"])

    def _begin(self, at: int) -> None:
        """A chain begins: the counts of the one before are not its own."""
        self.epoch_at = at
        self.ended = None
        self.handing = None
        self.elements.clear()
        self.tickets.clear()
        self.jobs.clear()
        self.joined_by.clear()
        self.submitted = self.joined = self.fails_in_row = 0

    # -- what the rows say ---------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """A chain is under way: it began, and no ``end`` row closed it."""
        return self.epoch_at >= 0 and self.ended is None

    def open(self) -> Mapping[str, Element]:
        """The elements of the chain under way the rows say are queued, running or just
        exited (the scheduler may still show them), by job."""
        return self.elements

    def pending(self, now: float, ttl: float) -> list[Ticket]:
        """The submissions decided and not yet answered, within ``ttl`` seconds of their
        decision (a run that died between its decision and its answer holds no place for
        ever)."""
        return [t for t in self.tickets.values() if now - t.time < ttl]

    def retry_at(self, first: float, most: float) -> float:
        """When the next submission may be tried (seconds since the epoch; 0: at once):
        ``first`` seconds after a failure, twice as long after each more in a row, never
        longer than ``most``."""
        if not self.fails_in_row or self.last_fail is None:
            return 0.0
        pause = min(first * 2 ** (self.fails_in_row - 1), most)
        return self.last_fail.time + pause

    def decided_at(self, run: str, ticket: str) -> int | None:
        """The offset of the ``decide`` row of ``run``'s ticket (None: not in the rows)."""
        return self.decided.get((run, ticket))

    def to_dict(self) -> dict[str, Any]:
        els = sorted(self.elements.values(), key=lambda e: e.at)
        return {
            "active": self.active,
            "n": self.n,
            "max_relays": self.max,
            "began_offset": None if self.epoch_at < 0 else self.epoch_at,
            "running": [e.job for e in els if e.state == "running"],
            "queued": [e.job for e in els if e.state == "queued"],
            "exited": [e.job for e in els if e.state == "exited"],
            "submitting": len(self.tickets),
            "submitted": self.submitted,
            "joined": self.joined,
            "last_submission": None
            if self.last_job is None
            else {"time": iso_time(self.last_job.time), "job": self.last_job.job},
            "last_failure": None
            if self.last_fail is None
            else {"time": iso_time(self.last_fail.time), "message": self.last_fail.message},
            "failures_in_row": self.fails_in_row,
            "ended": None
            if self.ended is None
            else {
                "time": iso_time(self.ended.time),
                "reason": self.ended.reason,
                "words": self.ended.words,
            },
            "refused": None
            if self.refused is None
            else {
                "time": iso_time(self.refused.time),
                "job": self.refused.job,
                "message": self.refused.message,
            },
        }


def join_note(n: int, max_relays: int | None, by: str = "") -> str:
    """A ``join`` row's note: the chain's N, ``--max-relays``, and the decision that
    submitted the run (``RUN.TICKET``; "" for a run you submitted)."""
    value: dict[str, Any] = {"n": n, "max": max_relays}
    if by:
        value["by"] = by
    return json.dumps(value, separators=(",", ":"))


def _join_note(note: str) -> tuple[int | None, int | None, tuple[str, str] | None]:
    """The ``n``, ``max`` and ``by`` (as run and ticket) of a join row's note (None: not
    there, or not what a join row writes)."""
    try:
        value = json.loads(note) if note else {}
    except ValueError:
        return None, None, None
    if not isinstance(value, dict):
        return None, None, None

    def number(x: object) -> int | None:
        return x if isinstance(x, int) and not isinstance(x, bool) else None

    by = value.get("by")
    run, dot, ticket = by.rpartition(".") if isinstance(by, str) else ("", "", "")
    return number(value.get("n")), number(value.get("max")), (run, ticket) if dot else None
