"""The pool: up to ``jobs`` tasks at a time, read through one ``poll`` loop.

A task is a command (each child in its own session, so a signal reaches everything it
started, with stdin from ``/dev/null`` and stdout and stderr on pipes read here) or a call of
a Python function in one of ``jobs`` long-lived worker processes (see :mod:`.worker`). A
task's records are held until it ends; its stderr (a function's prints) goes, prefixed with
the task number, into the one shared log.

The pool polls, starts and signals; the decisions are its neighbours': which tasks to claim
and start next is the queue's (:mod:`.queue`), where an attempt stands is the attempt's
(:mod:`.attempt`), when the ended attempts are committed is the commit group's
(:mod:`.commit`: in at most three locked appends, OUT, the log, then the ledger's end rows
with the start rows of the tasks claimed next). Tasks are claimed ahead, so that a free slot
rarely waits for the ledger.

Stop signals (walltime warnings, ``scancel``, Ctrl-C) start nothing new; commands get the
signal in their process group, functions are left to finish their call; after ``grace``
seconds what still runs gets SIGTERM and then SIGKILL. What they printed is kept; their
``end`` rows say ``interrupted``, as do those of tasks claimed but not started.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from .._core.records import MAX_LINE
from .._core.stamp import ATTEMPT_VAR, TASKNUM_VAR
from .._core.stop import Stopper
from ..errors import ZotsinkError
from .attempt import KILL_AFTER, Attempt, Output, signame
from .commit import CommitGroup, append_held
from .failures import alike_key
from .halting import Halting
from .ledger import Ledger
from .queue import TaskQueue
from .tasks import Task, task_argv
from .worker import Worker

__all__ = ["Pool", "Progress", "Tasking"]

#: Seconds between two calls of the progress callback.
PROGRESS_EVERY: Final = 0.5
#: Tasks that could not start, before any did, after which run stops starting more.
HALT_AFTER: Final = 3
_POLL_IN: Final = select.POLLIN | select.POLLHUP | select.POLLERR


class Tasking(NamedTuple):
    """How each task is run: the command and the limits ``zotsink run`` was given."""

    command: tuple[str, ...]
    shell: bool
    jobs: int
    retries: int
    task_timeout: float | None
    grace: float
    kv: str | None  # the tasks print key:value lines
    env: dict[str, str]
    call: str | None = None  # FILE.py:FUNC or module:FUNC: a function per task, not CMD


class Progress(NamedTuple):
    """Where a run stands, for a progress line."""

    total: int  # tasks this run may start (its queue when it began)
    done: int  # attempts ended, whatever their status
    failed: int  # of them not ok
    running: int
    seconds: float  # since the run began


class Pool:
    """The poll loop of one ``run``."""

    def __init__(
        self,
        *,
        queue: TaskQueue[Task],
        how: Tasking,
        ledger: Ledger,
        output: Output,
        commit_bytes: float,
        stopper: Stopper | None,
        progress: Callable[[Progress], None] | None = None,
        halting: Halting | None = None,
    ) -> None:
        self.queue = queue
        self.halting = halting
        self.how = how
        self.ledger = ledger
        self.output = output
        self.stopper = stopper
        self.progress = progress
        self.began = time.monotonic()
        self.progress_at = self.began + PROGRESS_EVERY
        self.poller = select.poll()
        if stopper is not None:
            self.poller.register(stopper.wakeup_fd, select.POLLIN)
        self.pipes: dict[int, Attempt] = {}  # pipe fd -> its attempt
        self.attempts: list[Attempt] = []  # started and not ended
        self.group = CommitGroup(commit_bytes)  # ended, waiting for their commit
        self.ends: list[bytes] = []  # end rows not yet in the ledger
        self.tries: dict[int, int] = {}  # attempts in this run, per task
        self.final: dict[int, str] = {}
        self.start_failures = 0  # tasks that could not start before any did
        self.halted: str | None = None  # why run stopped starting tasks early
        self.done = 0
        self.failed = 0
        self.started = 0
        self.stopping = False
        self.ledger_error: Exception | None = None
        # function workers (--call): every one, the idle ones, and pipe fd -> its worker
        self.workers: list[Worker] = []
        self.idle: list[Worker] = []
        self.worker_fds: dict[int, Worker] = {}

    # -- the loop ----------------------------------------------------------------------------
    def loop(self) -> None:
        if self.how.call is not None and self.queue.pending:
            for _ in range(min(self.how.jobs, self.queue.pending)):
                self._spawn_worker()
        while True:
            self._check_stop()
            now = time.monotonic()
            self._start_ready()
            if self._commit_due(now):
                self._commit()
                self._start_ready()
            if self.queue.stopped:
                self._release()
            if self._finished():
                break
            events = self.poller.poll(self._wait_ms())
            for fd, _ev in events:
                attempt = self.pipes.get(fd)
                if attempt is not None:
                    if attempt.read(fd):
                        self._unwatch(fd)
                    continue
                worker = self.worker_fds.get(fd)
                if worker is not None:
                    self._from_worker(worker, fd)
            now = time.monotonic()
            for attempt in list(self.attempts):
                self._tend(attempt, now)
            self.output.flush_log(now)
            if self.progress is not None and now >= self.progress_at:
                self.progress_at = now + PROGRESS_EVERY
                self.progress(self.where())
        self._commit()
        self.output.flush_log()
        self._write_ends()

    def where(self) -> Progress:
        return Progress(
            self.queue.total,
            self.done,
            self.failed,
            len(self.attempts),
            time.monotonic() - self.began,
        )

    def _finished(self) -> bool:
        if self.attempts or self.group.attempts or self.queue.claimed:
            return False
        if self.queue.has_work:
            # Tasks left and none running: the claim came first in this turn of the loop,
            # so what is waited for is a worker still loading the function.
            return not self.workers
        for w in self.workers:
            w.stop()  # no more tasks: each ends after its last result
        return True

    def _wait_ms(self) -> int:
        now = time.monotonic()
        waits = [self.output.log_due_in(now), self.group.wait(now)]
        if self.progress is not None:
            waits.append(self.progress_at - now)
        waits += [a.wait(now) for a in self.attempts]
        due = [w for w in waits if w is not None]
        return max(0, math.ceil(min(due) * 1000)) if due else -1

    def _check_stop(self) -> None:
        if self.stopping or self.stopper is None or self.stopper.signum is None:
            return
        self.stopping = True
        # The wakeup pipe stays readable once written: polled on, it would spin the loop.
        self.poller.unregister(self.stopper.wakeup_fd)
        signum = self.stopper.signum
        self.queue.stop()
        now = time.monotonic()
        for a in self.attempts:
            if a.worker is None:
                # a function is left to finish its call; a command decides for itself
                _signal_group(a, signum)
            a.stop(now, self.how.grace)

    def _halt(self, why: str) -> None:
        """Start nothing more, and say why."""
        self.halted = why
        self.queue.stop()

    # -- committing --------------------------------------------------------------------------
    def _free(self) -> int:
        """Tasks that could start now."""
        if self.how.call is not None:
            return len(self.idle)
        return self.how.jobs - len(self.attempts)

    def _commit_due(self, now: float) -> bool:
        if self.queue.claim_due(self._free(), not self.attempts and not self.workers):
            return True  # a task could start: claim it
        return self.group.due(now, alone=not self.attempts, hurry=self.stopping)

    def _commit(self) -> None:
        """The group's records to OUT, its log lines to the log, then its end rows (and the
        start rows of the tasks claimed next) to the ledger."""
        if self.group.attempts:
            self._finish(self.group.take())
        # As many as can start now, and as many as will start before the commit after the
        # next: the next free slots do not wait for the ledger, and quick tasks claim with
        # their group's commit, not between commits.
        self.queue.refill()  # a source that grows hands its new tasks over here
        want = self.queue.to_claim(self._free(), self.group.window, time.monotonic())
        if want <= 0:
            self._write_ends()
            return
        try:
            # Under the ledger's lock: what other runs did since, then the start rows (with
            # the end rows waiting to go). Start rows are never spilled: a task whose start
            # cannot be recorded is not run.
            self.ledger.claim(self.queue, want, self.ends)
            self.ends = []
        except ZotsinkError as e:  # the lock, the write, or a file that is no ledger
            self.ledger_error = e
            self._write_ends()
            self.queue.stop()
            self.stopping = True

    def _release(self) -> None:
        """Tasks claimed but not started, after a stop or a halt: their end rows say so,
        or readers would take them for running (or lost) tasks."""
        why = self.halted or "the run was stopped"
        for task, attempt in self.queue.release():
            self.ends.append(
                self.ledger.end_row(
                    task.num,
                    task.line,
                    attempt,
                    status="interrupted",
                    seconds="0.000",
                    records=0,
                    bytes=0,
                    note=f"not started: {why}",
                )
            )

    # -- starting ----------------------------------------------------------------------------
    def _start_ready(self) -> None:
        while self._free() > 0:
            claimed = self.queue.next()
            if claimed is None:
                return
            task, attempt = claimed
            self.tries[task.num] = self.tries.get(task.num, 0) + 1
            if self.how.call is not None:
                self._call(self.idle.pop(), task, attempt)
            else:
                self._spawn(task, attempt)

    def _attempt(self, task: Task, attempt: int) -> tuple[Attempt, dict[str, str]]:
        env = {**self.how.env, TASKNUM_VAR: str(task.num), ATTEMPT_VAR: str(attempt)}
        a = Attempt(task, attempt, self.output, env, time.monotonic())
        self.attempts.append(a)
        self.started += 1
        return a, env

    def _spawn(self, task: Task, attempt: int) -> None:
        a, env = self._attempt(task, attempt)
        argv = task_argv(self.how.command, task.line, self.how.shell)
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=env,
            )
        except OSError as e:
            why = f"cannot start {argv[0]!r}: {e.strerror or e}"
            a.notes.append(why)
            self.output.log_lines(task.num, attempt).line(f"zotsink: {why}".encode())
            a.exited(time.monotonic())
            if not self.queue.has_run:
                self.start_failures += 1
                if self.start_failures >= HALT_AFTER:
                    # a mistyped command fails every task the same way: stop, and say why,
                    # rather than fail the whole list one task at a time
                    self._halt(
                        f"the first {self.start_failures} tasks could not start ({why}); "
                        "nothing more was started: fix the command and run again"
                    )
            return
        self.queue.ran()
        for fd in a.watch(popen):
            self.pipes[fd] = a
            self.poller.register(fd, _POLL_IN)
        if self.how.task_timeout is not None:
            a.limit(a.started + self.how.task_timeout)

    # -- function workers --------------------------------------------------------------------
    def _spawn_worker(self) -> None:
        assert self.how.call is not None
        try:
            worker = Worker(self.how.call, self.how.env, self.output.log_lines, MAX_LINE)
        except OSError as e:
            self._halt(f"cannot start a worker for --call {self.how.call}: {e.strerror or e}")
            return
        self.workers.append(worker)
        for fd in (worker.prints_fd, worker.results_fd):
            self.worker_fds[fd] = worker
            self.poller.register(fd, _POLL_IN)

    def _call(self, worker: Worker, task: Task, attempt: int) -> None:
        a, _env = self._attempt(task, attempt)
        a.worker = worker
        if self.how.task_timeout is not None:
            a.limit(a.started + self.how.task_timeout)
        # A worker that died since it was idle is noticed through its pipes: its task is
        # then killed, as one that died during the call.
        worker.send(a, task.num, attempt, task.line)

    def _from_worker(self, worker: Worker, fd: int) -> None:
        if fd == worker.prints_fd:
            if not worker.take_prints():  # its end: the worker is gone (its results say so)
                self._unwatch_worker(fd)
            return
        frames, ended = worker.frames()
        for frame in frames:
            kind = frame[0]
            if kind == "ready":
                worker.ready = True
                self.idle.append(worker)
            elif kind == "unloadable":
                self._unloadable(worker, frame[1])
            else:
                self._returned(worker, frame)
        if ended:
            self._worker_gone(worker)

    def _returned(self, worker: Worker, frame: tuple[Any, ...]) -> None:
        """A function's call ended: its prints first (sent before its result), then its
        records."""
        a: Attempt | None = worker.returned()
        if a is None:
            return
        self.queue.ran()
        if frame[0] == "done":
            code = 0
            for kind, value in frame[1]:
                a.item(kind, value)
        else:
            _, text, code = frame
            log = self.output.log_lines(a.task.num, a.attempt)
            for line in text.splitlines():
                log.line(line.encode("utf-8", "surrogateescape"))
            last = text.strip().splitlines()[-1:] if text.strip() else [f"exit {code}"]
            a.notes.append(f"the function raised: {last[0][:200]}")
        a.exited(time.monotonic(), code)
        if a.ended_by == "interrupted":
            a.ended_by = None  # the call ended within the grace: its result stands
        if not self.stopping and worker.ready:
            self.idle.append(worker)
        else:
            worker.stop()

    def _unloadable(self, worker: Worker, text: str) -> None:
        worker.stop()
        if self.halted is None:
            last = text.strip().splitlines()[-1] if text.strip() else "no reason given"
            self._halt(
                f"cannot load --call {self.how.call}: {last}; nothing was started: "
                f"fix it and run again (the traceback is in {self.output.log_path})"
            )
            log = self.output.log_lines(0, 0)  # under task number 0: the run's own lines
            for line in text.splitlines():
                log.line(line.encode("utf-8", "surrogateescape"))

    def _worker_gone(self, worker: Worker) -> None:
        """The worker's results pipe ended: it exited, or died (its task is then killed)."""
        for fd in (worker.results_fd, worker.prints_fd):
            if fd in self.worker_fds:
                self._unwatch_worker(fd)
        code = worker.exit_code(KILL_AFTER)
        self.workers.remove(worker)
        if worker in self.idle:
            self.idle.remove(worker)
        a: Attempt | None = worker.returned()
        worker.close()
        if a is not None:
            how = f"signal {signame(-code)}" if code < 0 else f"exit {code}"
            if a.ended_by is None:
                a.ended_by = "killed"
            a.notes.append(f"its worker died ({how})")
            a.exited(time.monotonic(), code)
        elif not worker.ready and self.halted is None and not self.stopping:
            self._unloadable(worker, f"its worker died while loading it (exit {code})")
        if self.queue.has_work:
            self._spawn_worker()  # a new worker for the tasks left

    def _unwatch_worker(self, fd: int) -> None:
        self.poller.unregister(fd)
        del self.worker_fds[fd]

    def _unwatch(self, fd: int) -> None:
        self.poller.unregister(fd)
        del self.pipes[fd]

    # -- ending ------------------------------------------------------------------------------
    def _tend(self, a: Attempt, now: float) -> None:
        a.poll(now)
        step = a.step(now)
        if step == "drain":
            # The task is gone but something it started holds its pipes: take what is there.
            a.notes.append("its output stayed open after it exited (a background process?)")
            for fd in list(a.pipes):
                a.drain(fd)
                self._unwatch(fd)
            step = a.step(now)
        if step == "end":
            self._ended(a, now)
        elif step == "term":
            _signal_group(a, signal.SIGTERM)
            a.terminated(now)
        elif step == "kill":
            _signal_group(a, signal.SIGKILL)
            a.killed()

    def _ended(self, a: Attempt, now: float) -> None:
        """An attempt ended: it waits for its group's commit."""
        self.attempts.remove(a)
        self.group.add(a, now)
        self.done += 1
        self.failed += a.status != "ok"
        self._judge(a)

    def _judge(self, a: Attempt) -> None:
        """Whether the tasks' failures call for a halt (see .halting)."""
        last = self.output.last_lines.pop((a.task.num, a.attempt), b"")
        if self.halting is None or self.halted is not None or self.stopping:
            return
        text = last.decode("utf-8", "replace")
        why = self.halting.end(a.status, alike_key(a.status, text, a.task.line)[1], text)
        if why is not None:
            self._halt(
                f"halted: {why}; nothing more was claimed: the tasks not started stay to "
                "resubmit once the cause is fixed (--halt-after 0: never halt)"
            )
        elif not self.halting.probing:
            self.queue.limit(None)

    def _finish(self, ended: list[Attempt]) -> None:
        """The attempts of one commit: their records go to OUT in one locked append, their
        log lines follow, then their end rows wait for the ledger's append."""
        statuses = {}
        for a in ended:
            statuses[a] = a.status
            a.refuse()
        places = append_held(self.output.out, ended)
        self.output.flush_log()
        header = self.output.header_size()
        for a in ended:
            status = statuses[a]
            at = places.get(a)
            if at is None and a.size and status == "ok":
                # Not in OUT: no row may claim them. The task runs again on the next run;
                # what the spill file holds joins OUT unclaimed when it is recovered.
                status = "failed"
            self._end_row(a, status, at, header)

    def _end_row(self, a: Attempt, status: str, at: int | None, header: int) -> None:
        task = a.task
        fields = a.end_fields(status, at, header, time.monotonic())
        self.ends.append(self.ledger.end_row(task.num, task.line, a.attempt, **fields))
        self.final[task.num] = status
        if status in ("failed", "killed", "timeout") and self.tries[task.num] <= self.how.retries:
            self.queue.retry(task)

    def _write_ends(self) -> None:
        if not self.ends:
            return
        try:
            self.ledger.append(self.ends)
        except ZotsinkError as e:  # saved to a side file of the ledger (see Ledger.append)
            self.ledger_error = self.ledger_error or e
        self.ends = []

    def close(self) -> None:
        for a in self.attempts:  # only after an error: nothing may keep running unseen
            _signal_group(a, signal.SIGKILL)
            if a.popen is not None:
                a.popen.wait()
        for a in self.attempts + self.group.attempts:
            a.close()
        self.pipes.clear()
        for worker in self.workers:
            worker.stop()
            if worker.task is not None:  # only after an error, as above
                worker.signal(signal.SIGKILL)
        for worker in self.workers:
            worker.exit_code(KILL_AFTER)
            worker.close()
        self.workers.clear()
        self.output.close()
        self.ledger.close()


def _signal_group(a: Attempt, signum: int) -> None:
    group = a.group
    if group is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(group.pid, signum)
