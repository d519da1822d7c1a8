"""A run's look at the ledger and the task list: the rare path of the work queue.

A claim reads the ledger's last row; a look reads what other runs appended since this run
last read (under a shared lock), and judges their tasks, once the run has nothing of its
own to claim: a pull run whose cursor reached the list's end, a follow run waiting for
lines. What it finds (:class:`~zotsink._run.events.Looked`):

- tasks free to take: given back (``release``), claimed by a run that is dead (never
  begun: at once; begun: once the task's own process is gone too: ``lost``), ended
  ``interrupted``, and ``failed`` before this run began (a resubmission runs them again;
  runs of one array do not retry each other's failures, ``--retries`` and
  ``--max-attempts`` say how often), each with the attempt it would be;
- how many tasks other live runs hold (the run waits for them: they may die), and how
  many are held by runs nothing here can tell of (left with their runs, and counted);
- whether the list is closed, a stop came for this run, or the list has whole lines past
  the cursor (a follow run claims again).

Each run is judged once per look (:class:`~zotsink._run.alive.Judge`: this host's pid
table, else the scheduler's last answer, the question left out for the next look: a look
never waits for a scheduler).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .._ledger.pieces import out_file
from .._ledger.view import LedgerView
from ..errors import ZotsinkError
from .alive import Judge
from .events import Looked
from .ledger import Ledger
from .tasks import Task, lines_of

__all__ = ["Looker"]

#: States a look takes a task in: free to run here.
_FREE = frozenset(("never", "lost", "interrupted"))
_FAILED = frozenset(("failed", "killed", "timeout", "oom"))


class Looker:
    """The looks of one run (see the module's docstring). ``scope``: the tasks a chunked run
    is for (number -> line; None: a pull run's, the whole list)."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        tasks: str,
        out: str,
        began: float,
        max_attempts: int | None,
        rerun: bool,
        scope: Mapping[int, str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.tasks = tasks
        self.out = out  # OUT: an ok task whose records are no longer there runs again
        self.began = began  # wall time this run began: failures before it are a resubmission's
        self.max_attempts = max_attempts
        self.rerun = rerun
        self.scope = scope
        self._rerun_done: set[int] = set()
        #: what the first look found of a chunk: ok, given up, begun in another live run
        self.ok: set[int] = set()
        self.given_up: set[int] = set()
        self.elsewhere: set[int] = set()
        self.fresh: set[int] = set()  # tasks whose line is another than their history's

    def look(self, deep: bool, *, wait: float = 0.0) -> Looked:
        """What the ledger says now (``wait``: seconds the scheduler may take to answer in
        all; by default none: its last answer, the question left out for the next look);
        not ``deep``: a :meth:`peek`."""
        if not deep:
            return self.peek()
        try:
            view = self.ledger.look()
        except ZotsinkError as e:  # the lock, or a stop while waiting for it
            return Looked(error=e)
        control = view.control
        grew = self.scope is None and self._grew(control.closed_lines if control.closed else None)
        upto = max(self.ledger.cursor.next, len(view.code))
        if self.scope is not None:
            nums = [n for n in self.scope if n not in self.ok and n not in self.given_up]
        else:
            nums = view.unsettled(upto)
        judge = Judge(wait=wait)
        found = out_file(self.out)
        whole = not view.out_holds(found)
        if whole:
            # OUT was renamed, replaced, emptied or cut since ok ends claimed parts of it:
            # those tasks' records are gone, and they run again (the rare, whole look)
            try:
                view = self.ledger.whole_view()
            except ZotsinkError as e:
                return Looked(error=e)
            if self.scope is None:
                nums = sorted({*view.unsettled(upto), *view.ok_tasks(upto)})
            self.ok.clear()
        me = view.run_index.get(self.ledger.run_id, -2)
        held = unknown = 0
        if self.scope is None:
            nums, held = view.held_by_live(judge, nums, me)
        if whole:
            view.settle(judge, max_attempts=self.max_attempts, nums=nums, out=found)
        else:
            view.settle(judge, max_attempts=self.max_attempts, nums=nums)
        free: dict[int, int] = {}
        taken: set[int] = set()
        for num in nums:
            state = view.state(num)
            owner = view.owner[num] if num < len(view.owner) else -1
            if owner == me and state != "never":
                continue  # this run's: its own retries say what becomes of it
            if state in ("claimed", "running"):
                if num in view.unknown:
                    unknown += 1
                elif (
                    state == "running"
                    and self.scope is not None
                    and judge.run_alive(view.runs[owner])
                ):
                    self.elsewhere.add(num)  # begun in a live run: that run's to finish
                else:
                    held += 1  # claimed, or begun by a run gone whose process lingers: wait
                continue
            if self.scope is not None and state == "ok" and not self.rerun:
                self.ok.add(num)
                continue
            if state == "given-up":
                self.given_up.add(num)
                continue
            if (
                state in _FREE
                or (state in _FAILED and (self.scope is not None or self._resubmitted(view, num)))
                or (self.scope is not None and state == "ok")
            ):
                attempt = view.attempt[num] + 1 if num < len(view.attempt) else 1
                free[num] = attempt
                if view.held_before(num):
                    taken.add(num)  # a dead run's: taken over
        if self.rerun and self.scope is None:
            free.update(self._rerun(view, self.ledger.cursor.next))
        found: list[tuple[Task, int, bool, bool, int]] = []
        failures = view.failures
        if free:
            lines = self.scope if self.scope is not None else lines_of(self.tasks, free)
            found = [
                (
                    Task(n, lines[n]),
                    a,
                    n in self.fresh and a > 1,
                    n in taken,
                    failures[n] if n < len(failures) else 0,
                )
                for n, a in sorted(free.items())
                if n in lines
            ]
        if self.scope is not None and self.rerun:
            self.rerun = False  # once: the tasks ok when the run began
        return Looked(
            free=found,
            held=held,
            closed=control.closed,
            stopped=self.ledger.stopped,
            grew=grew,
            unknown=unknown,
        )

    def peek(self) -> Looked:
        """Whether the task list has a whole line past the ledger's cursor now, from the
        ledger's last row alone (no lock, no news): a run holding claimed tasks that wait
        asks it often, and it costs a read of the ledger's end and of the list's."""
        state = self.ledger.peek()
        if state is None:
            return Looked(grew=True)  # nothing can be told: as if lines waited (keep them)
        return Looked(grew=self._grew(None, at=state.at))

    def verify(self, view: LedgerView) -> None:
        """A chunk's lines checked against what its tasks' claims named (the list may have
        been edited since): the history of another line says nothing of this one."""
        scope = self.scope
        if scope is None:
            return
        nums = list(scope)
        lines = dict(scope)
        others = view.row_tasks(nums) - lines.keys()
        if others:
            lines.update(lines_of(self.tasks, others))
        self.fresh = view.verify(lines, nums)

    def _resubmitted(self, view: LedgerView, num: int) -> bool:
        """Whether a failed task failed before this run began (it runs again here), not in
        a run of the same array meanwhile (whose own ``--retries`` say)."""
        got = view.latest_fail(num)
        return got is not None and got[1] < self.began

    def _rerun(self, view: LedgerView, upto: int) -> dict[int, int]:
        """``--rerun``: tasks ok before this run began, once each."""
        out: dict[int, int] = {}
        code = view.code
        for num in range(1, min(upto, len(code))):
            if num in self._rerun_done or view.state(num) != "ok":
                continue
            self._rerun_done.add(num)
            out[num] = view.attempt[num] + 1
        return out

    def _grew(self, closed_lines: int | None, *, at: int | None = None) -> bool:
        """Whether the task list has a whole line past the cursor (or, closed, any byte);
        ``at``: the cursor's byte offset (by default the ledger's as this run last read)."""
        if at is None:
            at = self.ledger.cursor.at
        try:
            fd = os.open(self.tasks, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            data = os.pread(fd, 1 << 16, at)
        finally:
            os.close(fd)
        if not data:
            return False
        return b"\n" in data or closed_lines is not None
