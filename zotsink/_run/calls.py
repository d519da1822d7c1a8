"""Function tasks (``--call``): one of the two ways a task runs (the other is
:mod:`zotsink._run.commands`).

``jobs`` long-lived worker processes (:class:`~zotsink._run.worker.Worker`, running
:mod:`zotsink._run.serve`) each import FUNC once and call it per task. Tasks go to a worker
in batches (growing while calls are quick: the worker's own :meth:`~Worker.retune`); each
result comes back as its call ends, in frames that name the worker and the task; a frame
that is not the answer of the call under way is refused and logged under task 0. What a
call returns is its task's records (a :class:`~zotsink._run.output.Capture`); what it
prints goes to the log under its task.

The backend reports facts as events (a call began, returned, a worker loaded the
function, handed tasks back at a stop, died, could not load it) and does what it is told
(spawn workers, send tasks, hold, stop, signal); what they mean is
:mod:`zotsink._run.state`'s to decide.
"""

from __future__ import annotations

import select
import signal
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._core.records import MAX_LINE
from .._core.stamp import ATTEMPT_VAR, TASKNUM_VAR
from .alive import proc_start
from .attempt import KILL_AFTER
from .events import (
    Began,
    HandedBack,
    Key,
    Returned,
    Unloadable,
    WorkerGone,
    WorkerReady,
    WorkerStarted,
)
from .output import Capture, Output
from .tasks import Task
from .usage import UNMEASURED, OomCounter, OomWatch, Usage
from .worker import BATCH_BYTES, Worker

__all__ = ["Calls"]

_POLL_IN: Final = select.POLLIN | select.POLLHUP | select.POLLERR


def signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


#: Seconds an OOM count noted at one call's begin serves the next calls of its worker.
OOM_REUSE: Final = 0.05


