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

A run that takes over (``--pull``) waits, once its own queue is empty, for the tasks it
found running in other runs: it looks at the ledger's news under a shared lock, less often
the longer nothing changes, and claims again a task whose run is known dead. A run that
follows its task list (``--follow``) looks for new lines the same way, until the list is
closed and all is done, or nothing came for ``idle`` seconds.

Stop signals (walltime warnings, ``scancel``, Ctrl-C) start nothing new; commands get the
signal in their process group, functions are left to finish their call; after ``grace``
seconds what still runs gets SIGTERM and then SIGKILL. What they printed is kept; their
``end`` rows say ``interrupted``, as do those of tasks claimed but not started.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import signal
import subprocess
import time
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

from .._core.records import MAX_LINE
from .._core.stamp import ATTEMPT_VAR, TASKNUM_VAR
from .._core.stop import STOP_SIGNALS, Stopper
from ..errors import ZotsinkError
from .attempt import KILL_AFTER, Attempt, Output, signame
from .commit import CommitGroup, append_held
from .failures import alike_key
from .halting import Halting
from .ledger import Ledger
from .queue import FollowSource, TaskQueue
from .states import start_alive
from .tasks import Task, task_argv
from .worker import Worker

__all__ = ["Pool", "Progress", "Tasking"]

