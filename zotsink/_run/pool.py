"""The pool: up to ``jobs`` task processes, read through one ``poll`` loop.

Each child runs in its own session (so a signal reaches everything it started) with stdin
from ``/dev/null`` and its stdout and stderr on pipes read here: whole stdout lines go
through the locked append path into OUT, stderr lines, prefixed with the task number, into
the one shared log.

Ledger rows cost a locked, fsynced append each, so they are gathered: the ``end`` rows of
the tasks that finished and the ``start`` rows of the tasks about to start go in ONE append,
and that append is on disk before any of those tasks is started. A task's ``end`` row is
written only after its records are in OUT (or in a side file beside it).

Stop signals (walltime warnings, ``scancel``, Ctrl-C) start nothing new, are forwarded to
each running task's process group, and after ``grace`` seconds the tasks still running get
SIGTERM and then SIGKILL. What they printed is kept; their ``end`` rows say ``interrupted``.
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
from typing import IO, Final, NamedTuple

from .._core.blocks import BlockEncoder, Held, LongLine
from .._core.outlet import Outlet
from .._core.records import MAX_LINE, Encoder
from .._core.stamp import ATTEMPT_VAR, TASKNUM_VAR
from .._core.stop import Stopper
from ..errors import ZotsinkError
from .ledger import Ledger
from .tasks import Task, task_argv

__all__ = ["Pool", "Tasking"]

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
        self.popen: subprocess.Popen[bytes] | None = None
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
    ) -> None:
        self.queue = queue
        self.how = how
        self.book = book
        self.template = template
        self.out = out
        self.log = log
        self.stopper = stopper
        self.poller = select.poll()
        if stopper is not None:
            self.poller.register(stopper.wakeup_fd, select.POLLIN)
        self.running: dict[int, _Proc] = {}  # pipe fd -> its task
        self.procs: list[_Proc] = []
        self.ends: list[bytes] = []  # end rows not yet in the ledger
        self.tries: dict[int, int] = {}  # attempts in this run, per task
        self.final: dict[int, str] = {}
        self.elsewhere = 0  # tasks done or running in another run: not started here
        self.started_ok = 0  # task processes that started
        self.start_failures = 0  # tasks that could not start before any did
        self.halted: str | None = None  # why run stopped starting tasks early
        self.ending: list[_Proc] = []  # ended in this turn of the loop: finished together
        self.started = 0
        self.stopping = False
        self.ledger_error: Exception | None = None

    # -- the loop ----------------------------------------------------------------------------
    def loop(self) -> None:
        while True:
            self._check_stop()
            self._start_next()
            if not self.procs:
                break
            events = self.poller.poll(self._wait_ms())
            for fd, _ev in events:
                proc = self.running.get(fd)
                if proc is not None:
                    self._read(proc, fd)
            now = time.monotonic()
            for proc in list(self.procs):
                self._tend(proc, now)
            if self.ending:
                ended, self.ending = self.ending, []
                self._finish(ended)
            if self.log.due(now):
                self.log.flush()
        self.log.flush()
        self._write_ends()

    def _wait_ms(self) -> int:
        now = time.monotonic()
        waits = [self.log.due_in(now)]
        for p in self.procs:
            if p.exited_at is not None or not p.fds:
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
            _signal_group(p, signum)
            p.term_at = now + self.how.grace

    # -- starting ----------------------------------------------------------------------------
    def _start_next(self) -> None:
        want = self.how.jobs - len(self.procs)
        if not self.queue or self.stopping or want <= 0:
            if not self.procs:
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
        self.elsewhere += len(taken)
        for task, attempt in picked:
            self.tries[task.num] = self.tries.get(task.num, 0) + 1
            self._spawn(task, attempt)
        if not picked and not self.procs:
            self._write_ends()

    def _spawn(self, task: Task, attempt: int) -> None:
        env = {**self.how.env, TASKNUM_VAR: str(task.num), ATTEMPT_VAR: str(attempt)}
        tpl = self.template
        enc = Encoder(tpl.fmt, tpl.columns, tpl.stamp, env=env)  # per task: its tasknum and attempt
        proc = _Proc(task, attempt, BlockEncoder(enc, self.how.kv, count=True))
        self.procs.append(proc)
        self.started += 1
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
            note = f"zotsink: the line above was {long} bytes long, cut to {_LOG_HEAD}{how}"
            self._log(proc.task.num, proc.attempt, note.encode())

    def _lines(self, proc: _Proc, fd: int, block: bytes) -> None:
        if fd == proc.err_fd:
            for line in block[:-1].split(b"\n"):
                self._log(proc.task.num, proc.attempt, line)
            return
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
        from .logline import log_line  # the one writer of the log's format

        self.log.add(log_line(num, attempt, line), 1)

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
            self.ending.append(proc)
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

    def _finish(self, ended: list[_Proc]) -> None:
        """The attempts that ended in one turn of the loop: their records go to OUT in one
        locked append, then their end rows wait for the ledger's next append."""
        statuses = {}
        for proc in ended:
            self.procs.remove(proc)
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
        code = proc.popen.returncode if proc.popen is not None else 127
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
        if not self.queue or self.stopping:
            self._write_ends()  # nothing will start soon to carry them

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
        for proc in self.procs:
            proc.held.close()
            for f in proc.files.values():
                f.close()
        self.running.clear()
        self.out.close()
        self.log.close()
        self.book.close()


def _status(proc: _Proc) -> str:
    """The status of an attempt that ended, as its process ended."""
    code = proc.popen.returncode if proc.popen is not None else 127
    if proc.status is not None:
        return proc.status  # zotsink ended it: timeout, interrupted
    if code == 0:
        return "ok"
    return "killed" if code < 0 else "failed"


def _signal_group(proc: _Proc, signum: int) -> None:
    if proc.popen is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(proc.popen.pid, signum)


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)