class Calls:
    """The function backend of one run: ``spec`` (FILE.py:FUNC or module:FUNC) in ``jobs``
    workers."""

    def __init__(
        self,
        spec: str,
        *,
        jobs: int,
        env: Mapping[str, str],
        output: Output,
        poller: select.poll,
        load_limit: float,
    ) -> None:
        self.spec = spec
        self.jobs = jobs
        self.env = env
        self.output = output
        self.poller = poller
        self.load_limit = load_limit
        self.workers: list[Worker] = []
        self.fds: dict[int, Worker] = {}
        self.lines: dict[Key, str] = {}  # the line of each task sent, until it begins
        self.captures: dict[Key, Capture] = {}  # sent, not ended
        self.done: dict[Key, Capture] = {}  # ended, waiting for their commit
        self.starts: dict[int, str] = {}  # worker pid -> its start time
        # whether a worker that died under a call was killed for memory: the cgroup's OOM
        # count from the call's begin
        self._oom_counter = OomCounter()
        self._oom: dict[int, OomWatch] = {}
        self._stamp = bool(output.template.stamp)  # the records' stamps read the task

    def room(self) -> int:
        return sum(w.room() for w in self.workers)

    # -- workers ------------------------------------------------------------------------------
    def spawn(self, n: int) -> list[Any]:
        events: list[Any] = []
        for _ in range(n):
            try:
                worker = Worker(self.spec, self.env, self.output.log_lines, MAX_LINE)
            except OSError as e:
                return [*events, Unloadable(f"cannot start a worker: {e.strerror or e}")]
            self.workers.append(worker)
            fds = [worker.prints_fd, worker.results_fd]
            if worker.pidfd is not None:
                fds.append(worker.pidfd)
            for fd in fds:
                self.fds[fd] = worker
                self.poller.register(fd, _POLL_IN)
            start = proc_start(worker.pid) or ""
            self.starts[worker.pid] = start
            events.append(WorkerStarted(worker.pid, start))
        return events

    def start(self, attempts: Sequence[tuple[Task, int]]) -> list[Any]:
        """Hand the tasks to the workers with room, each up to its room, in one frame of at
        most BATCH_BYTES of lines to a worker that has tasks still (a frame never waits in
        a full pipe). Tasks no worker takes now are handed back at once."""
        events: list[Any] = []
        todo = list(attempts)
        for worker in self.workers:
            room = worker.room()
            if room <= 0 or not todo:
                continue
            batch: list[tuple[int, int, str]] = []
            size = 0
            while todo and len(batch) < room:
                task, attempt = todo[0]
                size += len(task.line)
                if size > BATCH_BYTES and (batch or worker.queued):
                    break
                todo.pop(0)
                key = (task.num, attempt)
                env: Mapping[str, str] = {}
                if self._stamp:
                    env = {**self.env, TASKNUM_VAR: str(task.num), ATTEMPT_VAR: str(attempt)}
                self.captures[key] = Capture(key, self.output, env or self.env)
                batch.append((task.num, attempt, task.line))
            if not batch:
                continue
            idle = not worker.queued
            # A worker that died since it was sent its last tasks is noticed through its
            # pipes: the call it was under is then killed, the others come back.
            worker.send(batch)
            if idle:
                events.append(self._began(worker))
        if todo:
            events.append(HandedBack([(t.num, a) for t, a in todo]))
        return events

    def _began(self, worker: Worker) -> Began:
        num, attempt = worker.queued[0]
        watch = self._oom.get(worker.pid)
        if watch is None:
            watch = self._oom[worker.pid] = OomWatch(self._oom_counter)
        watch.before(reuse=OOM_REUSE)
        return Began((num, attempt), worker.pid, self.starts.get(worker.pid, ""))

    def hold(self) -> None:
        for w in self.workers:
            if not w.held:
                w.hold()  # it begins nothing more, and hands back what it holds

    def stop_workers(self) -> None:
        for w in self.workers:
            w.stop()  # no more tasks: each ends after its last result

    def signal(self, key: Key, signum: int) -> None:
        for w in self.workers:
            if w.sent == key:
                w.signal(signum)

    # -- reading ----------------------------------------------------------------------------------
    def readable(self, fd: int) -> list[Any]:
        worker = self.fds.get(fd)
        if worker is None:
            return []
        if fd == worker.prints_fd:
            if not worker.take_prints():  # its end: the worker is gone (its results say so)
                self._unwatch(fd)
            return []
        # its results, or its death seen from the process itself (a pidfd): a background
        # process it started may hold its pipes open
        dead = fd == worker.pidfd and worker.dead()
        if fd == worker.pidfd and not dead:
            return []  # a stale event of a descriptor number now another worker's
        return self._results(worker, dead)

    def _results(self, worker: Worker, dead: bool) -> list[Any]:
        events: list[Any] = []
        frames, ended = worker.frames()
        # the prints before them: a call's prints and its end mark come before its result
        worker.take_prints()
        for frame in frames:
            why = worker.refusal(frame)
            if why is not None:
                self.output.log_lines(0, 0).line(
                    f"zotsink: a frame on worker {worker.pid}'s results pipe was refused: "
                    f"{why} (a process the function forked?)".encode()
                )
                continue
            kind = frame[0]
            if kind == "ready":
                worker.loaded()
                events.append(WorkerReady(worker.pid))
            elif kind == "back":  # held: the tasks it was sent and did not begin
                keys = worker.handed_back(len(frame[2]))
                for key in keys:
                    capture = self.captures.pop(key, None)
                    if capture is not None:
                        capture.close()
                events.append(HandedBack(keys))
                if not worker.queued:
                    worker.stop()
                # else a later frame's tasks: the held worker hands them back in turn, never
                # begins one (a Began would tell of a call that never ran)
            elif kind == "unloadable":
                worker.stop()
                text = frame[2]
                log = self.output.log_lines(0, 0)  # under task number 0: the run's own lines
                for line in text.splitlines():
                    log.line(line.encode("utf-8", "surrogateescape"))
                events.append(Unloadable(text))
            elif kind == "part":  # a large result's items, ahead of its end
                capture = self.captures.get((frame[2], frame[3]))
                if capture is not None:
                    for item_kind, value in frame[4]:
                        capture.item(item_kind, value)
            else:
                events += self._returned(worker, frame)
        if ended or dead:
            events += self._gone(worker)
        return events

    def _returned(self, worker: Worker, frame: tuple[Any, ...]) -> list[Any]:
        """A function's call ended: its prints first (sent before its result), then its
        records; the next task queued in its worker begins."""
        key = worker.returned()
        capture = self.captures.pop(key, None) if key is not None else None
        if key is None or capture is None:
            return []
        seconds = worker.call_time if worker.timed == key else None
        if frame[0] == "done":
            code, why = 0, ""
            for kind, value in frame[4]:
                capture.item(kind, value)
            use = frame[5]
        else:
            use = frame[6]
            capture.drop_records()  # a result's items sent ahead of the exception are not its
            text, code = frame[4], frame[5]
            log = self.output.log_lines(*key)
            for line in text.splitlines():
                log.line(line.encode("utf-8", "surrogateescape"))
            last = text.strip().splitlines()[-1:] if text.strip() else [f"exit {code}"]
            why = f"the function raised: {last[0][:200]}"
        self.done[key] = capture
        last_line = self.output.last_line(key)
        usage = Usage(*use) if use is not None else UNMEASURED
        events: list[Any] = [Returned(key, code, seconds, usage, capture.size, why, last_line)]
        if seconds is not None:
            worker.retune(key, seconds)
        if worker.queued:
            # told at once (its timeout, a stop's grace count from now); a held worker that
            # begins it after all is not known here: if it hands it back instead, the back
            # frame comes at once and the run takes the word back before any row says it
            events.append(self._began(worker))
        elif worker.held or not worker.ready:
            worker.stop()
        return events

    def _gone(self, worker: Worker) -> list[Any]:
        """The worker's results pipe ended, or its process did: it exited, or died (its call
        under way dies with it; the tasks it had not begun come back)."""
        # what is there now (a process it started may hold the pipe); a line left unfinished
        # ends with it
        worker.take_prints(last=True)
        for fd in (worker.results_fd, worker.prints_fd, worker.pidfd):
            if fd in self.fds:
                self._unwatch(fd)
        code = worker.exit_code(KILL_AFTER)
        self.workers.remove(worker)
        oom = self._oom.pop(worker.pid, None)
        events: list[Any] = []
        key = worker.returned() if worker.queued else None
        back = worker.handed_back()
        worker.close()
        if key is not None:
            capture = self.captures.pop(key, None)
            if capture is not None:
                capture.drop_records()
                self.done[key] = capture
            how = f"signal {signame(-code)}" if code < 0 else f"exit {code}"
            why = f"its worker died ({how})"
            usage = UNMEASURED
            if oom is not None and oom.after(-code if code < 0 else None):
                usage = usage._replace(oom=True)
            events.append(Returned(key, code, None, usage, 0, why, died=True))
        if back:
            for k in back:
                capture = self.captures.pop(k, None)
                if capture is not None:
                    capture.close()
            events.append(HandedBack(back))
        events.append(WorkerGone(worker.pid, code, worker.ready))
        return events

    def tend(self, now: float) -> list[Any]:
        """Workers whose end no pidfd tells (not Linux), and workers that load too long."""
        events: list[Any] = []
        for worker in list(self.workers):
            if worker.pidfd is None and worker.dead():
                events += self._results(worker, True)
            elif worker.load_expired(now, self.load_limit):
                worker.signal(signal.SIGKILL)
                events.append(
                    Unloadable(
                        f"loading it took over {self.load_limit:g} seconds (the limit is "
                        "--task-timeout, else 600); it was killed"
                    )
                )
        return events

    def wait(self) -> float | None:
        waits: list[float] = []
        for w in self.workers:
            if w.pidfd is None:
                waits.append(1.0)  # its end is looked for, not told
            if not w.ready and not w.load_ended:
                waits.append(max(w.began + self.load_limit - _now(), 0.0))
        return min(waits) if waits else None

    def _unwatch(self, fd: int) -> None:
        self.poller.unregister(fd)
        del self.fds[fd]

    def take(self, keys: Sequence[Key]) -> list[Capture]:
        return [self.done.pop(k) for k in keys if k in self.done]

    def close(self) -> None:
        # All at once, then one deadline for all: a worker that ends late (one still
        # importing a slow module) does not make the others wait in turn.
        self._oom_counter.close()
        for worker in self.workers:
            worker.stop()
            if worker.queued:  # only after an error: nothing may keep running unseen
                worker.signal(signal.SIGKILL)
            elif not worker.ready:  # still loading: it has no call to finish
                worker.signal(signal.SIGTERM)
        deadline = _now() + KILL_AFTER
        for worker in self.workers:
            worker.exit_code(max(0.0, deadline - _now()))
            worker.take_prints(last=True)  # what it printed as it ended
            worker.close()
        self.workers.clear()
        for capture in [*self.captures.values(), *self.done.values()]:
            capture.close()
        self.captures.clear()
        self.done.clear()


def _now() -> float:
    import time

    return time.monotonic()
