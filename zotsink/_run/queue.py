"""Which tasks are this run's to claim and start next: the one owner of that decision.

A :class:`TaskQueue` is a pure decision object, fed what the ledger said and asked what to
do, with no I/O of its own (:mod:`zotsink._run.ledger` reads and writes, the state object
feeds it): it is tested by feeding it.

Where its tasks come from:

- the **cursor** (``--pull``, ``--follow``): the next tasks of the list that no run has
  claimed yet, which the ledger's last row points at; the ledger reads them from the list
  under its lock (:func:`~zotsink._run.tasks.read_ahead`), so a claim reads neither the
  history nor the rows of other runs. Once the list has no more (``drained``), a pull run
  looks at the ledger for tasks to take over (:meth:`learn`);
- **by name**: a chunk of an array (``--index``), this run's own failed attempts to try
  again (first of all, ``--retries``), tasks a look found free (given back, of a dead run,
  failed before this run began). Each is claimed with the attempt the look saw next; if
  the ledger, read again under the lock, shows it claimed since (another run took it),
  it is dropped (:meth:`verify`).

How many to claim (:meth:`to_claim`): as many as can start now, and as many as will start
before the commit after the next (half a second and :data:`AHEAD_TASKS` at most) at the
rate tasks started since the last claim, measured over a commit window at least, but none
ahead before a task ran at all (a command that cannot start claims no more than it fails).
Claimed tasks not started wait in order (:meth:`next`); a stop claims nothing more and
gives the claimed back (:meth:`release`); so does a claim held too long once the list has
no line past the cursor (:meth:`lapsed`, :meth:`peek_due`): a run never sits on tasks
another run could start.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Literal, NamedTuple

from .tasks import Task

__all__ = ["AHEAD_MOST", "AHEAD_TASKS", "ASK_BEYOND", "Candidate", "Mode", "TaskQueue"]

#: Tasks by name a claim is handed beyond those it may take: under the lock it drops those
#: another run claimed since the look and gives the free ones back. Tasks given back by a
#: run are found by every look at once; a run that asked for them one claim at a time
#: took the lock once for each that another run had already taken (thousands of empty
#: appends with 64 runs).
ASK_BEYOND: Final = 1024

#: Seconds of this run's tasks a claim takes ahead at most (a commit window is up to 2 s
#: for long tasks; half the hold: what waits a second behind a slow task is given back).
AHEAD_MOST: Final = 0.5

#: Tasks a claim takes ahead at most: a run that began before the others (an array's
#: elements start over seconds) measures a rate it loses as they start, and what it
#: claimed on it waits for the list's end to be given back.
AHEAD_TASKS: Final = 1000

#: Where a run's tasks come from: its chunk, the cursor over the whole list, the cursor
#: over a list that grows.
Mode = Literal["chunk", "pull", "follow"]


class Candidate(NamedTuple):
    """A task to claim by name: the attempt the last look saw next, whether its line is
    another than its earlier attempts ran (the claim says so), and whether a run that died
    held it (a takeover, counted)."""

    task: Task
    attempt: int
    fresh: bool = False
    taken: bool = False
    failures: int = 0  # its failed attempts so far (see --max-attempts)


class TaskQueue:
    """The tasks this run may claim and start, in order, and the decisions about them."""

    def __init__(self, mode: Mode, *, rerun: bool = False) -> None:
        self.mode = mode
        self.rerun = rerun
        self.cursor = mode != "chunk"  # tasks come from the ledger's cursor too
        self.drained = mode == "chunk"  # the cursor has no task now
        self.closed = mode != "follow"  # no more lines will come to the list
        self._named: deque[Candidate] = deque()  # to claim by name, in order
        self._retries: deque[Candidate] = deque()  # this run's own, first of all
        self._ready: deque[tuple[Task, int, float]] = deque()  # claimed, not started
        self._asked: list[Candidate] = []  # handed to the claim under way
        self.stopped = False
        self.out_of_time = False
        self.others = 0  # tasks other live runs hold (a look's count)
        self.total = 0  # tasks this run claimed or was given by name
        self.skipped = 0  # of its chunk: ok already
        self.given_up: set[int] = set()
        self.elsewhere = 0  # of its chunk: held by another run, or done by one since
        self.taken_over = 0  # tasks of dead runs claimed here
        # the rate tasks start at, since the last claim
        self._since_claim = 0
        self._claimed_at = 0.0
        self._ran = False
        self._picked = 0
        self._cap: int | None = None

    # -- candidates ---------------------------------------------------------------------
    def add(self, candidates: Iterable[Candidate]) -> None:
        """Tasks to claim by name (a chunk; tasks a look found free), after those waiting."""
        if self.stopped:
            return
        for c in candidates:
            self._named.append(c)
            self.total += 1

    def learn(self, free: Sequence[Candidate], held: int) -> int:
        """What a look found: tasks free to take (given back, of a dead run), and how many
        other live runs hold. How many came that this run did not know."""
        self.others = held
        if self.stopped:
            return 0
        known = {c.task.num for c in self._named} | {c.task.num for c in self._retries}
        known |= {t.num for t, _a, _c in self._ready}
        new = [c for c in free if c.task.num not in known]
        self._named.extend(new)
        return len(new)

    def retry(self, task: Task, attempt: int) -> None:
        """This run's failed attempt, to be tried again: first of the candidates."""
        if not self.stopped:
            self._retries.append(Candidate(task, attempt + 1))

    def close(self) -> None:
        """The followed list is closed: no more lines will come."""
        self.closed = True

    def grew(self) -> None:
        """The list has lines past the cursor: the cursor is worth a claim again."""
        self.drained = False

    def time_out(self) -> None:
        """A task would end after the deadline: nothing more is claimed or begun here."""
        self.out_of_time = True

    def give_up(self, num: int) -> None:
        """A task of this run failed ``max_attempts`` times: it is given up."""
        self.given_up.add(num)

    def settle_chunk(self, ok: int, given_up: Iterable[int], elsewhere: int) -> None:
        """What the first look found of the chunk besides the tasks to claim: ok already
        (skipped), given up, begun in another live run."""
        self.skipped += ok
        self.given_up.update(given_up)
        self.elsewhere += elsewhere

    # -- claiming -----------------------------------------------------------------------
    def to_claim(self, free: int, window: float, now: float) -> int:
        """How many tasks to claim now: ``free`` slots, and as many as will start within
        twice the commit ``window`` at the rate tasks started since the last claim, less
        those claimed and not started. 0 when there is nothing to claim."""
        if self.stopped or self.out_of_time or not self.waiting:
            return 0
        # over a commit window at least: a rate measured over the few milliseconds a
        # worker takes its first batch in is hundreds of times the true one, and a run
        # that claims on it holds thousands of tasks it gives back a second later (with
        # this floor a claim ahead at most doubles the tasks started since the last one)
        rate = self._since_claim / max(now - self._claimed_at, window)
        # whole tasks that start within the horizon: a task of a second or more is never
        # claimed ahead (no claim is worth saving for it, and one claimed behind it waits)
        ahead = math.floor(rate * min(2 * window, AHEAD_MOST)) if self._ran else 0
        ahead = min(ahead, AHEAD_TASKS)
        want = max(max(free, 0) + ahead - len(self._ready), 0)
        if self._cap is not None:
            want = min(want, max(self._cap - self._picked, 0))
        return want

    @property
    def waiting(self) -> bool:
        """Tasks wait to be claimed: by name, or the cursor has some."""
        return bool(self._named or self._retries or not self.drained)

    def claim_due(self, free: int, idle: bool) -> bool:
        """Whether to claim now: a task could start (a free slot, or nothing runs at all),
        none claimed waits, and there is something to claim."""
        capped = self._cap is not None and self._picked >= self._cap
        ready = not self._ready and not self.stopped and not self.out_of_time and not capped
        return self.waiting and ready and (free > 0 or idle)

    def ask(self, n: int) -> list[Candidate]:
        """The first tasks to claim by name, handed to a claim of ``n`` (own retries first),
        :data:`ASK_BEYOND` more than it may take; :meth:`claimed` or :meth:`unasked` says
        what became of them."""
        asked: list[Candidate] = []
        while len(asked) < n + ASK_BEYOND and (self._retries or self._named):
            asked.append(self._retries.popleft() if self._retries else self._named.popleft())
        self._asked = asked
        return asked

    @staticmethod
    def verify(
        asked: Sequence[Candidate], attempts: Callable[[int], int]
    ) -> tuple[list[Candidate], list[Candidate]]:
        """Under the ledger's lock, its news read: which asked tasks to claim (none claimed
        them since the look: their next attempt is still the one asked) and which to drop
        (another run claimed them since). ``attempts(num)``: the claims the ledger holds of
        a task."""
        take: list[Candidate] = []
        drop: list[Candidate] = []
        for c in asked:
            if attempts(c.task.num) >= c.attempt:
                drop.append(c)
            else:
                take.append(c)
        return take, drop

    def claimed(
        self,
        tasks: Sequence[tuple[Task, int]],
        dropped: Sequence[Candidate],
        now: float,
        *,
        drained: bool,
        taken_over: int = 0,
        rest: Sequence[Candidate] = (),
    ) -> None:
        """The claim was written: ``tasks`` wait to start; ``dropped`` were another run's
        meanwhile; ``drained``: the cursor has no more for now; ``rest``: asked, still
        free, beyond what the claim took: candidates again, first, in order."""
        self._asked = []
        for c in reversed(rest):
            self._named.appendleft(c)
        self.elsewhere += len(dropped)
        self.taken_over += taken_over
        for task, attempt in tasks:
            self._ready.append((task, attempt, now))
        if self.cursor:
            self.total += sum(1 for _t, a in tasks if a == 1)
            self.drained = drained
        self._picked += len(tasks)
        self._since_claim = 0
        self._claimed_at = now

    def unasked(self) -> None:
        """The claim was not written: the tasks asked are candidates again, in order."""
        for c in reversed(self._asked):
            self._named.appendleft(c)
        self._asked = []

    def limit(self, n: int | None) -> None:
        """Claim no more than ``n`` more tasks until told otherwise (None: no limit): a run
        whose ledger says every task fails alike tries one first (see .halting)."""
        self._cap = None if n is None else self._picked + n

    # -- starting -------------------------------------------------------------------------
    def next(self) -> tuple[Task, int, float] | None:
        """The next claimed task to start, its attempt and when it was claimed."""
        if self.stopped or not self._ready:
            return None
        self._since_claim += 1
        return self._ready.popleft()

    def give_back(self, claimed: Sequence[tuple[Task, int, float]]) -> None:
        """Tasks taken by :meth:`next` and not started after all: first to start again."""
        self._ready.extendleft(reversed(claimed))
        self._since_claim = max(self._since_claim - len(claimed), 0)

    def ran(self) -> None:
        """A task really ran (its process started, or its call returned)."""
        self._ran = True

    @property
    def has_run(self) -> bool:
        return self._ran

    def stale(self, now: float, hold: float) -> list[tuple[Task, int]]:
        """Claimed tasks that waited longer than ``hold`` seconds to start (this run's slots
        are busy with slower tasks): taken off, to be given back for other runs to take."""
        out: list[tuple[Task, int]] = []
        while self._ready and now - self._ready[-1][2] > hold:
            task, attempt, _at = self._ready.pop()
            out.append((task, attempt))
        return out

    def stale_due(self, now: float, hold: float) -> bool:
        """Whether a claimed task waited longer than ``hold`` seconds to start."""
        return bool(self._ready) and now - self._ready[-1][2] > hold

    def lapsed(self, now: float, hold: float) -> list[tuple[Task, int]]:
        """The claimed tasks to give back now (:meth:`stale`), once the list has no line
        past the cursor. Before, every run claims from the list and none idles for want
        of them: giving them back would only make other runs look for them, claim them by
        name and read the list for their lines (a third of all tasks, with 64 runs on two
        cores, whose claims wait for the CPU). A claim ahead is little: half a second of
        tasks, a thousand at most, none of a second or more."""
        if not self.cursor or not self.drained or self.stopped:
            return []
        return self.stale(now, hold)

    def peek_due(self, now: float, hold: float) -> bool:
        """Whether claimed tasks waited past ``hold`` while the list, as the last claim
        read the ledger, had lines past the cursor: a peek at the ledger's last row says
        whether it still has (:meth:`drain` when not)."""
        return self.cursor and not self.drained and not self.stopped and self.stale_due(now, hold)

    def drain(self) -> None:
        """A look found no line past the ledger's cursor: other runs have none to claim."""
        self.drained = True

    def stop(self) -> None:
        """Claim nothing more (a stop, a halt, a ledger that cannot be written)."""
        self.stopped = True
        self._named.clear()
        self._retries.clear()

    def release(self) -> list[tuple[Task, int]]:
        """The claimed tasks not started (after a stop), taken off the queue."""
        ready = [(t, a) for t, a, _at in self._ready]
        self._ready.clear()
        return ready

    # -- where it stands --------------------------------------------------------------------
    @property
    def claimed_count(self) -> int:
        """Tasks claimed and not started."""
        return len(self._ready)

    @property
    def pending(self) -> int:
        """Tasks to claim by name."""
        return len(self._named) + len(self._retries)

    @property
    def has_work(self) -> bool:
        """Tasks wait to be claimed or started."""
        if self.stopped or (self.out_of_time and not self._ready):
            return False
        return bool(self._ready) or self.waiting

    @property
    def waits_on_others(self) -> bool:
        """Nothing of its own left, and tasks held by other runs that may give them back or
        die (claimed, not begun; begun by a run gone, whose process lingers)."""
        return self.others > 0 and not self.stopped and not self.out_of_time and not self.has_work
