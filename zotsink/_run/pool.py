"""The pool: a run's poll loop, and the instructions of its decisions turned into calls.

Each turn: what happened comes in as events (the stop signals noted, the pipes and workers
that are readable, the children reaped), :meth:`RunState.handle
<zotsink._run.state.RunState.handle>` decides, and each instruction is carried out here,
in order, by the one part that owns it: the backend (:mod:`.commands` or :mod:`.calls`:
start, signal, drain, workers), OUT and the log (:func:`.output.append_held`), the ledger
(rows, claims: :class:`.ledger.Ledger`), the looks (:class:`.look.Looker`), the relay's
checks and submissions (:class:`.successor.Desk`: a submission runs in a thread of its own,
its end one more readable descriptor). What those calls find is fed back as the next
events, in the same turn, before the loop waits again. The loop waits in one ``poll`` on
every pipe and the stop signals' wakeup pipe, at most until the decisions' next deadline.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from .._core.stop import Stopper
from ..errors import ZotsinkError
from .events import (
    Claim,
    Claimed,
    ClaimFailed,
    Commit,
    Committed,
    Done,
    Drain,
    Hold,
    Look,
    RelayCheck,
    Rows,
    Signal,
    Signalled,
    Spawn,
    Start,
    StopWorkers,
    Submit,
    Turn,
)
from .ledger import Ledger
from .look import Looker
from .output import Output, append_held
from .scheduler import SCHEDULER_WAIT, Errand
from .state import Progress, RunState
from .successor import Desk

__all__ = ["PROGRESS_EVERY", "Backend", "Pool"]

#: Seconds between two calls of the progress callback.
PROGRESS_EVERY: Final = 0.5


class Backend(Protocol):
    """What the loop asks of either way of running tasks (see :mod:`.commands`,
    :mod:`.calls`)."""

    def room(self) -> int: ...
    def start(self, attempts: Any) -> list[Any]: ...
    def readable(self, fd: int) -> list[Any]: ...
    def tend(self, now: float) -> list[Any]: ...
    def wait(self) -> float | None: ...
    def signal(self, key: tuple[int, int], signum: int) -> None: ...
    def take(self, keys: Any) -> list[Any]: ...
    def close(self) -> None: ...


class Pool:
    """The poll loop of one ``run``."""

    def __init__(
        self,
        *,
        state: RunState,
        backend: Any,
        poller: select.poll,
        ledger: Ledger,
        looker: Looker,
        output: Output,
        stopper: Stopper | None,
        progress: Callable[[Progress], None] | None = None,
        desk: Desk | None = None,
    ) -> None:
        self.state = state
        self.desk = desk  # --relay: the chain's checks and the successors' submissions
        self._errands: dict[int, tuple[str, Errand[tuple[str | None, str]]]] = {}
        self.backend = backend
        self.poller = poller
        self.ledger = ledger
        self.looker = looker
        self.output = output
        self.stopper = stopper
        self.progress = progress
        self.progress_at = time.monotonic() + PROGRESS_EVERY
        self.ledger_error: Exception | None = None
        self._signals = 0
        if stopper is not None:
            poller.register(stopper.wakeup_fd, select.POLLIN)

    def loop(self) -> None:
        state, backend = self.state, self.backend
        events: list[Any] = []
        while True:
            now = time.monotonic()
            events.insert(0, Turn(now, backend.room()))
            self._signalled(events)
            produced: list[Any] = []
            done = False
            for ins in state.handle(events):
                kind = type(ins)
                if kind is Done:
                    done = True
                else:
                    produced += self._apply(ins)
            if done:
                break
            events = produced
            if produced:
                continue  # what the calls found is decided on before the loop waits
            for fd, _ev in self.poller.poll(self._wait_ms()):
                if self.stopper is not None and fd == self.stopper.wakeup_fd:
                    continue
                if fd in self._errands:
                    events.append(self._answered(fd))
                    continue
                events += backend.readable(fd)
            now = time.monotonic()
            events += backend.tend(now)
            self.output.flush_log(now)
            if self.progress is not None and now >= self.progress_at:
                self.progress_at = now + PROGRESS_EVERY
                self.progress(state.progress())
        self.output.flush_log()
        err = self.ledger.flush(spill=True)  # the rows of the last commit
        if err is not None:
            self.ledger_error = self.ledger_error or err

    def _signalled(self, events: list[Any]) -> None:
        stopper = self.stopper
        if stopper is None or stopper.signum is None or stopper.count == self._signals:
            return
        _empty(stopper.wakeup_fd)  # readable once written: emptied, or poll would spin
        self._signals = stopper.count
        events.append(Signalled(stopper.signum, stopper.count))

    def _wait_ms(self) -> int:
        now = time.monotonic()
        waits = [self.output.log_due_in(now), self.backend.wait()]
        due = self.state.wake()
        if due is not None:
            waits.append(due - now)
        if self.progress is not None:
            waits.append(self.progress_at - now)
        got = [w for w in waits if w is not None]
        return max(0, math.ceil(min(got) * 1000)) if got else -1

    # -- instructions ------------------------------------------------------------------------
    def _apply(self, ins: Any) -> list[Any]:
        kind = type(ins)
        backend = self.backend
        if kind is Start:
            return backend.start(ins.attempts)
        if kind is Rows:
            self.ledger.put(
                begins=ins.begins,
                ends=ins.ends,
                releases=ins.releases,
                workers=ins.workers,
                relays=ins.relays,
            )
            if ins.now:
                try:
                    self.ledger.flush()
                except ZotsinkError as e:
                    self.ledger_error = self.ledger_error or e
                    return [ClaimFailed(e)]
            return []
        if kind is Claim:
            return [self._claim(ins)]
        if kind is Commit:
            return [self._commit(ins)]
        if kind is Signal:
            backend.signal(ins.key, ins.signum)
            return []
        if kind is Drain:
            return backend.drain(ins.key)
        if kind is Look:
            return [self.looker.look(ins.deep, wait=SCHEDULER_WAIT if ins.ask else 0.0)]
        if kind is Spawn:
            return backend.spawn(ins.n)
        if kind is Hold:
            backend.hold()
            return []
        if kind is StopWorkers:
            backend.stop_workers()
            return []
        if kind is RelayCheck and self.desk is not None:
            return [self.desk.check(ins)]
        if kind is Submit and self.desk is not None:
            errand = self.desk.submit(ins.ticket)
            self._errands[errand.fileno()] = (ins.ticket, errand)
            self.poller.register(errand.fileno(), select.POLLIN)
            return []
        raise AssertionError(f"an instruction of no known kind: {ins!r}")

    def _answered(self, fd: int) -> Any:
        """A submission's thread is done: its outcome, as an event."""
        ticket, errand = self._errands.pop(fd)
        self.poller.unregister(fd)
        return Desk.answered(ticket, errand)

    def _claim(self, ins: Claim) -> Any:
        q = self.state.queue
        named = list(ins.explicit)
        closed = self.ledger.view.control
        try:
            got = self.ledger.claim(
                ins.n,
                named,
                cursor=q.cursor,
                closed_lines=closed.closed_lines if closed.closed else None,
            )
        except ZotsinkError as e:  # the lock, the write, a file that is no ledger
            self.ledger_error = self.ledger_error or e
            return ClaimFailed(e)
        if got.passed:
            log = self.output.log_lines(0, 0)
            for num in got.passed:
                log.line(f"zotsink: line {num} of the task list holds a NUL byte: no task".encode())
        return Claimed(got.tasks, got.drained, got.passed, got.stopped, got.rest)

    def _commit(self, ins: Commit) -> Committed:
        captures = self.backend.take(ins.keys)
        placed, blocks = append_held(self.output.out, captures)
        self.output.flush_log()
        writer = self.output.out.writer
        return Committed(placed, blocks, writer.last_ino, self.output.header_size())

    def close(self) -> None:
        for _ticket, errand in self._errands.values():
            errand.close()  # a submission still out (a failure ended the loop): let go
        self._errands.clear()
        try:
            self.backend.close()
            self.output.flush_log()  # the workers' last prints (a thread's last words)
        finally:
            self.output.close()
            self.ledger.close()


def _empty(fd: int) -> None:
    """Read what a readable wakeup pipe holds (a few bytes: one per signal)."""
    ready, _, _ = select.select([fd], [], [], 0)
    if ready:
        with contextlib.suppress(OSError):
            os.read(fd, 4096)
