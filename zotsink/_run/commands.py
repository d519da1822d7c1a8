"""Command tasks: one of the two ways a task runs (the other is :mod:`zotsink._run.calls`).

Each task is a child process in its own session (so that a signal to its process group
reaches everything it started), with stdin from ``/dev/null`` and stdout and stderr on
pipes read here: stdout lines are its records (a :class:`~zotsink._run.output.Capture`),
stderr lines go to the log under ``TASKNUM.ATTEMPT``, both cut by the one pipe line cutter.
Its exit is reaped with ``wait4``, which gives what it used (peak memory, CPU).

The backend reports facts as events (:class:`~zotsink._run.events.Started`,
:class:`~zotsink._run.events.StartFailed`, :class:`~zotsink._run.events.Exited`,
:class:`~zotsink._run.events.Drained`) and does what it is told (start, signal, drain);
what they mean is :mod:`zotsink._run.state`'s to decide.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import subprocess
from collections.abc import Mapping, Sequence
from typing import IO, Any, Final

from .._core.pump import LineCutter
from .._core.records import MAX_LINE
from .._core.stamp import ATTEMPT_VAR, TASKNUM_VAR
from .alive import proc_start
from .events import Drained, Exited, Key, Started, StartFailed
from .output import Capture, Output
from .tasks import Task, task_argv
from .usage import OomCounter, OomWatch, SpawnFloor, command_usage, reap

__all__ = ["Commands"]

_READ_SIZE: Final = 1 << 16
_POLL_IN: Final = select.POLLIN | select.POLLHUP | select.POLLERR


class _Pipe:
    __slots__ = ("cutter", "file", "key", "sink")

    def __init__(self, key: Key, file: IO[bytes], sink: Any) -> None:
        # the file object owns the descriptor: closed through it alone (a descriptor closed
        # by number and then again by its file object could by then be another file's)
        self.key = key
        self.file = file
        self.cutter = LineCutter(MAX_LINE)
        self.sink = sink


class _Child:
    """A command task's process, its pipes, and when to look for its exit next."""

    __slots__ = ("capture", "exited", "key", "oom", "pipes", "popen", "reap_wait")

    def __init__(
        self, key: Key, popen: subprocess.Popen[bytes], capture: Capture, oom: OomWatch
    ) -> None:
        self.key = key
        self.popen = popen
        self.capture = capture
        self.oom = oom
        self.pipes: dict[int, _Pipe] = {}
        self.exited = False
        self.reap_wait = 0.0005  # seconds until the next look for its exit

    def watch(self, fd: int, pipe: _Pipe) -> None:
        self.pipes[fd] = pipe

    def closed(self, fd: int) -> bool:
        """Pipe ``fd`` was read to its end; whether it was its last."""
        del self.pipes[fd]
        return not self.pipes

    def ended(self) -> None:
        """Its process exited (reaped)."""
        self.exited = True

    def next_look(self) -> float:
        """Seconds until its exit is looked for again: soon once its pipes closed (the exit
        follows at once), then less often (a fixed wait would be added to every quick
        task); each second while a pipe is open (a task that exited behind a pipe held)."""
        if self.pipes:
            return 1.0
        wait = self.reap_wait
        self.reap_wait = min(wait * 2, 0.05)
        return wait


