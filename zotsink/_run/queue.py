"""Which tasks are this run's to start next: the one owner of that decision.

A :class:`TaskQueue` is a pure decision object, fed events and asked questions, with no
I/O of its own (the ledger reads and writes, the pool polls and starts): it is tested by
feeding it events and looking at what it picks.

- Its candidates come from a *source* (:class:`TaskSource`): today an array element's chunk
  (:class:`ChunkSource`, every runnable line without an index). A source hands over new
  tasks when asked (:meth:`TaskQueue.refill`) and says when no more will come.
- A task the queue got after the run began has a history in the ledger this run has not
  read: it is not picked until the ledger has folded that history (:attr:`unlearned`,
  :meth:`learn`). Picking it blind would start attempt 1 of a task that is ``ok``.
- :meth:`pick` runs under the ledger's lock with the states the ledger folded (and its
  rules: given up, alive): a task done or running elsewhere is dropped, one given up is
  dropped for good, the rest get their next attempt number and wait, claimed, to be
  started (:meth:`next`). The ledger records what was picked; the queue reads states only.
- How many to claim (:meth:`to_claim`): as many as can start now, and as many as will
  start before the commit after the next at the rate tasks started since the last claim,
  but none ahead before a task ran at all (a command that cannot start claims no more than
  it fails).
- A retry goes to the front; a stop claims nothing more (:meth:`stop`) and gives back the
  claimed tasks not started (:meth:`release`), for their ``interrupted`` rows.
- A queue that takes over (``take_over``: a ``--pull`` run) keeps the tasks it found running
  in other runs (:attr:`watched`) without asking whether those runs live (no scheduler is
  asked under the ledger's lock); once its own candidates are gone it is asked
  (:meth:`recheck`, outside the lock): a task whose run is known dead goes back to the
  candidates, and is claimed if its start row is still the latest; a run whose liveness
  nobody can tell keeps its task.
- With a ``deadline`` a task expected to end after it is not claimed (:meth:`out_of_time`):
  another run will take it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Literal, NamedTuple, Protocol, TypeVar

from .._core.fileio import line_blocks

__all__ = [
    "Candidate",
    "ChunkSource",
    "FollowSource",
    "Picked",
    "PullSource",
    "State",
    "TaskQueue",
    "TaskSource",
    "Verdict",
    "verdict",
]

#: What a pick decides for a candidate: start it here, or not (done or running elsewhere,
#: or given up: failed max_attempts times).
Verdict = Literal["start", "done", "elsewhere", "given-up"]


class Candidate(Protocol):
    """A task as the queue takes it (a :class:`~zotsink._run.tasks.Task`): its number in
    the task list and its line, which the ledger's rows name."""

    @property
    def num(self) -> int: ...

    @property
    def line(self) -> str: ...


Task = TypeVar("Task", bound=Candidate)


class TaskSource(Protocol[Task]):
    """Where a queue's candidates come from."""

    def take(self) -> Sequence[Task]:
        """The tasks new since the last call (reads the task list, if it must)."""
        ...

    @property
    def closed(self) -> bool:
        """No more tasks will come."""
        ...


