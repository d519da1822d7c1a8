"""A run's relay decisions (``run --relay N``), as a pure object: fed events, it returns
instructions; and the one rule of the chain, decided under the ledger's lock.

A relay run keeps its task list's chain of elements (batch jobs) at N while work waits,
and hands its place on when it leaves with work left: no server, no cron, no login-node
daemon. What the chain is, by its rows, is :class:`~zotsink._ledger.relay.Chain`;
:func:`decide` is the rule a run applies to it under the ledger's exclusive lock (every
other run's rows read), so that two runs never fill one place and never more than N
elements are queued or running:

- **count**: the elements the rows say are queued, running or just exited (confirmed with
  the scheduler: one it no longer has is ``gone``; one whose run has written no row for a
  while is asked about afresh, so that an element killed without a word is seen within
  :func:`quiet` seconds; one that said it exits counts until the scheduler, asked after
  that, no longer shows it), this run's own, and the submissions decided and not yet
  answered;
- **fill**: while this run lives and work waits (lines past the cursor, tasks given back
  or interrupted in the ledger, tasks it found free) and the count is below N, one
  successor is decided (a ``decide`` row, naming the count it saw), then submitted outside
  the lock, then its job id or the scheduler's message written (``job`` or ``fail``).
  After a failure the next try waits (:data:`RETRY_FIRST`, doubling, at most
  :data:`RETRY_MOST`), for the whole chain;
- **leave**: a run that ends writes ``exit``. When other elements stay (running, queued,
  or being submitted, each known alive by a row or an answer newer than the moment this
  run began to end), they carry on; the last one to leave with work left (its deadline
  came, a signal, a followed list still open) hands its place on: it says so (a
  ``handoff`` row: the others leaving now leave it to it), waits until the scheduler shows
  fewer than N (its own element counted), then submits; alone in the chain it submits at
  once (N = 1: its successor is queued in its last moments). With no work left, or
  stopped, or halted, or at ``--max-relays``, the last one writes ``end`` and why.

:class:`Relay` is one run's side: when to check (at once, then by what the last verdict
said), one submission at a time, the end of the run held until its relay is done. No I/O
here: the time comes in the events, the scheduler's answers through ``alive``, and
:mod:`zotsink._run.successor` does the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple

from .._ledger.relay import Chain, relay_fields
from .events import RelayCheck, RelayChecked, Rows, Submit, Submitted

__all__ = [
    "CHECK_EVERY",
    "CHECK_FULL",
    "CHECK_IDLE",
    "HANDOFF_GIVE_UP",
    "HANDOFF_WAIT",
    "LEAD_LEAST",
    "LEAD_MOST",
    "LEAD_SHARE",
    "QUIET_LEAST",
    "QUIET_PER",
    "RETRY_FIRST",
    "RETRY_MOST",
    "TICKET_TTL",
    "Facts",
    "Relay",
    "RelayPlan",
    "Verdict",
    "decide",
    "quiet",
    "relay_lead",
]

#: Seconds between two checks while places may be free and work waits.
CHECK_EVERY: Final = 1.0
#: ... while the chain is full (an element that ends is seen at the next check).
CHECK_FULL: Final = 2.0
#: ... while no work waits (a followed list may grow; a dead run's tasks may come free).
CHECK_IDLE: Final = 5.0
#: Seconds after a failed submission before the chain's next try, doubled after each more
#: failure in a row, never more than RETRY_MOST.
RETRY_FIRST: Final = 2.0
RETRY_MOST: Final = 300.0
#: Seconds a decided submission holds its place without an answer: many times a
#: submission command's own deadline (a run killed between its decision and its answer
#: holds none for ever).
TICKET_TTL: Final = 120.0
#: Seconds the last element to leave waits for the scheduler to stop showing the others
#: before it submits all the same, and after which it gives up when submissions fail.
HANDOFF_WAIT: Final = 60.0
HANDOFF_GIVE_UP: Final = 300.0
#: Seconds without a row of an element's run after which its life is asked of the
#: scheduler afresh, at least QUIET_LEAST, QUIET_PER for each place of the chain (each run
#: asks about each element: the questions grow with N x N, their pace with N).
QUIET_LEAST: Final = 5.0
QUIET_PER: Final = 2.0
#: A relay run whose deadline is its job's end stops starting tasks this share of its time
#: earlier, at least LEAD_LEAST and at most LEAD_MOST seconds (see relay_lead).
LEAD_SHARE: Final = 0.05
LEAD_LEAST: Final = 5.0
LEAD_MOST: Final = 120.0


def quiet(n: int) -> float:
    """Seconds an element of a chain of ``n`` may write no row before it is asked about."""
    return max(QUIET_LEAST, QUIET_PER * n)


def relay_lead(left: float) -> float:
    """Seconds before its job's end (``left`` seconds away when it begins) a relay run
    stops starting tasks: room for the last element to hand its place on before the
    scheduler ends its job."""
    return min(max(LEAD_SHARE * left, LEAD_LEAST), LEAD_MOST)


class RelayPlan(NamedTuple):
    """A relay run's settings: the chain's N, ``--max-relays``, this run's element (its
    job key, "" outside a job) and its run id."""

    n: int
    max_relays: int | None
    me: str
    run: str


class Facts(NamedTuple):
    """What a run says of itself at a check: tasks it knows wait for a run (found free,
    claimed and not started, left at a stop or its deadline); why it ends (None: it goes
    on; ``done``, ``idle``, ``deadline``, ``signal``, ``stopped``, ``halted``,
    ``error``); the words of a halt; the tasks it gave up; whether it follows a list that
    is open and waits for lines with no ``--idle`` (a chain kept allocated: lines to come
    are work, when its deadline or a signal ends it)."""

    waiting: bool
    ending: str | None = None
    words: str = ""
    given_up: int = 0
    open_list: bool = False  # it follows a list not closed, with no --idle: lines to come


class Verdict(NamedTuple):
    """What :func:`decide` decided: the relay rows to append (fields), the ticket to submit
    now (None: none), seconds until the next check (None: none until the run ends), whether
    this run's relay has nothing more to do, the count it saw, and in words."""

    rows: list[list[str]]
    ticket: str | None
    next: float | None
    done: bool
    count: int
    words: str


