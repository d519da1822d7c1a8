"""The pool: up to ``jobs`` tasks at a time, read through one ``poll`` loop.

A task is a command (each child in its own session, so a signal reaches everything it
started, with stdin from ``/dev/null`` and stdout and stderr on pipes read here) or a call of
a Python function in one of ``jobs`` long-lived worker processes (see :mod:`.worker`). A
task's records are held until it ends; its stderr (a function's prints) goes, prefixed with
the task number, into the one shared log.

Group commit: what finishes within :data:`COMMIT_WINDOW` of the first task to finish is
committed together, in at most three locked appends: the records of all those attempts to
OUT, their log lines to the log, then their ``end`` rows with the ``start`` rows of the
tasks claimed next to the ledger. An ``end`` row is written only after the records it claims
are in OUT (or in a side file beside it), so nothing is ``ok`` before its records are on
disk. Tasks are claimed ahead (about as many as started since the last claim), so that a
free slot rarely waits for the ledger.

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
from collections import deque
from collections.abc import Callable
from typing import IO, Any, Final, NamedTuple

from .._core.blocks import BlockEncoder, Held, LongLine
from .._core.outlet import Outlet
from .._core.records import MAX_LINE, Encoder
from .._core.stamp import ATTEMPT_VAR, TASKNUM_VAR
from .._core.stop import Stopper
from ..errors import RecordError, ZotsinkError
from .ledger import Ledger
from .logline import log_line
from .tasks import Task, task_argv
from .worker import LINES, Worker

__all__ = ["COMMIT_WINDOW", "Pool", "Progress", "Tasking"]

#: Seconds a finished task waits for others to share its commit. A locked, fsynced append
#: on a shared filesystem costs milliseconds, often tens of them: within this window many
#: quick tasks share three appends, while a task of seconds or more is delayed by a small
#: part of its own time, and a crash loses at most this long of finished work (which the
#: next run does again: nothing of it is claimed).
COMMIT_WINDOW: Final = 0.25
#: The window's bound for tasks of a second or more: the window is twice the mean time of a
#: task, within COMMIT_WINDOW and this, so that a few of them share a commit too.
MAX_COMMIT_WINDOW: Final = 2.0
#: Seconds between two calls of the progress callback.
PROGRESS_EVERY: Final = 0.5
#: Seconds between the SIGTERM and the SIGKILL of a task that has to go.
KILL_AFTER: Final = 5.0
#: Tasks that could not start, before any did, after which run stops starting more.
HALT_AFTER: Final = 3
#: Seconds a task's pipes may stay open after it exited (a background child holds them).
PIPE_LINGER: Final = 2.0
_READ_SIZE: Final = 1 << 16
#: The bytes of a task's stderr line over the limit that go to the log.
_LOG_HEAD: Final = 1024


class _Proc:
    """One running attempt of a task."""

    def __init__(self, task: Task, attempt: int, batcher: BlockEncoder) -> None:
        self.task = task
        self.attempt = attempt
        self.batcher = batcher
        self.popen: subprocess.Popen[bytes] | None = None  # a command's process
        self.worker: Worker | None = None  # or the worker that calls the function
        self.code: int | None = None  # a function's exit: 0, 1 (it raised), a worker's death
        self.started = time.monotonic()
        self.fds: dict[int, bytearray] = {}  # open pipe -> its unfinished last line
        # open pipe -> the file object that owns its descriptor (closed through it alone:
        # a descriptor closed by number and then again by its file object could by then
        # be another file's)
        self.files: dict[int, IO[bytes]] = {}
        # pipe -> its line over the limit: stdout's kept in a temporary file for the rejects
        # file, stderr's counted (its head is in the log)
        self.longs: dict[int, LongLine | int] = {}
        self.out_fd = self.err_fd = -1
        self.records = 0
        # The attempt's records, held until it ends: they reach OUT in one piece, and its
        # end row names that piece (exactly-once: see Pool._append_held).
        self.held = Held()
        self.notes: list[str] = []
        self.status: str | None = None  # set when zotsink ends the task: timeout, interrupted
        self.exited_at: float | None = None
        self.kill_at: float | None = None  # SIGKILL due
        self.term_at: float | None = None  # SIGTERM due
        self.reap_wait = 0.0005  # seconds until the next look for its exit

    @property
    def group(self) -> subprocess.Popen[bytes] | None:
        """The process whose group signals reach: the command's, or the worker's."""
        return self.worker.popen if self.worker is not None else self.popen

    @property
    def returncode(self) -> int:
        if self.worker is not None or self.popen is None:
            return 127 if self.code is None else self.code
        return self.popen.returncode if self.popen.returncode is not None else 127


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
        queue: deque[Task],
        how: Tasking,
        book: Ledger,
        template: Encoder,
        out: Outlet,
        log: Outlet,
        stopper: Stopper | None,
        progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.queue = queue
        self.how = how
        self.book = book
        self.template = template
        self.out = out
        self.log = log
        self.stopper = stopper
        self.progress = progress
        self.total = len(queue)
        self.began = time.monotonic()
        self.progress_at = self.began + PROGRESS_EVERY
        self.poller = select.poll()
        if stopper is not None:
            self.poller.register(stopper.wakeup_fd, select.POLLIN)
        self.running: dict[int, _Proc] = {}  # pipe fd -> its task
        self.procs: list[_Proc] = []
        self.ready: deque[tuple[Task, int]] = deque()  # claimed (start row written), not started
        self.ends: list[bytes] = []  # end rows not yet in the ledger
        self.tries: dict[int, int] = {}  # attempts in this run, per task
        self.final: dict[int, str] = {}
        self.elsewhere = 0  # tasks done or running in another run: not started here
        self.started_ok = 0  # task processes that started
        self.start_failures = 0  # tasks that could not start before any did
        self.halted: str | None = None  # why run stopped starting tasks early
        self.ending: list[_Proc] = []  # ended, waiting for their group's commit
        self.first_end = 0.0  # when the first of them ended
        self.mean_task: float | None = None  # seconds a task takes, recent ones weigh most
        self.window = COMMIT_WINDOW  # how long the first to end waits for others
        self.ending_bytes = 0
        self.since_claim = 0  # attempts started since the last claim: how many to claim ahead
        self.claimed_at = self.began
        self.done = 0
        self.failed = 0
        self.started = 0
        self.stopping = False
        self.ledger_error: Exception | None = None
        # function workers (--call): every one, the idle ones, and pipe fd -> its worker
        self.workers: list[Worker] = []
        self.idle: list[Worker] = []
        self.worker_fds: dict[int, Worker] = {}
        self.worker_task: dict[Worker, _Proc] = {}
        self.worker_prints: dict[Worker, bytearray] = {}  # its unfinished last line
        self.worker_cut: dict[Worker, int] = {}  # bytes so far of a line over the limit

    # -- the loop ----------------------------------------------------------------------------
    def loop(self) -> None:
        if self.how.call is not None and self.queue:
            for _ in range(min(self.how.jobs, len(self.queue))):
                self._spawn_worker()
        while True:
            self._check_stop()
            now = time.monotonic()
            self._start_ready()
            if self._commit_due(now):
                self._commit()
                self._start_ready()
            if self.halted is not None or self.stopping:
                self._release()
            if self._finished():
                break
            events = self.poller.poll(self._wait_ms())
            for fd, _ev in events:
                proc = self.running.get(fd)
                if proc is not None:
                    self._read(proc, fd)
                    continue
                worker = self.worker_fds.get(fd)
                if worker is not None:
                    self._from_worker(worker, fd)
            now = time.monotonic()
            for proc in list(self.procs):
                self._tend(proc, now)
            if self.log.due(now):
                self.log.flush()
            if self.progress is not None and now >= self.progress_at:
                self.progress_at = now + PROGRESS_EVERY
                self.progress(self.where())
        self._commit()
        self.log.flush()
        self._write_ends()

    def where(self) -> Progress:
        return Progress(
            self.total, self.done, self.failed, len(self.procs), time.monotonic() - self.began
        )

    def _finished(self) -> bool:
        if self.procs or self.ending or (self.ready and self.halted is None and not self.stopping):
            return False
        if self.queue and not self.stopping and self.halted is None:
            # Tasks left and none running: the claim came first in this turn of the loop,
            # so what is waited for is a worker still loading the function.
            return not self.workers
        for w in self.workers:
            w.stop()  # no more tasks: each ends after its last result
        return True

    def _wait_ms(self) -> int:
        now = time.monotonic()
        waits = [self.log.due_in(now)]
        if self.ending:
            waits.append(self.first_end + self.window - now)
        if self.progress is not None:
            waits.append(self.progress_at - now)
        for p in self.procs:
            if p.worker is not None:
                pass  # its result and its worker's end come through the pipes polled
            elif p.exited_at is not None or not p.fds:
                # Exited, or its pipes closed: the exit follows at once, so look again soon,
                # then less often (a fixed wait would be added to every quick task).
                waits.append(p.reap_wait)
                p.reap_wait = min(p.reap_wait * 2, 0.05)
            else:
                waits.append(1.0)  # look for a task that exited behind an open pipe
            waits += [p.term_at and p.term_at - now, p.kill_at and p.kill_at - now]
        due = [w for w in waits if w is not None]
        return max(0, math.ceil(min(due) * 1000)) if due else -1

    def _check_stop(self) -> None:
        if self.stopping or self.stopper is None or self.stopper.signum is None:
            return
        self.stopping = True
        # The wakeup pipe stays readable once written: polled on, it would spin the loop.
        self.poller.unregister(self.stopper.wakeup_fd)
        signum = self.stopper.signum
        self.queue.clear()
        now = time.monotonic()
        for p in self.procs:
            p.status = "interrupted"
            if p.worker is None:
                # a function is left to finish its call; a command decides for itself
                _signal_group(p, signum)
            p.term_at = now + self.how.grace

    # -- committing --------------------------------------------------------------------------
    def _free(self) -> int:
        """Tasks that could start now."""
        if self.how.call is not None:
            return len(self.idle)
        return self.how.jobs - len(self.procs)

    def _commit_due(self, now: float) -> bool:
        if (
            self.queue
            and not self.ready
            and self.halted is None
            and not self.stopping
            and (self._free() > 0 or (not self.procs and not self.workers))
        ):
            return True  # a task could start: claim it
        if not self.ending:
            return False
        return (
            self.stopping
            or not self.procs  # nothing else will end to share the appends
            or now >= self.first_end + self.window
            or self.ending_bytes >= self.out.batch.max_bytes
        )

    def _commit(self) -> None:
        """The group's records to OUT, its log lines to the log, then its end rows (and the
        start rows of the tasks claimed next) to the ledger."""
        if self.ending:
            ended, self.ending, self.ending_bytes = self.ending, [], 0
            self._finish(ended)
        now = time.monotonic()
        # As many as can start now, and as many as will start before the commit after the
        # next (at the rate since the last claim): the next free slots do not wait for the
        # ledger, and quick tasks claim with their group's commit, not between commits.
        rate = self.since_claim / max(now - self.claimed_at, 1e-3)
        # none before a task ran at all: a command that cannot start claims no more than
        # it fails (see HALT_AFTER)
        ahead = math.ceil(rate * 2 * self.window) if self.started_ok else 0
        want = max(self._free(), 0) + ahead - len(self.ready)
        if not self.queue or self.stopping or self.halted is not None or want <= 0:
            self._write_ends()
            return
        try:
            # Under the ledger's lock: what other runs did since, then the start rows (with
            # the end rows waiting to go). Start rows are never spilled: a task whose start
            # cannot be recorded is not run.
            picked, taken = self.book.claim(self.queue, want, self.ends)
            self.ends = []
        except ZotsinkError as e:  # the lock, the write, or a file that is no ledger
            self.ledger_error = e
            self._write_ends()
            self.queue.clear()
            self.stopping = True
            return
        self.since_claim = 0
        self.claimed_at = now
        self.elsewhere += len(taken)
        self.ready.extend(picked)

    def _release(self) -> None:
        """Tasks claimed but not started, after a stop or a halt: their end rows say so,
        or readers would take them for running (or lost) tasks."""
        if not self.ready:
            return
        why = self.halted or "the run was stopped"
        for task, attempt in self.ready:
            self.ends.append(
                self.book.end_row(
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
        self.ready.clear()

    # -- starting ----------------------------------------------------------------------------
    def _start_ready(self) -> None:
        while self.ready and not self.stopping and self.halted is None and self._free() > 0:
            task, attempt = self.ready.popleft()
            self.tries[task.num] = self.tries.get(task.num, 0) + 1
            self.since_claim += 1
            if self.how.call is not None:
                self._call(self.idle.pop(), task, attempt)
            else:
                self._spawn(task, attempt)

    def _attempt(self, task: Task, attempt: int) -> tuple[_Proc, dict[str, str]]:
        env = {**self.how.env, TASKNUM_VAR: str(task.num), ATTEMPT_VAR: str(attempt)}
        tpl = self.template
        enc = Encoder(tpl.fmt, tpl.columns, tpl.stamp, env=env)  # per task: its tasknum and attempt
        proc = _Proc(task, attempt, BlockEncoder(enc, self.how.kv, count=True))
        self.procs.append(proc)
        self.started += 1
        return proc, env

    def _spawn(self, task: Task, attempt: int) -> None:
        proc, env = self._attempt(task, attempt)
        try:
            proc.popen = subprocess.Popen(
                task_argv(self.how.command, task.line, self.how.shell),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=env,
            )
        except OSError as e:
            argv = task_argv(self.how.command, task.line, self.how.shell)
            why = f"cannot start {argv[0]!r}: {e.strerror or e}"
            proc.notes.append(why)
            self._log(task.num, attempt, f"zotsink: {why}".encode())
            proc.exited_at = time.monotonic()
            if not self.started_ok:
                self.start_failures += 1
                if self.start_failures >= HALT_AFTER:
                    # a mistyped command fails every task the same way: stop, and say why,
                    # rather than fail the whole list one task at a time
                    self.halted = (
                        f"the first {self.start_failures} tasks could not start ({why}); "
                        "nothing more was started: fix the command and run again"
                    )
                    self.queue.clear()
            return
        self.started_ok += 1
        assert proc.popen.stdout is not None and proc.popen.stderr is not None
        proc.out_fd = proc.popen.stdout.fileno()
        proc.err_fd = proc.popen.stderr.fileno()
        proc.files = {proc.out_fd: proc.popen.stdout, proc.err_fd: proc.popen.stderr}
        for fd in (proc.out_fd, proc.err_fd):
            proc.fds[fd] = bytearray()
            self.running[fd] = proc
            self.poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        if self.how.task_timeout is not None:
            proc.term_at = proc.started + self.how.task_timeout

    # -- function workers --------------------------------------------------------------------
    def _spawn_worker(self) -> None:
        assert self.how.call is not None
        try:
            worker = Worker(self.how.call, self.how.env)
        except OSError as e:
            self.halted = f"cannot start a worker for --call {self.how.call}: {e.strerror or e}"
            self.queue.clear()
            return
        self.workers.append(worker)
        self.worker_prints[worker] = bytearray()
        for fd in (worker.prints_fd, worker.results_fd):
            self.worker_fds[fd] = worker
            self.poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def _call(self, worker: Worker, task: Task, attempt: int) -> None:
        proc, _env = self._attempt(task, attempt)
        proc.worker = worker
        self.worker_task[worker] = proc
        if self.how.task_timeout is not None:
            proc.term_at = proc.started + self.how.task_timeout
        # A worker that died since it was idle is noticed through its pipes: its task is
        # then killed, as one that died during the call.
        worker.send(task.num, attempt, task.line)

    def _from_worker(self, worker: Worker, fd: int) -> None:
        if fd == worker.prints_fd:
            data = worker.read_prints()
            if data:
                self._prints(worker, data)
            else:  # its end: the worker is gone (its results pipe says so too)
                self._unwatch(fd)
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

    def _prints(self, worker: Worker, data: bytes, *, last: bool = False) -> None:
        """A worker's prints, a line at a time, into the log under its task's number; a line
        over the limit is never held whole: its head is logged, the rest counted."""
        proc = self.worker_task.get(worker)
        # before any task (the module loading): task 0, the run's own lines
        num, attempt = (proc.task.num, proc.attempt) if proc is not None else (0, 0)
        cut = self.worker_cut.pop(worker, None)
        if cut is not None:  # the rest of a line over the limit, up to its newline
            nl = data.find(b"\n")
            if nl < 0 and not last:
                self.worker_cut[worker] = cut + len(data)
                return
            self._cut_note(num, attempt, cut + (len(data) if nl < 0 else nl))
            data = b"" if nl < 0 else data[nl + 1 :]
        pending = self.worker_prints[worker]
        pending += data
        if last and pending and not pending.endswith(b"\n"):
            pending += b"\n"
        nl = pending.rfind(b"\n")
        if nl < 0:
            if len(pending) > MAX_LINE:
                self._log(num, attempt, bytes(pending[:_LOG_HEAD]))
                self.worker_cut[worker] = len(pending)
                pending.clear()
            return
        lines = bytes(pending[:nl]).split(b"\n")
        del pending[: nl + 1]
        for line in lines:
            if len(line) > MAX_LINE:
                self._log(num, attempt, line[:_LOG_HEAD])
                self._cut_note(num, attempt, len(line))
            else:
                self._log(num, attempt, line)

    def _cut_note(self, num: int, attempt: int, size: int, how: str = "") -> None:
        note = f"zotsink: the line above was {size} bytes long, cut to {_LOG_HEAD}{how}"
        self._log(num, attempt, note.encode())

    def _returned(self, worker: Worker, frame: tuple[Any, ...]) -> None:
        """A function's call ended: its prints first (sent before its result), then its
        records."""
        self._prints(worker, worker.read_prints(), last=True)  # still under its task
        proc = self.worker_task.pop(worker, None)
        if proc is None:
            return
        self.started_ok += 1
        if frame[0] == "done":
            proc.code = 0
            for kind, value in frame[1]:
                self._item(proc, kind, value)
        else:
            _, text, code = frame
            for line in text.splitlines():
                self._log(proc.task.num, proc.attempt, line.encode("utf-8", "surrogateescape"))
            proc.code = code
            last = text.strip().splitlines()[-1:] if text.strip() else [f"exit {code}"]
            proc.notes.append(f"the function raised: {last[0][:200]}")
        proc.exited_at = time.monotonic()
        if proc.status == "interrupted":
            proc.status = None  # the call ended within the grace: its result stands
        if not self.stopping and worker.ready:
            self.idle.append(worker)
        else:
            worker.stop()

    def _item(self, proc: _Proc, kind: int, value: Any) -> None:
        if kind == LINES:
            raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
            if not raw:
                return
            if not raw.endswith(b"\n"):
                raw += b"\n"
            self._records(proc, raw)
            return
        enc = proc.batcher.enc
        tpl = self.template
        if enc.columns is None and tpl.columns is not None:
            enc.set_columns(tpl.columns)
        try:
            line = enc.encode(value)
        except (RecordError, ZotsinkError) as e:
            where = proc.batcher.take_line()
            proc.batcher.rejects.append((f"{where}: {e}", repr(value).encode()))
            return
        proc.batcher.line_no += 1
        if tpl.columns is None and enc.columns is not None:
            tpl.set_columns(enc.columns)
            self.out.follow(tpl)
        proc.records += 1
        proc.held.add(line, 1)

    def _unloadable(self, worker: Worker, text: str) -> None:
        worker.stop()
        if self.halted is None:
            last = text.strip().splitlines()[-1] if text.strip() else "no reason given"
            self.halted = (
                f"cannot load --call {self.how.call}: {last}; nothing was started: "
                f"fix it and run again (the traceback is in {self.log.writer.path})"
            )
            for line in text.splitlines():  # under task number 0: the run's own lines
                self._log(0, 0, line.encode("utf-8", "surrogateescape"))
            self.queue.clear()

    def _worker_gone(self, worker: Worker) -> None:
        """The worker's results pipe ended: it exited, or died (its task is then killed)."""
        for fd in (worker.results_fd, worker.prints_fd):
            if fd in self.worker_fds:
                self._unwatch(fd)
        try:
            code = worker.popen.wait(timeout=KILL_AFTER)
        except subprocess.TimeoutExpired:  # closed its pipe and lives on: not a worker
            worker.signal(signal.SIGKILL)
            code = worker.popen.wait()
        self.workers.remove(worker)
        if worker in self.idle:
            self.idle.remove(worker)
        self._prints(worker, worker.read_prints(), last=True)
        proc = self.worker_task.pop(worker, None)
        worker.close()
        if proc is not None:
            proc.code = code
            how = f"signal {_signame(-code)}" if code < 0 else f"exit {code}"
            if proc.status is None:
                proc.status = "killed"
            proc.notes.append(f"its worker died ({how})")
            proc.exited_at = time.monotonic()
        elif not worker.ready and self.halted is None and not self.stopping:
            self._unloadable(worker, f"its worker died while loading it (exit {code})")
        if (self.queue or self.ready) and not self.stopping and self.halted is None:
            self._spawn_worker()  # a new worker for the tasks left

    def _unwatch(self, fd: int) -> None:
        self.poller.unregister(fd)
        del self.worker_fds[fd]

    # -- reading -----------------------------------------------------------------------------
    def _read(self, proc: _Proc, fd: int) -> None:
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            raise
        except OSError:
            chunk = b""
        pending = proc.fds[fd]
        if not chunk:
            if fd in proc.longs:
                self._long_done(proc, fd, "; the output ended without a newline")
            elif pending:
                if fd == proc.out_fd:
                    proc.notes.append("no newline at the end of the output: one was added")
                self._lines(proc, fd, bytes(pending) + b"\n")
            self._close(proc, fd)
            return
        if fd in proc.longs:
            # the rest of a line over the limit: out of memory with it, up to its newline
            nl = chunk.find(b"\n")
            self._long_add(proc, fd, chunk if nl < 0 else chunk[:nl])
            if nl < 0:
                return
            self._long_done(proc, fd, "")
            chunk = chunk[nl + 1 :]
        nl = chunk.rfind(b"\n")
        if nl < 0:
            pending += chunk
            if len(pending) > MAX_LINE:
                # never held whole: a line over the limit goes to a temporary file
                proc.fds[fd] = bytearray()
                self._long_start(proc, fd, pending)
            return
        block = bytes(pending) + chunk[: nl + 1] if pending else chunk[: nl + 1]
        proc.fds[fd] = bytearray(chunk[nl + 1 :])
        self._lines(proc, fd, block)

    def _long_start(self, proc: _Proc, fd: int, head: bytes | bytearray) -> None:
        if fd == proc.out_fd:
            where = f"task {proc.task.num} {proc.batcher.take_line()}"
            proc.longs[fd] = LongLine(self.out.writer.path, where)
        else:
            # stderr is for a person: its head is logged, the rest counted and cut
            proc.longs[fd] = len(head)
            self._log(proc.task.num, proc.attempt, bytes(head[:_LOG_HEAD]))
            return
        self._long_add(proc, fd, head)

    def _long_add(self, proc: _Proc, fd: int, piece: bytes | bytearray) -> None:
        long = proc.longs[fd]
        if isinstance(long, LongLine):
            long.add(piece)
        else:
            proc.longs[fd] = long + len(piece)

    def _long_done(self, proc: _Proc, fd: int, how: str) -> None:
        long = proc.longs.pop(fd)
        if isinstance(long, LongLine):
            proc.batcher.skip(long.size + 1)
            self.out.reject_long(long, f"over the {MAX_LINE}-byte line limit{how}")
            proc.notes.append(f"a line over the limit refused, see {self.out.rejects_file}")
        else:
            self._cut_note(proc.task.num, proc.attempt, long, how)

    def _lines(self, proc: _Proc, fd: int, block: bytes) -> None:
        if fd == proc.err_fd:
            for line in block[:-1].split(b"\n"):
                self._log(proc.task.num, proc.attempt, line)
            return
        self._records(proc, block)

    def _records(self, proc: _Proc, block: bytes) -> None:
        """Lines of records (a command's stdout, a function's returned text), held."""
        enc = proc.batcher.enc
        tpl = self.template
        if enc.columns is None and tpl.columns is not None:
            enc.set_columns(tpl.columns)  # another task's first key:value line named them
        data, n = proc.batcher.encode(block)
        if tpl.columns is None and enc.columns is not None:
            tpl.set_columns(enc.columns)
            self.out.follow(tpl)
        proc.records += n
        proc.held.add(data, n)

    def _log(self, num: int, attempt: int, line: bytes) -> None:
        self.log.add(log_line(num, attempt, line), 1)  # the one writer of the log's format

    def _close(self, proc: _Proc, fd: int) -> None:
        self.poller.unregister(fd)
        del self.running[fd]
        del proc.fds[fd]
        proc.files.pop(fd).close()

    # -- ending ------------------------------------------------------------------------------
    def _tend(self, proc: _Proc, now: float) -> None:
        if proc.exited_at is None and proc.popen is not None and proc.popen.poll() is not None:
            proc.exited_at = now
        if proc.exited_at is not None and proc.fds and now - proc.exited_at >= PIPE_LINGER:
            # The task is gone but something it started holds its pipes: take what is there.
            proc.notes.append("its output stayed open after it exited (a background process?)")
            for fd in list(proc.fds):
                self._drain(proc, fd)
        if proc.exited_at is not None and not proc.fds:
            self._ended(proc, now)
            return
        if proc.term_at is not None and now >= proc.term_at:
            if proc.status is None:
                proc.status = "timeout"
            _signal_group(proc, signal.SIGTERM)
            proc.term_at = None
            proc.kill_at = now + KILL_AFTER
        elif proc.kill_at is not None and now >= proc.kill_at:
            _signal_group(proc, signal.SIGKILL)
            proc.kill_at = None

    def _drain(self, proc: _Proc, fd: int) -> None:
        os.set_blocking(fd, False)
        while fd in proc.fds:
            try:
                self._read(proc, fd)
            except BlockingIOError:
                pending = proc.fds[fd]
                if fd in proc.longs:
                    self._long_done(proc, fd, "; cut off where the task exited")
                elif pending:
                    self._lines(proc, fd, bytes(pending) + b"\n")
                self._close(proc, fd)

    def _ended(self, proc: _Proc, now: float) -> None:
        """An attempt ended: it waits for its group's commit."""
        self.procs.remove(proc)
        took = now - proc.started
        self.mean_task = took if self.mean_task is None else 0.8 * self.mean_task + 0.2 * took
        self.window = min(MAX_COMMIT_WINDOW, max(COMMIT_WINDOW, 2 * self.mean_task))
        if not self.ending:
            self.first_end = now
        self.ending.append(proc)
        self.ending_bytes += proc.held.size
        self.done += 1
        self.failed += _status(proc) != "ok"

    def _finish(self, ended: list[_Proc]) -> None:
        """The attempts of one commit: their records go to OUT in one locked append, their
        log lines follow, then their end rows wait for the ledger's append."""
        statuses = {}
        for proc in ended:
            statuses[proc] = _status(proc)
            rejects = proc.batcher.rejects
            if rejects:
                num = proc.task.num
                self.out.reject([(f"task {num} {why}", ln) for why, ln in rejects])
                proc.notes.append(f"{len(rejects)} lines refused, see {self.out.rejects_file}")
        places = self._append_held(ended)
        self.log.flush()
        for proc in ended:
            status = statuses[proc]
            at = places.get(proc)
            if at is None and proc.held.size and status == "ok":
                # Not in OUT: no row may claim them. The task runs again on the next run;
                # what the spill file holds joins OUT unclaimed when it is recovered.
                status = "failed"
            self._end_row(proc, status, at)

    def _append_held(self, ended: list[_Proc]) -> dict[_Proc, int]:
        """Each attempt's records, in one piece each, in as few locked appends as can be:
        one for all whose records are in memory. Where each piece begins in OUT; an attempt
        whose piece could not be appended is left out, with a note that says where it is.
        The records go before the rows that claim them: a crash between the two leaves
        lines no ok row claims, which readers leave out and the next run writes again."""
        places: dict[_Proc, int] = {}
        # each piece joined once: the one block of all those held in memory, then each of
        # the pieces kept in a temporary file on its own
        pieces = {p: p.held.in_memory() for p in ended if p.held.size}
        small = [p for p, data in pieces.items() if data is not None]
        groups = [small] if small else []
        groups += [[p] for p, data in pieces.items() if data is None]
        for group in groups:
            if group is small:
                block = b"".join(pieces[p] or b"" for p in group)
                err = self.out.write(block, sum(p.held.count for p in group))
            else:
                err = self.out.write(group[0].held, group[0].held.count)
            if err is not None:
                where = getattr(err, "spill_path", None) or "a side file"
                for p in group:
                    p.notes.append(f"its records could not be appended to OUT; they are in {where}")
                continue
            at = self.out.writer.last_at
            for p in group:
                places[p] = at
                at += p.held.size
        for p in ended:
            p.held.close()
        return places

    def _end_row(self, proc: _Proc, status: str, at: int | None) -> None:
        task = proc.task
        code = proc.returncode
        exit_code, signum = (code, "") if code >= 0 else ("", -code)
        self.ends.append(
            self.book.end_row(
                task.num,
                task.line,
                proc.attempt,
                status=status,
                exit=exit_code,
                signal=_signame(signum) if signum else "",
                seconds=f"{time.monotonic() - proc.started:.3f}",
                records=proc.records,
                bytes=proc.held.size,
                note="; ".join(proc.notes),
                out_offset="" if at is None else at,
                # what readers keep of OUT before the claimed pieces: its header
                out_header="" if at is None else len(self.out.writer.header or b""),
            )
        )
        self.final[task.num] = status
        retry = (
            status in ("failed", "killed", "timeout") and self.tries[task.num] <= self.how.retries
        )
        if retry and not self.stopping:
            self.queue.appendleft(task)

    def _write_ends(self) -> None:
        if not self.ends:
            return
        try:
            self.book.append(self.ends)
        except ZotsinkError as e:  # saved to a side file of the ledger (see Ledger.append)
            self.ledger_error = self.ledger_error or e
        self.ends = []

    def close(self) -> None:
        for proc in self.procs:  # only after an error: nothing may keep running unseen
            _signal_group(proc, signal.SIGKILL)
            if proc.popen is not None:
                proc.popen.wait()
        for proc in self.procs + self.ending:
            proc.held.close()
            for f in proc.files.values():
                f.close()
        self.running.clear()
        for worker in self.workers:
            worker.stop()
            if worker in self.worker_task:  # only after an error, as above
                worker.signal(signal.SIGKILL)
        for worker in self.workers:
            try:
                worker.popen.wait(timeout=KILL_AFTER)
            except subprocess.TimeoutExpired:
                worker.signal(signal.SIGKILL)
                worker.popen.wait()
            worker.close()
        self.workers.clear()
        self.out.close()
        self.log.close()
        self.book.close()


def _status(proc: _Proc) -> str:
    """The status of an attempt that ended, as its process (or call) ended."""
    code = proc.returncode
    if proc.status is not None:
        return proc.status  # zotsink ended it: timeout, interrupted
    if code == 0:
        return "ok"
    return "killed" if code < 0 else "failed"


def _signal_group(proc: _Proc, signum: int) -> None:
    group = proc.group
    if group is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(group.pid, signum)


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)