class ChunkSource(Generic[Task]):
    """A fixed list: an array element's chunk, or every task of a run without an index."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self._tasks = list(tasks)

    def take(self) -> Sequence[Task]:
        tasks, self._tasks = self._tasks, []
        return tasks

    @property
    def closed(self) -> bool:
        return not self._tasks


class PullSource(Generic[Task]):
    """Every runnable task of the list, for a ``--pull`` run: the list is read once, at the
    first :meth:`take` (never again per claim), whatever the array index."""

    def __init__(self, read: Callable[[], Iterable[Task]]) -> None:
        self._read: Callable[[], Iterable[Task]] | None = read

    def take(self) -> Sequence[Task]:
        if self._read is None:
            return ()
        read, self._read = self._read, None
        return list(read())

    @property
    def closed(self) -> bool:
        return self._read is None


class FollowSource(Generic[Task]):
    """A task list that grows while runs are live (``--follow``): each :meth:`take` reads
    only the bytes appended since the last one (by offset), whole lines only; a last line
    without its newline is being written and waits. Closed once :meth:`close` was told the
    list is (``zotsink close``) and the lines it had then were taken."""

    def __init__(
        self, read_tail: Callable[[int], bytes], make: Callable[[int, bytes], Task | None]
    ) -> None:
        self._read_tail = read_tail  # the list's bytes from an offset to its end
        self._make = make  # a task of a line number and its bytes; None: never runs
        self._offset = 0
        self._lines = 0  # lines taken so far: the next line's number is this + 1
        self._close_at: int | None = None  # lines the list had when it was closed

    def take(self) -> Sequence[Task]:
        tasks: list[Task] = []
        for lines, whole in line_blocks((self._read_tail(self._offset),)):
            if not whole:
                break  # a last line without its newline is being written: it waits
            for raw in lines:
                self._offset += len(raw) + 1
                self._lines += 1
                task = self._make(self._lines, raw)
                if task is not None:
                    tasks.append(task)
        return tasks

    def close(self, lines: int | None = None) -> None:
        """No more lines will come after the first ``lines`` (None: after those taken):
        a filesystem may show this node the last lines later than the close row."""
        self._close_at = self._lines if lines is None else lines

    @property
    def closed(self) -> bool:
        return self._close_at is not None and self._lines >= self._close_at


class State(Protocol):
    """What the queue reads of a task's ledger state (the ledger's ``TaskState``)."""

    @property
    def state(self) -> str: ...

    @property
    def starts(self) -> int: ...

    @property
    def last(self) -> object: ...


#: Whether a task's state says it is given up (its failures reached max_attempts): the
#: ledger's rule, handed to the queue.
GivenUp = Callable[[State], bool]
#: Whether the run of a ``start`` row still runs (True, False, None: cannot tell).
Alive = Callable[[Any], "bool | None"]


class Picked(NamedTuple):
    """One pick: the tasks claimed (with their attempt) and those dropped."""

    claimed: list[tuple[Any, int]]
    dropped: list[Any]


def verdict(state: State | None, *, rerun: bool, given_up: GivenUp, alive: Alive) -> Verdict:
    """Whether a task whose ledger state is ``state`` is to start here (``rerun``: its ``ok``
    does not count); ``alive`` tells whether the run of a ``start`` row still runs."""
    if state is None:
        return "start"
    if given_up(state):
        return "given-up"
    if state.state == "ok" and not rerun:
        return "done"
    if state.state == "running" and state.last is not None and alive(state.last):
        return "elsewhere"
    return "start"


def _never_alive(row: Any) -> bool | None:
    return None


class TaskQueue(Generic[Task]):
    """The tasks this run may start, in order, and the decisions about them."""

    def __init__(
        self,
        source: TaskSource[Task],
        *,
        given_up: GivenUp,
        rerun: bool = False,
        take_over: bool = False,
    ) -> None:
        self.source = source
        self.rerun = rerun
        self.take_over = take_over
        #: Tasks found running in another run (take_over): number -> task.
        self.watched: dict[int, Task] = {}
        self.unknown: set[int] = set()  # left with a run whose liveness nobody can tell
        self.taken_over = 0  # tasks of dead runs claimed here
        self._dead: dict[int, Any] = {}  # number -> the start row of a run found dead
        #: Claim no task expected to end after this (monotonic seconds; None: no end), at
        #: the time a task is expected to take.
        self.deadline: float | None = None
        self.task_time = 0.0
        self.out_of_time = False  # a task was left to another run: it would not finish
        self._given_up = given_up
        #: Every task the queue was given, number -> line: the rows the ledger folds.
        self.keys: dict[int, str] = {}
        self._pending: deque[Task] = deque()  # candidates, in order
        self._unlearned: dict[int, Task] = {}  # got after the run began: history not read
        self._ready: deque[tuple[Task, int]] = deque()  # claimed, not started
        self._rerun_ok: set[int] = set()  # ok when learned, to run again once (rerun)
        self.stopped = False
        self.total = 0  # tasks learned that this run may start
        self.skipped = 0  # learned ok: not to run
        self.given_up: set[int] = set()  # failed max_attempts times: not to start
        self.elsewhere = 0  # dropped at a pick: done or running in another run
        # the rate tasks start at, since the last claim
        self._since_claim = 0
        self._claimed_at = 0.0
        self._asked_at = 0.0
        self._ran = False  # a task ran at all
        self._picked = 0  # tasks claimed in this run
        self._cap: int | None = None  # claim no more than this many in all (see limit)

    @classmethod
    def over(cls, tasks: deque[Task], *, given_up: GivenUp, rerun_ok: set[int]) -> TaskQueue[Task]:
        """A queue whose candidates are ``tasks`` itself, already learned (picks take from
        it, tasks given back return to it); ``rerun_ok``: those to run again though ok."""
        q: TaskQueue[Task] = cls(ChunkSource(()), given_up=given_up)
        q._pending = tasks
        q._rerun_ok = rerun_ok
        return q

    # -- candidates ---------------------------------------------------------------------
    def refill(self) -> int:
        """Take the source's new tasks; they wait for :meth:`learn`. How many came."""
        if self.stopped:
            return 0
        new = self.source.take()
        for task in new:
            if task.num not in self.keys:
                self.keys[task.num] = task.line
                self._unlearned[task.num] = task
        return len(new)

    @property
    def unlearned(self) -> Mapping[int, str]:
        """Tasks whose ledger history this run has not read yet (number -> line)."""
        return {num: t.line for num, t in self._unlearned.items()}

    def learn(self, states: Mapping[int, State]) -> None:
        """The ledger's states now include the whole history of :attr:`unlearned`: those
        that are ``ok`` (unless rerun) or given up are not candidates."""
        for num, task in self._unlearned.items():
            state = states.get(num)
            if state is not None and self._given_up(state):
                self.given_up.add(num)
            elif state is not None and state.state == "ok" and not self.rerun:
                self.skipped += 1
            else:
                if state is not None and state.state == "ok":
                    self._rerun_ok.add(num)
                self._pending.append(task)
                self.total += 1
        self._unlearned.clear()

    # -- claiming -----------------------------------------------------------------------
    def to_claim(self, free: int, window: float, now: float) -> int:
        """How many tasks to claim now: ``free`` slots, and as many as will start within
        twice the commit ``window`` at the rate tasks started since the last claim, less
        those claimed and not started. 0 when there is nothing to claim."""
        if self.stopped or self.out_of_time or not (self._pending or self._unlearned):
            return 0
        if self.deadline is not None and now + self.task_time > self.deadline:
            self.out_of_time = True  # another run will start what is left
            return 0
        rate = self._since_claim / max(now - self._claimed_at, 1e-3)
        ahead = math.ceil(rate * 2 * window) if self._ran else 0
        self._asked_at = now
        want = max(max(free, 0) + ahead - len(self._ready), 0)
        if self._cap is not None:
            want = min(want, max(self._cap - self._picked, 0))
        return want

    def claim_due(self, free: int, idle: bool) -> bool:
        """Whether to claim now, commit or not: a task could start (a free slot, or nothing
        runs at all) and none claimed waits."""
        waiting = self._pending or self._unlearned
        capped = self._cap is not None and self._picked >= self._cap
        ready = not self._ready and not self.stopped and not self.out_of_time and not capped
        return bool(waiting) and ready and (free > 0 or idle)

    def pick(
        self,
        n: int,
        states: Mapping[int, State],
        alive: Alive = _never_alive,
    ) -> Picked:
        """Up to ``n`` tasks from the front, by the ledger's ``states`` (under its lock),
        each claimed one with its attempt number (the ledger records it as running)."""
        claimed: list[tuple[Task, int]] = []
        dropped: list[Task] = []
        live = alive
        if self.take_over:

            def live(row: Any) -> bool | None:
                # Nobody is asked under the lock: a running task is its run's, unless
                # recheck() found that run dead (and no other run started it since)
                return self._dead.get(row.tasknum) != row

        while self._pending and len(claimed) < n and not self.stopped:
            task = self._pending.popleft()
            state = states.get(task.num)
            rerun = task.num in self._rerun_ok
            what = verdict(state, rerun=rerun, given_up=self._given_up, alive=live)
            if what != "start":
                if what == "given-up":
                    self.given_up.add(task.num)
                elif what == "elsewhere" and self.take_over:
                    self.watched[task.num] = task  # its run may die: see recheck()
                else:
                    self.elsewhere += 1
                dropped.append(task)
                continue
            self._rerun_ok.discard(task.num)  # run again once, not once per retry
            if self._dead.pop(task.num, None) is not None:
                self.taken_over += 1
            claimed.append((task, (state.starts if state is not None else 0) + 1))
        self._ready.extend(claimed)
        self._picked += len(claimed)
        self._since_claim = 0
        self._claimed_at = self._asked_at
        return Picked(claimed, dropped)

    def recheck(self, states: Mapping[int, State], alive: Alive) -> int:
        """Judge the :attr:`watched` tasks again by the ledger's ``states``: one whose run is
        known dead, or that its run interrupted, goes back to the candidates (the claim
        judges it again under the lock), one that ended otherwise, or whose run nobody can
        tell of, is no longer watched. How many came back."""
        back = 0
        for num, task in list(self.watched.items()):
            state = states.get(num)
            if state is not None and state.state == "running" and state.last is not None:
                live = alive(state.last)
                if live:
                    continue
                del self.watched[num]
                if live is None:
                    self.unknown.add(num)
                    continue
                self._dead[num] = state.last
                self._pending.append(task)
                back += 1
            else:
                del self.watched[num]
                if state is not None and state.state == "interrupted":
                    # its run was stopped before the task ended (a cancelled element):
                    # not done, and no longer anybody's
                    self._pending.append(task)
                    back += 1
                else:
                    self.elsewhere += 1
        return back

    @property
    def waits_on_others(self) -> bool:
        """Nothing of its own left, and tasks running in other runs that may die."""
        return (
            bool(self.watched)
            and not self.stopped
            and not self.out_of_time
            and not (self._pending or self._unlearned or self._ready)
        )

    def limit(self, n: int | None) -> None:
        """Claim no more than ``n`` more tasks until told otherwise (None: no limit): a run
        whose ledger says every task fails alike tries one first (see .halting)."""
        self._cap = None if n is None else self._picked + n

    def unpick(self, picked: Picked) -> None:
        """The claim was not written: its tasks are back where they were."""
        self._picked -= len(picked.claimed)
        for task, _ in reversed(picked.claimed):
            self._ready.pop()
            self._pending.appendleft(task)

    # -- starting and ending --------------------------------------------------------------
    def next(self) -> tuple[Task, int] | None:
        """The next claimed task to start, and its attempt; None when none waits."""
        if self.stopped or not self._ready:
            return None
        self._since_claim += 1
        return self._ready.popleft()

    def give_back(self, claimed: Sequence[tuple[Task, int]]) -> None:
        """Tasks taken by :meth:`next` and not started after all (their worker died before
        it began them): first to start again, each with its attempt."""
        self._ready.extendleft(reversed(claimed))
        self._since_claim = max(self._since_claim - len(claimed), 0)

    def ran(self) -> None:
        """A task really ran (its process started, or its call returned)."""
        self._ran = True

    @property
    def has_run(self) -> bool:
        """A task really ran in this run (see :meth:`ran`)."""
        return self._ran

    def retry(self, task: Task) -> None:
        """A failed attempt to be tried again: first of the candidates."""
        if not self.stopped:
            self._pending.appendleft(task)

    def stop(self) -> None:
        """Claim nothing more (a stop signal, a halt, a ledger that cannot be written)."""
        self.stopped = True
        self._pending.clear()
        self.watched.clear()

    def release(self) -> list[tuple[Task, int]]:
        """The claimed tasks not started (after a stop), taken off the queue."""
        ready = list(self._ready)
        self._ready.clear()
        return ready

    # -- where it stands -----------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Candidates not claimed yet."""
        return len(self._pending)

    @property
    def claimed(self) -> int:
        """Tasks claimed and not started."""
        return len(self._ready)

    @property
    def has_work(self) -> bool:
        """Tasks wait to be claimed or started."""
        if self.stopped or (self.out_of_time and not self._ready):
            return False
        return bool(self._pending or self._unlearned or self._ready)

    @property
    def exhausted(self) -> bool:
        """Nothing more to start: no candidate, none claimed, and no more will come."""
        if self._ready:
            return False
        if self.stopped or self.out_of_time:
            return True
        return not (self._pending or self._unlearned or self.watched) and self.source.closed