#: Seconds between two calls of the progress callback.
PROGRESS_EVERY: Final = 0.5
#: Tasks that could not start, before any did, after which run stops starting more.
HALT_AFTER: Final = 3
#: Seconds between two looks at the ledger (other runs' tasks, new lines of a followed
#: list): the first wait, and the longest, as nothing changes.
LOOK_FIRST: Final = 0.05
LOOK_MOST: Final = 2.0
#: Seconds a --call worker may take to load the function without --task-timeout (an
#: import that hangs, a lock on a shared filesystem): then the run stops, and says why.
LOAD_TIMEOUT: Final = 600.0
#: Seconds a task that died of a stop signal waits before its end row is written, for the
#: run's own stop signal to come (``scancel`` signals every process at once): it is then
#: interrupted by a stop, not killed by somebody.
STOP_SETTLE: Final = 2.0
_POLL_IN: Final = select.POLLIN | select.POLLHUP | select.POLLERR
#: --call: the work a worker is sent at once, in seconds of its calls, about: while calls
#: are quick it gets more tasks per frame (fewer frames, reads and wake-ups per task); a
#: task queued behind others in its worker waits for them about this long at most.
BATCH_SECONDS: Final = 0.005
#: --call: the most tasks in one frame, and the most bytes of their lines in a frame sent
#: to a worker that has tasks still (a frame never waits in a full pipe).
MAX_BATCH: Final = 64
BATCH_BYTES: Final = 16384


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
        idle: float | None = None,
        task_time: float | None = None,
        halting: Halting | None = None,
    ) -> None:
        self.queue = queue
        self.halting = halting
        self.idle_limit = idle  # a followed list: end after this long with nothing to do
        self.task_time = task_time  # given; else the mean of this run's attempts
        self.seconds = 0.0  # of this run's ended attempts, for their mean
        self.look_wait = LOOK_FIRST
        self.look_at = 0.0
        self.idle_since = time.monotonic()
        self.idled_out = False
        self.here = os.uname().nodename
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
        self.settling: list[tuple[Attempt, float]] = []  # died of a stop signal: until when
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
        self.signals_seen = 0  # stop signals acted on (a second one ends the grace)
        self.ledger_error: Exception | None = None
        # function workers (--call): every one, and pipe fd -> its worker
        self.workers: list[Worker] = []
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
            if self._looking() and now >= self.look_at:
                self._look(now)
                if self.how.call is not None and not self.workers and self.queue.has_work:
                    for _ in range(self.how.jobs):  # a followed list's first tasks came
                        self._spawn_worker()
                if self.queue.claim_due(self._free(), not self.attempts and not self.workers):
                    continue  # news: claim at once
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
            self._tend_workers(now)
            for attempt in list(self.attempts):
                self._tend(attempt, now)
            if self.settling:
                self._check_stop()  # a stop that came with their death
                self._settle(now)
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

    def _following(self) -> bool:
        return isinstance(self.queue.source, FollowSource)

    def _looking(self) -> bool:
        """Whether the run waits on the ledger or the list: tasks of other runs that may
        die, or a followed list not closed (and not idle too long)."""
        if self.queue.stopped or self.queue.out_of_time:
            return False
        if self.queue.waits_on_others:
            return True
        if not self._following() or self.idled_out or self.queue.source.closed:
            return False
        return not (self.queue.pending or self.queue.claimed)

    def _look(self, now: float) -> None:
        """Look at the ledger's news (under a shared lock) and the list's new lines: tasks
        of dead runs come back, new tasks wait to be claimed; look again later, the later
        the longer nothing changed."""
        try:
            states = self.ledger.look()
        except ZotsinkError as e:  # the lock, or a stop while waiting for it
            self.ledger_error = self.ledger_error or e
            self.queue.stop()
            return
        if self.ledger.stopped:
            self.queue.stop()  # `zotsink stop`: nothing more is claimed or taken over
        came = self.queue.recheck(states, lambda row: start_alive(row, self.here))
        if self._following():
            source = self.queue.source
            control = self.ledger.control
            if control.closed and isinstance(source, FollowSource):
                source.close(control.closed_lines)
            came += self.queue.refill()
        if came or self.attempts:
            self.idle_since = now
            self.look_wait = LOOK_FIRST
        else:
            self.look_wait = min(self.look_wait * 2, LOOK_MOST)
        if self.idle_limit is not None and now - self.idle_since >= self.idle_limit:
            self.idled_out = True  # nothing to do for --idle seconds: make way
        self.look_at = time.monotonic() + self.look_wait

    def _finished(self) -> bool:
        if self.attempts or self.settling or self.group.attempts or self.queue.claimed:
            return False
        if any(w.queued for w in self.workers):
            return False
        if self._looking():
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
        if self._looking():
            waits.append(self.look_at - now)
        waits += [a.wait(now) for a in self.attempts]
        waits += [until - now for _, until in self.settling]
        for w in self.workers:
            if w.pidfd is None:
                waits.append(1.0)  # its end is looked for, not told
            if not w.ready and w.began != math.inf:  # inf: its load was ended already
                waits.append(w.began + self._load_limit() - now)
        due = [w for w in waits if w is not None]
        return max(0, math.ceil(min(due) * 1000)) if due else -1

    def _check_stop(self) -> None:
        stopper = self.stopper
        if stopper is None or stopper.signum is None:
            return
        # The wakeup pipe stays readable once written: emptied, or polled on it would spin.
        _empty(stopper.wakeup_fd)
        if self.stopping:
            if stopper.count > self.signals_seen:
                self._hurry()
            return
        self.stopping = True
        self.signals_seen = stopper.count
        signum = stopper.signum
        self.queue.stop()
        now = time.monotonic()
        for a in self.attempts:
            if a.worker is None:
                # a function is left to finish its call; a command decides for itself
                _signal_group(a, signum)
            a.stop(now, self.how.grace)

    def _hurry(self) -> None:
        """A second stop signal (Ctrl-C again): the grace ends now. What still runs is
        killed, and ends interrupted; what is held is committed (or spilled) as at any stop."""
        self.signals_seen = self.stopper.count if self.stopper is not None else 0
        for a in self.attempts:
            if a.phase in ("running", "terminating"):
                _signal_group(a, signal.SIGKILL)
                a.killed()
        for worker in self.workers:
            if not worker.ready:
                worker.signal(signal.SIGKILL)

    def _halt(self, why: str) -> None:
        """Start nothing more, and say why."""
        self.halted = why
        self.queue.stop()

    # -- committing --------------------------------------------------------------------------
    def _free(self) -> int:
        """Tasks that could start now."""
        if self.how.call is not None:
            return sum(self._room(w) for w in self.workers)
        return self.how.jobs - len(self.attempts)

    def _room(self, worker: Worker) -> int:
        """Tasks to send ``worker`` now: none until it is down to half its batch."""
        if not worker.ready or worker.closed or worker.held:
            return 0
        queued = len(worker.queued)
        return worker.batch - queued if queued <= worker.batch // 2 else 0

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
        for worker in self.workers:
            if not worker.held:
                worker.hold()  # it begins nothing more, and hands back what it holds
        self._not_started(self.queue.release())

    def _not_started(self, claimed: list[tuple[Task, int]]) -> None:
        """End rows for tasks claimed and not started, after a stop or a halt."""
        why = self.halted or "the run was stopped"
        for task, attempt in claimed:
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
        if self.how.call is not None:
            if not self.workers and self.queue.has_work:  # the last one died: a retry waits
                self._spawn_worker()
            for worker in self.workers:
                room = self._room(worker)
                if room > 0:
                    self._send(worker, room)
            return
        while self._free() > 0:
            claimed = self.queue.next()
            if claimed is None:
                return
            task, attempt = claimed
            self.tries[task.num] = self.tries.get(task.num, 0) + 1
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
            why = f"cannot start {argv[0][:200]!r}: {e.strerror or e}"
            a.notes.append(why)
            self.output.log_lines(task.num, attempt).line(f"zotsink: {why}".encode())
            a.exited(time.monotonic())
            if self._task_owns(e):
                return  # this task's line is at fault, not the command: it fails alone
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

    def _task_owns(self, e: OSError) -> bool:
        """Whether a start error is the task's, not the command's: its line too long for an
        argument (E2BIG), or a program path built from its line (``{}``) not there."""
        if e.errno == errno.E2BIG:
            return True
        built = not self.how.shell and "{}" in self.how.command[0]
        return built and e.errno in (errno.ENOENT, errno.EACCES, errno.ENOTDIR, errno.ENOEXEC)

    # -- function workers --------------------------------------------------------------------
    def _spawn_worker(self) -> None:
        assert self.how.call is not None
        try:
            worker = Worker(self.how.call, self.how.env, self.output.log_lines, MAX_LINE)
        except OSError as e:
            self._halt(f"cannot start a worker for --call {self.how.call}: {e.strerror or e}")
            return
        self.workers.append(worker)
        fds = [worker.prints_fd, worker.results_fd]
        if worker.pidfd is not None:
            fds.append(worker.pidfd)
        for fd in fds:
            self.worker_fds[fd] = worker
            self.poller.register(fd, _POLL_IN)

    def _send(self, worker: Worker, room: int) -> None:
        """Up to ``room`` claimed tasks to ``worker``, in one frame (of at most BATCH_BYTES
        of lines to a worker that has tasks still: a frame never waits in a full pipe)."""
        batch: list[tuple[Task, int, int, str]] = []
        size = 0
        while len(batch) < room:
            claimed = self.queue.next()
            if claimed is None:
                break
            task, attempt = claimed
            size += len(task.line)
            if size > BATCH_BYTES and (batch or worker.queued):
                self.queue.give_back([claimed])  # with the next frame
                break
            self.tries[task.num] = self.tries.get(task.num, 0) + 1
            batch.append((task, task.num, attempt, task.line))
        if not batch:
            return
        idle = not worker.queued
        # A worker that died since it was sent its last tasks is noticed through its pipes:
        # the call it was under is then killed, the others are started again elsewhere.
        worker.send(batch)
        if idle:
            self._begin(worker)

    def _begin(self, worker: Worker) -> None:
        """The first task queued in ``worker`` is the call under way: its attempt begins."""
        task, _num, attempt = worker.queued[0]
        env: Mapping[str, str] = self.how.env
        if self.output.template.stamp:  # what the records' stamps read
            env = ChainMap({TASKNUM_VAR: str(task.num), ATTEMPT_VAR: str(attempt)}, env)
        a = Attempt(task, attempt, self.output, env, time.monotonic())
        self.attempts.append(a)
        self.started += 1
        a.worker = worker
        worker.task = a
        if self.how.task_timeout is not None:
            a.limit(a.started + self.how.task_timeout)

    def _from_worker(self, worker: Worker, fd: int) -> None:
        if fd == worker.prints_fd:
            if not worker.take_prints():  # its end: the worker is gone (its results say so)
                self._unwatch_worker(fd)
            return
        # its results, or its death seen from the process itself (a pidfd): a background
        # process it started may hold its pipes open
        dead = fd == worker.pidfd and worker.dead()
        if fd == worker.pidfd and not dead:
            return  # a stale event of a descriptor number now another worker's
        self._results(worker, dead)

    def _results(self, worker: Worker, dead: bool) -> None:
        frames, ended = worker.frames()
        # the prints before them: a call's prints and its end mark come before its result
        worker.take_prints()
        for frame in frames:
            why = worker.refusal(frame)
            if why is not None:
                self._refused(worker, why)
                continue
            kind = frame[0]
            if kind == "ready":
                worker.ready = True
            elif kind == "back":  # held: the tasks it was sent and did not begin
                self._handed_back(worker, len(frame[2]))
            elif kind == "unloadable":
                self._unloadable(worker, frame[2])
            elif kind == "part":  # a large result's items, ahead of its end
                for item_kind, value in frame[4]:
                    worker.task.item(item_kind, value)
            else:
                self._returned(worker, frame)
        if ended or dead:
            self._worker_gone(worker)

    def _refused(self, worker: Worker, why: str) -> None:
        """A frame that is not its worker's answer to the task it was sent: credited to no
        task, said in the log (under task 0, the run's own lines)."""
        self.output.log_lines(0, 0).line(
            f"zotsink: a frame on worker {worker.pid}'s results pipe was refused: {why} "
            "(a process the function forked?)".encode()
        )

    def _handed_back(self, worker: Worker, n: int) -> None:
        """A held worker did not begin the first ``n`` tasks it holds: they end as not
        started (the run stops), and the attempt begun for the first one is no attempt."""
        a: Attempt | None = worker.task
        if a is not None:
            worker.task = None
            self.attempts.remove(a)
            self.started -= 1
            a.close()
        self._unstarted(worker, worker.handed_back(n))
        if worker.queued:
            self._begin(worker)  # a later frame's: handed back in turn
        else:
            worker.stop()

    def _unstarted(self, worker: Worker, tasks: list[tuple[Task, int]]) -> None:
        """Tasks a worker was sent and did not begin: to start again elsewhere, or, when the
        run stops, not started."""
        if not tasks:
            return
        for task, _attempt in tasks:
            self.tries[task.num] -= 1
        if self.queue.stopped:
            self._not_started(tasks)
        else:
            self.queue.give_back(tasks)

    def _returned(self, worker: Worker, frame: tuple[Any, ...]) -> None:
        """A function's call ended: its prints first (sent before its result), then its
        records; the next task queued in its worker begins."""
        a: Attempt | None = worker.returned()
        if a is None:
            return
        now = time.monotonic()
        if worker.batching:
            # more tasks at a time while calls are quick: a task queued behind others waits
            # for them about BATCH_SECONDS at most
            call = (a.task.num, a.attempt)
            if worker.timed != call:  # its end mark said nothing (FUNC closed its stdout)
                worker.took(call, now - a.started)
            mean = worker.call_time
            fits = int(BATCH_SECONDS / mean) if mean > 0 else MAX_BATCH
            worker.batch = max(1, min(worker.batch * 2, fits, MAX_BATCH))
        self.queue.ran()
        if frame[0] == "done":
            code = 0
            for kind, value in frame[4]:
                a.item(kind, value)
        else:
            a.drop_records()  # a result's items sent ahead of the exception are not its
            text, code = frame[4], frame[5]
            log = self.output.log_lines(a.task.num, a.attempt)
            for line in text.splitlines():
                log.line(line.encode("utf-8", "surrogateescape"))
            last = text.strip().splitlines()[-1:] if text.strip() else [f"exit {code}"]
            a.notes.append(f"the function raised: {last[0][:200]}")
        a.exited(now, code)
        if a.ended_by == "interrupted":
            a.ended_by = None  # the call ended within the grace: its result stands
        if a.step(now) == "end":  # a call has no pipes of its own to wait for
            self._ended(a, now)
        if worker.queued:
            self._begin(worker)
        elif self.stopping or worker.held or not worker.ready:
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
        """The worker's results pipe ended, or its process did: it exited, or died (its task
        is then killed)."""
        # what is there now (a process it started may hold the pipe); a line left unfinished
        # ends with it
        worker.take_prints(last=True)
        for fd in (worker.results_fd, worker.prints_fd, worker.pidfd):
            if fd in self.worker_fds:
                self._unwatch_worker(fd)
        code = worker.exit_code(KILL_AFTER)
        self.workers.remove(worker)
        a: Attempt | None = worker.returned() if worker.task is not None else None
        # the call under way dies with it; the tasks it had not begun are not its
        self._unstarted(worker, worker.handed_back())
        worker.close()
        if a is not None:
            how = f"signal {signame(-code)}" if code < 0 else f"exit {code}"
            if a.ended_by is None and code >= 0:
                a.ended_by = "killed"  # a signal says so itself (and may be a stop's)
            a.notes.append(f"its worker died ({how})")
            a.exited(time.monotonic(), code)
        elif not worker.ready and self.halted is None and not self.stopping:
            self._unloadable(worker, f"its worker died while loading it (exit {code})")
        if self.queue.has_work:
            self._spawn_worker()  # a new worker for the tasks left

    def _tend_workers(self, now: float) -> None:
        """Workers whose end no pidfd tells (not Linux), and workers that load too long."""
        for worker in list(self.workers):
            if worker.pidfd is None and worker.dead():
                self._results(worker, True)
            elif not worker.ready and now >= worker.began + self._load_limit():
                worker.began = math.inf  # once
                worker.signal(signal.SIGKILL)
                self._unloadable(
                    worker,
                    f"loading it took over {self._load_limit():g} seconds (the limit is "
                    f"--task-timeout, else {LOAD_TIMEOUT:g}); it was killed",
                )

    def _load_limit(self) -> float:
        t = self.how.task_timeout
        return LOAD_TIMEOUT if t is None else t

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
        """An attempt ended: it waits for its group's commit (one that died of a stop
        signal first waits a moment for the run's own)."""
        self.attempts.remove(a)
        if not self.stopping and a.ended_by is None and -a.returncode in STOP_SIGNALS:
            self.settling.append((a, now + STOP_SETTLE))
            return
        self._group(a, now)

    def _settle(self, now: float) -> None:
        """Attempts that died of a stop signal: interrupted when the run was stopped too
        (``scancel`` signals every process at once, whichever is reaped first), killed when
        no stop came in their moment."""
        for pair in list(self.settling):
            a, until = pair
            if self.stopping:
                a.ended_by = "interrupted"
            elif now < until:
                continue
            self.settling.remove(pair)
            self._group(a, now)

    def _group(self, a: Attempt, now: float) -> None:
        self.group.add(a, now)
        self.done += 1
        self.idle_since = now
        self.seconds += now - a.started
        if self.queue.deadline is not None:  # a task not to end after it is not started
            given = self.task_time
            self.queue.task_time = given if given is not None else self.seconds / self.done
        self.failed += a.status != "ok"
        self._judge(a)

    def _judge(self, a: Attempt) -> None:
        """Whether the tasks' failures call for a halt (see .halting)."""
        last = self.output.last_lines.pop((a.task.num, a.attempt), b"")
        if self.halting is None or self.halted is not None or self.stopping:
            return
        text = last.decode("utf-8", "replace")
        status = a.status
        key = alike_key(status, text, a.task.line)[1] if status != "ok" else None
        why = self.halting.end(status, key, text)
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
        # All at once, then one deadline for all: a worker that ends late (one still
        # importing a slow module) does not make the others wait in turn.
        for worker in self.workers:
            worker.stop()
            if worker.task is not None:  # only after an error, as above
                worker.signal(signal.SIGKILL)
            elif not worker.ready:  # still loading: it has no call to finish
                worker.signal(signal.SIGTERM)
        deadline = time.monotonic() + KILL_AFTER
        for worker in self.workers:
            worker.exit_code(max(0.0, deadline - time.monotonic()))
            worker.take_prints(last=True)  # what it printed as it ended (a thread's last words)
            worker.close()
        self.workers.clear()
        self.output.flush_log()  # the workers' last prints
        self.output.close()
        self.ledger.close()


def _empty(fd: int) -> None:
    """Read what a readable wakeup pipe holds (it holds a few bytes: one per signal)."""
    ready, _, _ = select.select([fd], [], [], 0)
    if ready:
        with contextlib.suppress(OSError):
            os.read(fd, 4096)


def _signal_group(a: Attempt, signum: int) -> None:
    group = a.group
    if group is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(group.pid, signum)