def decide(
    chain: Chain,
    plan: RelayPlan,
    facts: Facts,
    *,
    ticket: str,
    now: float,
    alive: Callable[[str, float, bool], bool | None],
    list_waiting: bool,
    stopped: bool,
    exited: bool,
    waited: float = 0.0,
) -> Verdict:
    """The chain's rule (see the module's docstring), under the ledger's lock: ``chain``
    folded up to the last row, ``now`` (seconds since the epoch), ``alive(job, after,
    by_rows)`` the word on a job newer than ``after`` (a row its run wrote since, when
    ``by_rows``; else the scheduler's answer to a question asked since; None: no such word
    yet, or none can be had, which counts as queued or running), ``list_waiting``: whole
    lines past the cursor, or tasks the ledger says no run holds (given back,
    interrupted), ``stopped``: ``zotsink stop`` told this run to stop, ``exited``: its
    ``exit`` row is written, ``waited``: seconds since it began to end."""
    rows: list[list[str]] = []
    ending = facts.ending is not None
    if ending and not exited and plan.me:
        rows.append(relay_fields("exit", job=plan.me))
    count = 1 if plan.me else 0  # this run's element, while it runs or ends
    staying = 0  # elements other than this one that carry on: running, queued, submitted
    unsure = 0  # ... of which no word newer than this run's end has come yet
    fresh = now - waited if ending else now - quiet(plan.n)
    gone: set[str] = set()  # said gone by this decision
    for job, el in chain.open().items():
        if job == plan.me:
            continue
        # one that said it ends is gone only by the scheduler's word: asked again at each
        # check until it is
        ended = el.state == "exited"
        recent = max(el.time, now - CHECK_EVERY)
        said = alive(job, recent, False) if ended else alive(job, fresh, True)
        if said is False:
            rows.append(relay_fields("gone", job=job))
            gone.add(job)
            continue
        if not job and el.state == "exited":
            continue  # a run outside a job: nobody to ask, and it said it ends
        count += 1
        if el.state != "exited":
            staying += 1
            unsure += said is None
    pending = chain.pending(now, TICKET_TTL)
    count += len(pending)
    staying += len(pending)
    n = plan.n
    made = chain.submitted + len(pending)
    full = plan.max_relays is not None and made >= plan.max_relays
    waiting = list_waiting or facts.waiting
    if facts.ending in ("deadline", "signal") and facts.open_list:
        waiting = True  # lines to come: the chain stays allocated
    retry = chain.retry_at(RETRY_FIRST, RETRY_MOST)
    seen = f"{count}/{n}"

    def verdict(next_: float | None, words: str, *, done: bool = False) -> Verdict:
        return Verdict(rows, None, next_, done, count, words)

    def submit(why: str) -> Verdict:
        rows.append(relay_fields("decide", ticket=ticket, count=seen, note=why))
        return Verdict(rows, ticket, None, False, count, f"{why}: a successor ({seen})")

    if not ending:
        if stopped:
            return verdict(None, "stopped: no successor")
        if full:
            return verdict(None, f"--max-relays {plan.max_relays} reached")
        if not waiting:
            return verdict(CHECK_IDLE, "no work waits")
        if count >= n:
            return verdict(CHECK_FULL, f"the chain is full ({seen})")
        if now < retry:
            return verdict(retry - now, "the last submission failed: waiting to try again")
        return submit("fill")

    # this run ends
    holder = chain.handing
    if holder is not None and holder.run != plan.run:
        # another element that leaves hands on (one holder: the leavers never wait on
        # each other), unless the scheduler says it is gone
        if holder.job in gone:
            said = False
        else:
            said = alive(holder.job, holder.time, False) if holder.job else True
        if said is not False:
            return verdict(None, f"{holder.job or 'another run'} hands on", done=True)
        if holder.job not in gone:
            rows.append(relay_fields("gone", job=holder.job))
    if unsure and waited < HANDOFF_WAIT:
        # an element killed without a word would leave nobody to hand on: ask first
        return verdict(CHECK_EVERY, "asking the scheduler whether the others carry on")
    if staying:
        return verdict(None, f"{staying} other element(s) carry on", done=True)
    reason = _end_reason(facts, stopped=stopped, full=full, waiting=waiting)
    if reason is not None:
        if facts.ending != "error":
            why, words = reason
            rows.append(relay_fields("end", job=plan.me, note=f"{why}: {words}"))
        return verdict(None, f"the chain ends: {reason[1]}", done=True)
    # the last to leave, with work left: hand its place on
    if waited >= HANDOFF_GIVE_UP and chain.fails_in_row:
        last = chain.last_fail.message if chain.last_fail is not None else ""
        rows.append(
            relay_fields(
                "end",
                job=plan.me,
                note=f"broken: no successor could be submitted ({last})",
            )
        )
        return verdict(None, "the chain is broken: submissions failed", done=True)
    if holder is None or holder.run != plan.run:
        rows.append(relay_fields("handoff", job=plan.me))  # the others leave it to this run
    if now < retry:
        return verdict(retry - now, "the last submission failed: waiting to try again")
    hurry = facts.ending == "signal" or waited >= HANDOFF_WAIT
    if count < n or count == 1 or hurry:
        return submit("handoff")
    return verdict(CHECK_EVERY, f"waiting for a place ({seen}) to hand on")