class Commands:
    """The command backend of one run: ``command`` (with ``{}`` for the task's line, else
    the line last; ``shell``: the line itself under ``/bin/sh -c``), ``jobs`` at a time."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        shell: bool,
        jobs: int,
        env: Mapping[str, str],
        output: Output,
        poller: select.poll,
    ) -> None:
        self.command = tuple(command)
        self.shell = shell
        self.jobs = jobs
        self.env = env
        self.output = output
        self.poller = poller
        self.children: dict[Key, _Child] = {}
        self.pipes: dict[int, _Pipe] = {}
        self.done: dict[Key, Capture] = {}  # ended, waiting for their commit
        # what a task used: its peak, unless the run's own size covers it (the kernel
        # counts the run in a child's peak until exec), and whether it died for memory
        self.floor = SpawnFloor()
        self.oom_counter = OomCounter()

    def room(self) -> int:
        """Tasks that could start now."""
        return self.jobs - len(self.children)

    def start(self, attempts: Sequence[tuple[Task, int]]) -> list[Any]:
        events: list[Any] = []
        for task, attempt in attempts:
            events.append(self._spawn(task, attempt))
        return events

    def _spawn(self, task: Task, attempt: int) -> Any:
        key = (task.num, attempt)
        env = {**self.env, TASKNUM_VAR: str(task.num), ATTEMPT_VAR: str(attempt)}
        capture = Capture(key, self.output, env)
        argv = task_argv(self.command, task.line, self.shell)
        oom = OomWatch(self.oom_counter)
        oom.before()
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
            self.output.log_lines(task.num, attempt).line(f"zotsink: {why}".encode())
            self.done[key] = capture
            return StartFailed(key, why, self._task_owns(e))
        child = _Child(key, popen, capture, oom)
        assert popen.stdout is not None and popen.stderr is not None
        err = self.output.log_lines(task.num, attempt)
        for f, sink in ((popen.stdout, capture), (popen.stderr, err)):
            pipe = _Pipe(key, f, sink)
            child.watch(f.fileno(), pipe)
            self.pipes[f.fileno()] = pipe
            self.poller.register(f.fileno(), _POLL_IN)
        self.children[key] = child
        return Started(key, popen.pid, proc_start(popen.pid) or "")

    def _task_owns(self, e: OSError) -> bool:
        """Whether a start error is the task's, not the command's: its line too long for an
        argument (E2BIG), or a program path built from its line (``{}``) not there."""
        if e.errno == errno.E2BIG:
            return True
        built = not self.shell and "{}" in self.command[0]
        return built and e.errno in (errno.ENOENT, errno.EACCES, errno.ENOTDIR, errno.ENOEXEC)

    # -- reading --------------------------------------------------------------------------------
    def readable(self, fd: int) -> list[Any]:
        """Read what pipe ``fd`` holds; a Drained event when it was its attempt's last."""
        pipe = self.pipes.get(fd)
        if pipe is None:
            return []
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return []
        except OSError:
            chunk = b""
        if chunk:
            pipe.cutter.feed(chunk, pipe.sink)
            return []
        return self._closed(pipe, "; the output ended without a newline")

    def _closed(self, pipe: _Pipe, how: str) -> list[Any]:
        child = self.children.get(pipe.key)
        added = pipe.cutter.finish(pipe.sink, how)
        if added and child is not None and pipe.sink is child.capture:
            child.capture.note("no newline at the end of the output: one was added")
        fd = pipe.file.fileno()
        self.poller.unregister(fd)
        del self.pipes[fd]
        pipe.file.close()
        if child is None:
            return []
        if not child.closed(fd):
            return []
        if child.exited:
            self._forget(child.key)
        return [Drained(child.key, child.capture.size, self.output.last_line(child.key))]

    def drain(self, key: Key) -> list[Any]:
        """Take what an attempt's lingering pipes hold now (something it started keeps them
        open), and close them."""
        child = self.children.get(key)
        if child is None:
            return []
        events: list[Any] = []
        for fd, pipe in list(child.pipes.items()):
            os.set_blocking(fd, False)
            while True:
                try:
                    chunk = os.read(fd, _READ_SIZE)
                except BlockingIOError:
                    events += self._closed(pipe, "; cut off where the task exited")
                    break
                except OSError:
                    chunk = b""
                if not chunk:
                    events += self._closed(pipe, "; the output ended without a newline")
                    break
                pipe.cutter.feed(chunk, pipe.sink)
        return events

    # -- processes ---------------------------------------------------------------------------------
    def tend(self, now: float) -> list[Any]:
        """Reap the children that exited (with what they used)."""
        events: list[Any] = []
        for key, child in list(self.children.items()):
            if child.exited:
                if not child.pipes:
                    self._forget(key)
                continue
            got = reap(child.popen)
            if got is None:
                continue
            code = got.returncode
            oom = child.oom.after(-code if code < 0 else None)
            usage = command_usage(got.rusage, floor=self.floor, oom=oom)
            child.ended()
            events.append(Exited(key, code, usage))
            if not child.pipes:
                self._forget(key)
        return events

    def _forget(self, key: Key) -> None:
        child = self.children.pop(key)
        self.done[key] = child.capture

    def wait(self) -> float | None:
        """Seconds until the children should be looked at again (None: their pipes tell)."""
        waits = [c.next_look() for c in self.children.values() if not c.exited]
        return min(waits) if waits else None

    def signal(self, key: Key, signum: int) -> None:
        child = self.children.get(key)
        if child is not None and not child.exited:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
                os.killpg(child.popen.pid, signum)

    def take(self, keys: Sequence[Key]) -> list[Capture]:
        """The captures of ended attempts, for their commit."""
        return [self.done.pop(k) for k in keys if k in self.done]

    def close(self) -> None:
        """Only after an error: nothing may keep running unseen."""
        import signal

        self.floor.close()
        self.oom_counter.close()
        for child in self.children.values():
            if not child.exited:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.popen.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    child.popen.wait()
            for pipe in child.pipes.values():
                pipe.file.close()
            child.capture.close()
        for capture in self.done.values():
            capture.close()
        self.children.clear()
        self.pipes.clear()
        self.done.clear()