def _end_reason(
    facts: Facts, *, stopped: bool, full: bool, waiting: bool
) -> tuple[str, str] | None:
    """Why the chain ends with this run, the last to leave (a word, and words for a
    person); None: it does not, work is left to hand on."""
    if stopped or facts.ending == "stopped":
        return "stopped", "`zotsink stop` ended the chain"
    if facts.ending == "error":
        return "broken", "the ledger could not be written"
    if facts.ending == "halted":
        return "failing", facts.words or "the tasks failed alike"
    if full:
        return "max-relays", "--max-relays submissions were made"
    if waiting:
        return None
    if facts.given_up:
        return "given-up", (
            f"only tasks given up after --max-attempts failures are left "
            f"({facts.given_up} in this run)"
        )
    if facts.ending == "idle":
        return "idle", "nothing came to do for --idle seconds"
    return "done", "no work waits"


class Relay:
    """One relay run's decisions about its chain (see the module's docstring): when to
    check, what a check's verdict means, one submission at a time; pure."""

    def __init__(self, plan: RelayPlan, *, now: float = 0.0) -> None:
        self.plan = plan
        self.next_check: float | None = now  # the first check at once
        self.checking = False
        self.submitting: str | None = None  # a ticket out
        self.tickets = 0
        self.exited = False
        self.ending_since: float | None = None
        self.done = False
        self.now = now
        self.submitted: list[str] = []  # jobs this run submitted
        self.failures: list[str] = []  # the messages of its failed submissions
        self.said: list[str] = []  # what its checks decided, when it changed
        self.error: Exception | None = None

    def turn(self, now: float, facts: Facts) -> list[Any]:
        """A turn of the run: what to do now (a check, or nothing)."""
        self.now = now
        if self.done or self.checking or self.submitting is not None:
            return []
        if facts.ending is not None and self.ending_since is None:
            self.ending_since = now
            self.next_check = now  # the end is checked at once
        if facts.ending == "error":
            self.done = True  # the ledger cannot be written: no row can say anything
            return []
        if self.next_check is None or now < self.next_check:
            return []
        self.checking = True
        waited = 0.0 if self.ending_since is None else now - self.ending_since
        return [RelayCheck(str(self.tickets + 1), facts, self.exited, waited)]

    def checked(self, ev: RelayChecked) -> list[Any]:
        """A check's verdict (or the error that kept it from being written)."""
        self.checking = False
        if ev.error is not None or ev.verdict is None:
            self.error = self.error or ev.error
            # the ledger refused the rows: try again later, or give up at the end
            if self.ending_since is not None:
                self.done = True
            else:
                self.next_check = self.now + CHECK_IDLE
            return []
        v = ev.verdict
        if self.ending_since is not None and self.plan.me:
            self.exited = True
        if not self.said or self.said[-1] != v.words:
            self.said.append(v.words)
        if v.ticket is not None:
            self.tickets += 1
            self.submitting = v.ticket
            return [Submit(v.ticket)]
        if v.done:
            self.done = True
            return []
        self.next_check = None if v.next is None else self.now + v.next
        return []

    def answered(self, ev: Submitted) -> list[Any]:
        """A submission's outcome: its row, written at once."""
        if ev.ticket != self.submitting:
            return []
        self.submitting = None
        if ev.job is not None:
            self.submitted.append(ev.job)
            row = relay_fields("job", ticket=ev.ticket, job=ev.job)
            if self.ending_since is not None:
                # handed on: its successor finds what is left (or ends the chain, when the
                # others did it meanwhile); one more check here would hand on again
                self.done = True
        else:
            self.failures.append(ev.message)
            row = relay_fields("fail", ticket=ev.ticket, note=ev.message)
        self.next_check = self.now  # fill on, hand on, or wait as the next check says
        return [Rows(relays=[row], now=True)]

    def wake(self) -> float | None:
        """When the next check is due (None: none, or one is under way)."""
        if self.done or self.checking or self.submitting is not None:
            return None
        return self.next_check
