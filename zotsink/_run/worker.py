"""Function workers, the run's side: ``zotsink run --call FILE.py:FUNC`` runs FUNC in
long-lived processes (:mod:`zotsink._run.serve`), and :class:`Worker` is the run's handle on
one: it starts it, sends it batches of tasks and reads its results and prints, in the
frames and marks of :mod:`zotsink._run.frames`. Here too: the checks of a ``--call`` spec
before any worker starts.

The run credits a result only to the call under way in that worker (the first task it was
sent and has not answered), from that worker's pid. Each call is answered as it ends (a slow
call holds back no earlier call's result). The run sees the worker's death from the process
itself (a pidfd), not only from its results pipe's end: then only the call under way dies
with it, and the tasks it had not begun go back to the run. Without a shared page for the
stop byte (no memory file), batches are of one task.

The prints come a line at a time into the log, cut by the one pipe line cutter, under the
number of the task whose call printed them (task 0, the run's own lines, before the first
call and between batches). After a ``T`` mark (the call left a thread alive, which may print
after it returned) what comes is logged under task 0, after a line that says which call it
followed, until a ``B`` mark says which call begins. Lines between an ``A`` and an ``R``
mark are such a thread's, whenever they come: under task 0 too, after a line naming the
call the thread outlived, never under the call under way.
"""

from __future__ import annotations

import contextlib
import marshal
import mmap
import os
import re
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from .._core.fileio import write_all
from .._core.pump import LineCutter, LineSink
from ..errors import UsageError
from .frames import (
    FLAG_SIZE,
    FRAME_HEAD,
    FRAME_SIZES,
    MARK_LINE,
    PART_SIZE,
    WORKER_VAR,
    names_file,
)

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "BATCH_BYTES",
    "BATCH_SECONDS",
    "MAX_BATCH",
    "Worker",
    "call_spec",
    "function_spec",
    "refuse_nested_run",
    "resolved_call",
]

_READ_SIZE: Final = 1 << 16
#: The work a worker is sent at once, in seconds of its calls, about: while calls are quick
#: it gets more tasks per frame (fewer frames, reads and wake-ups per task); a task queued
#: behind others in its worker waits for them about this long at most.
BATCH_SECONDS: Final = 0.005
#: The most tasks in one frame, and the most bytes of their lines in a frame sent to a
#: worker that has tasks still (a frame never waits in a full pipe).
MAX_BATCH: Final = 64
BATCH_BYTES: Final = 16384


def call_spec(spec: str) -> str:
    """``spec`` checked (``FILE.py:FUNC`` or ``package.module:FUNC``) before any worker
    starts: a typo is a usage error, not as many failures as the run has tasks."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not all(part.isidentifier() for part in name.split(".")):
        raise UsageError(
            f"--call takes FILE.py:FUNC or package.module:FUNC, not {spec!r}: "
            "for instance --call process.py:measure"
        )
    if names_file(where):
        if not os.path.isfile(where):
            raise UsageError(f"--call {spec}: {where} is not a file (give FILE.py:FUNC)")
    elif not all(part.isidentifier() for part in where.split(".")):
        raise UsageError(f"--call {spec}: {where!r} is neither a .py file nor a module name")
    return spec


def resolved_call(spec: str) -> str:
    """``spec`` with its file (``FILE.py:FUNC``) as an absolute path, links resolved, so
    that ``../measure.py:measure`` and, from that directory, ``measure.py:measure`` are one
    spec; a module's spec as it is. A relative path resolves against the current
    directory."""
    where, sep, name = spec.rpartition(":")
    if sep and where and names_file(where):
        return f"{os.path.realpath(where)}:{name}"
    return spec


def function_spec(function: Callable[..., Any]) -> str:
    """The ``--call`` spec that loads ``function`` in a worker: a top-level function of an
    importable module, or of the script run as ``__main__`` (loaded under another name, so
    that its ``if __name__ == "__main__":`` part does not run again in the worker)."""
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", "")
    if not module or not qualname or "<" in qualname:
        raise UsageError(
            f"function {function!r}: give a function defined at the top level of a module "
            "or script (workers import it by name; a lambda or a nested function has none)"
        )
    if module == "__main__":
        path = getattr(sys.modules.get("__main__"), "__file__", None)
        if not path:
            raise UsageError(
                f"function {qualname}: defined in an interactive session, which a worker "
                "cannot import: put it in a file and give FILE.py:FUNC"
            )
        return f"{os.path.abspath(path)}:{qualname}"
    return f"{module}:{qualname}"


def refuse_nested_run() -> None:
    """Refuse a run started inside a worker process: a script that calls ``run_tasks``
    at its top level, without a ``__main__`` guard, would start it again in every worker
    that imports it, each starting workers of its own. A process FUNC starts is free to."""
    if os.environ.get(WORKER_VAR) == str(os.getpid()):
        raise UsageError(
            "a run was started inside a --call worker, while it imported the function's "
            "module or ran the function: each worker would start a run of its own. Put the "
            'run_tasks(...) call of the script under `if __name__ == "__main__":`'
        )


class Worker:
    """The run's handle on one worker process; its prints go, as lines of at most
    ``max_line`` bytes, where ``prints_to(tasknum, attempt)`` says (the log).

    The tasks sent and not ended wait in :attr:`queued`, in the order the worker calls
    them: the first is the call under way (or about to begin)."""

    def __init__(
        self,
        spec: str,
        env: Mapping[str, str],
        prints_to: Callable[[int, int], LineSink],
        max_line: int,
    ) -> None:
        import subprocess  # here: the worker process itself never needs it

        tasks_r, self._tasks_w = os.pipe()
        results_r, results_w = os.pipe()
        flag_fd, self._held = _flag_page()
        # Where the zotsink package is (a directory or zotsink.pyz), then this process's
        # import path: the worker imports zotsink's serve module, and FUNC's, as the run could.
        home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = [home] + [os.path.abspath(p) for p in sys.path if p]
        self._mark = b"\0zotsink " + os.urandom(8).hex().encode() + b" "
        code = (
            # the current directory last, as -c would have it without -P (below)
            f"import os, sys; sys.path[:0] = {path!r}; sys.path.append(os.getcwd()); "
            "from zotsink._run.serve import main; "
            f"main({spec!r}, {tasks_r}, {results_w}, {self._mark!r}, {flag_fd})"
        )
        fds = (tasks_r, results_w) if flag_fd < 0 else (tasks_r, results_w, flag_fd)
        try:
            self.popen: subprocess.Popen[bytes] = subprocess.Popen(
                # -P (3.11+): no current directory on the path at start, where a file of the
                # user's named like a stdlib module (linecache.py, which 3.13 imports for
                # `-c` itself) would be found first
                [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-c", code],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=fds,
                start_new_session=True,
                env=dict(env),
            )
        finally:
            for fd in fds:
                os.close(fd)
        assert self.popen.stdout is not None
        self.prints = self.popen.stdout  # the worker's stdout and stderr, one pipe
        self.prints_fd = self.prints.fileno()
        self.results = os.fdopen(results_r, "rb", buffering=0)
        self.results_fd = results_r
        os.set_blocking(self.results_fd, False)
        os.set_blocking(self.prints_fd, False)
        self._buf = bytearray()
        self.pid = self.popen.pid
        self.pidfd = _pidfd(self.pid)  # readable when the process ended (None: not Linux)
        self.began = time.monotonic()  # when it began to load FUNC
        #: Sent and not ended, in calling order: (tasknum, attempt). The first is the call
        #: under way.
        self.queued: deque[tuple[int, int]] = deque()
        self.ready = False
        self.closed = False
        self.held = False  # told to begin nothing more (see hold)
        #: Tasks to send at once: one, more while calls are quick (see retune).
        self.batch = 1
        #: Seconds a call takes, recent ones weigh most (as the worker tells), and the last
        #: call it told of.
        self.call_time = 0.0
        self.timed: tuple[int, int] | None = None
        self.load_ended = False  # its load was ended (too long): once
        self._cutter = LineCutter(max_line)
        self._prints_to = _Prints(self._mark, prints_to, self)

    @property
    def batching(self) -> bool:
        """Whether it can be sent more than one task at a time: it can be held (a page
        shared with it, where the run says stop)."""
        return self._held is not None

    @property
    def sent(self) -> tuple[int, int] | None:
        """The call under way (or about to begin): the first task sent and not ended."""
        return self.queued[0] if self.queued else None

    def room(self) -> int:
        """Tasks to send it now: none until it is down to half its batch."""
        if not self.ready or self.closed or self.held:
            return 0
        queued = len(self.queued)
        return self.batch - queued if queued <= self.batch // 2 else 0

    def loaded(self) -> None:
        """It loaded the function: it takes tasks."""
        self.ready = True

    def retune(self, call: tuple[int, int], seconds: float) -> None:
        """A call of it ended after ``seconds`` (the run's measure, when its end mark said
        nothing): more tasks at a time while calls are quick, so that a task queued behind
        others waits for them about :data:`BATCH_SECONDS` at most."""
        if not self.batching:
            return
        if self.timed != call:
            self.took(call, seconds)
        mean = self.call_time
        fits = int(BATCH_SECONDS / mean) if mean > 0 else MAX_BATCH
        self.batch = max(1, min(self.batch * 2, fits, MAX_BATCH))

    def load_expired(self, now: float, limit: float) -> bool:
        """Whether it has loaded the function for longer than ``limit`` seconds (once)."""
        if self.ready or self.load_ended or now < self.began + limit:
            return False
        self.load_ended = True
        return True

    def send(self, tasks: list[tuple[int, int, str]]) -> bool:
        """Hand the worker tasks, called in this order: (tasknum, attempt, line). False when
        it is gone."""
        for num, attempt, _line in tasks:
            self.queued.append((num, attempt))
        data = marshal.dumps(tasks)
        try:
            # whole: a signal may cut a long write short, and a frame cut is no frame
            write_all(self._tasks_w, FRAME_HEAD.pack(len(data)) + data)
        except OSError:  # BrokenPipeError: it is gone
            return False
        return True

    def took(self, call: tuple[int, int], seconds: float) -> None:
        """A call took ``seconds`` (the worker's own measure, in its end mark; or the run's,
        when no mark came)."""
        self.call_time = 0.8 * self.call_time + 0.2 * seconds if self.timed else seconds
        self.timed = call

    def holds(self, num: int, attempt: int) -> bool:
        """Whether the task ``num.attempt`` was sent to it and has not ended."""
        queued = self.queued
        key = (num, attempt)
        for i in range(min(2, len(queued))):  # the call under way or the next: at once
            if queued[i] == key:
                return True
        return key in queued

    def frames(self) -> tuple[list[tuple[Any, ...]], bool]:
        """The whole frames the worker sent since the last look, and whether its results
        pipe has ended (the worker is gone)."""
        ended = False
        while True:
            try:
                chunk = os.read(self.results_fd, _READ_SIZE)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                ended = True
                break
            self._buf += chunk
            if len(self._buf) > PART_SIZE + _READ_SIZE:
                break  # a large result: this much now, the rest at the next poll
        out = []
        buf = self._buf
        at = 0
        while len(buf) - at >= FRAME_HEAD.size:
            (size,) = FRAME_HEAD.unpack_from(buf, at)
            if len(buf) - at < FRAME_HEAD.size + size:
                break
            try:
                frame = marshal.loads(buf[at + FRAME_HEAD.size : at + FRAME_HEAD.size + size])
            except (ValueError, EOFError, TypeError):
                frame = ("garbled",)
            out.append(frame if isinstance(frame, tuple) and frame else ("garbled",))
            at += FRAME_HEAD.size + size
        if at:
            del buf[:at]
        return out, ended

    def refusal(self, frame: tuple[Any, ...]) -> str | None:
        """Why ``frame`` is not this worker's answer (None: it is): it must come from the
        worker's own pid and, for a result, name the task the worker calls now (the first
        it was sent and has not answered); tasks handed back must be those it holds."""
        kind = frame[0]
        size = FRAME_SIZES.get(kind)
        if size is None or len(frame) != size:
            return f"a frame of no known kind ({str(kind)[:40]!r})"
        if frame[1] != self.pid:
            return f"a {kind!r} frame from process {frame[1]}, not the worker ({self.pid})"
        if kind == "back":
            back = [tuple(x) for x in frame[2]]
            held = list(self.queued)[: len(back)]
            if not back or back != held:
                return f"tasks handed back ({frame[2]!r:.80}) that are not those it holds"
        elif size > 3:
            if self.sent is None:
                return f"a result for task {frame[2]}.{frame[3]} while it ran none"
            if (frame[2], frame[3]) != self.sent:
                num, attempt = self.sent
                return f"a result for task {frame[2]}.{frame[3]}, not {num}.{attempt}"
        return None

    def dead(self) -> bool:
        """Whether the worker process has ended (its pipes may be held by what it started)."""
        return self.popen.poll() is not None

    def take_prints(self, *, last: bool = False) -> bool:
        """What the worker printed since the last look, into the log; whether anything
        came (nothing when the pipe was said to be readable: its end). ``last``: the
        worker is gone, a line left unfinished ends with it."""
        came = False
        while True:
            try:
                chunk = os.read(self.prints_fd, _READ_SIZE)
            except OSError:  # BlockingIOError: nothing more now
                break
            if not chunk:
                break
            came = True
            self._cutter.feed(chunk, self._prints_to)
        if last:
            self._cutter.finish(self._prints_to, "")
        return came

    def returned(self) -> tuple[int, int] | None:
        """The call under way ended (its result came, or the worker died): its task, taken
        off; the next queued is the call under way."""
        call = self.sent
        self._prints_to.returned(call)
        if self.queued:
            self.queued.popleft()
        return call

    def handed_back(self, n: int | None = None) -> list[tuple[int, int]]:
        """The first ``n`` tasks queued (None: all), not begun, taken off (the worker handed
        them back, or it is gone)."""
        n = len(self.queued) if n is None else n
        return [self.queued.popleft() for _ in range(min(n, len(self.queued)))]

    def hold(self) -> None:
        """Tell the worker to begin no more calls: it hands back the tasks it holds (a
        ``back`` frame) once the call under way ends."""
        self.held = True
        if self._held is not None:
            self._held[0] = 1

    def exit_code(self, wait: float) -> int:
        """Its exit status, once its results pipe ended: a worker that closed it and lives
        on after ``wait`` seconds is no worker: it is killed."""
        import subprocess  # as in __init__

        try:
            return self.popen.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.popen.wait()

    def stop(self) -> None:
        """No more tasks: the worker ends when it has sent the last result."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                os.close(self._tasks_w)

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
            os.killpg(self.popen.pid, signum)

    def close(self) -> None:
        self.stop()
        for f in (self.results, self.prints):
            f.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if self._held is not None:
            self._held.close()
            self._held = None


#: A mark's line: its letter (B: a call begins; N: one ended and the next of its batch
#: begins; E: one ended; T: one ended and left a thread alive; A, R: an aside of a thread
#: that outlived the call named begins, ends), the call's task and attempt, for N the next
#: call's, and for an end the microseconds the call took.


class _Prints:
    """A worker's prints, each where its marks say: under the task whose call made it,
    else under task 0 (see the module's docstring). A
    :class:`~zotsink._core.pump.LineSink`. Most calls print nothing: a mark only notes
    whose the next lines are, and where they go is looked up when a line comes."""

    def __init__(
        self, mark: bytes, prints_to: Callable[[int, int], LineSink], worker: Worker
    ) -> None:
        self._mark = mark
        self._sinks = prints_to
        self._worker = worker
        self.call: tuple[int, int] | None = None  # the call whose prints come now
        self._to = prints_to(0, 0)  # where they go (task 0 until a call begins)
        self._to_call: tuple[int, int] | None = None  # the call self._to is for
        self._after: tuple[int, int] | None = None  # a call that left a thread alive
        self._told = False  # the line that says what follows it was written
        self._aside: tuple[int, int] | None = None  # the call an aside's thread outlived
        self._aside_told: tuple[int, int] | None = None  # the aside's call last named
        self._long: LineSink | None = None  # where the line over the limit under way goes

    def lines(self, block: bytes) -> None:
        at = block.find(self._mark)
        while at >= 0:
            if at:
                head = block[:at]
                self._out(head if head.endswith(b"\n") else head + b"\n")
            end = at + len(self._mark)
            m = MARK_LINE.match(block, end)
            if m is None:  # no mark of ours: a line that only begins like one
                self._out(block[at:end])
                block = block[end:]
            else:
                self._switch(m)
                block = block[m.end() :]
            at = block.find(self._mark)
        if block:
            self._out(block)

    def _switch(self, m: re.Match[bytes]) -> None:
        what = m.group(1)
        if what == b"A":  # a thread's lines: the call under way stays as it is
            self._aside = (int(m.group(2)), int(m.group(3)))
            return
        if what == b"R":
            self._aside = None
            return
        if m.group(6) is not None:
            self._worker.took((int(m.group(2)), int(m.group(3))), int(m.group(6)) / 1e6)
        if what == b"B":
            self.call = (int(m.group(2)), int(m.group(3)))
            self._after = None
        elif what == b"N":
            self.call = (int(m.group(4)), int(m.group(5)))
            self._after = None
        else:
            self.call = None
            self._after = (int(m.group(2)), int(m.group(3))) if what == b"T" else None
            self._told = False

    def _sink(self) -> LineSink:
        """Where the lines go now: the call under way, if the worker was sent it."""
        call = self.call
        if call is not None and not self._worker.holds(*call):
            call = self.call = None  # a call the worker was not sent: task 0's
        if call != self._to_call:
            self._to = self._sinks(*call) if call is not None else self._sinks(0, 0)
            self._to_call = call
        return self._to

    def _out(self, block: bytes) -> None:
        if self._aside is not None:
            to = self._sinks(0, 0)
            if self._aside != self._aside_told:
                self._aside_told = self._aside
                to.lines(_outlived_note(self._aside))
            to.lines(block)
            return
        to = self._sink()
        if self._to_call is None:
            self._aside_told = None  # other lines of task 0 came between: name it again
        if self._after is not None and not self._told:
            self._told = True
            to.lines(_outlived_note(self._after))
        to.lines(block)

    def returned(self, call: tuple[int, int] | None) -> None:
        """``call`` ended (its result came, or its worker died): what follows is not its,
        should its end mark not have come (FUNC closed its stdout)."""
        if call is not None and self.call == call:
            self.call = None

    def long_begin(self, head: bytes) -> None:
        self._long = self._sinks(0, 0) if self._aside is not None else self._sink()
        self._long.long_begin(head)

    def long_more(self, piece: bytes) -> None:
        (self._long or self._to).long_more(piece)

    def long_end(self, size: int, how: str) -> None:
        (self._long or self._to).long_end(size, how)
        self._long = None


def _outlived_note(call: tuple[int, int]) -> bytes:
    """The line before an aside's lines in the log: which call the thread outlived."""
    if call == (0, 0):
        return b"zotsink: printed by a thread the worker started as it loaded the function:\n"
    num, attempt = call
    return (
        f"zotsink: printed by the worker after the call of task {num}.{attempt} returned "
        "(by a thread it started?):\n"
    ).encode()


def _flag_page() -> tuple[int, mmap.mmap | None]:
    """A page shared with a worker (a memory file): the descriptor to pass it and the
    run's map of it; (-1, None) where there are no memory files (one task at a time)."""
    try:
        fd = os.memfd_create("zotsink-worker", 0)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return -1, None
    try:
        os.ftruncate(fd, FLAG_SIZE)
        return fd, mmap.mmap(fd, FLAG_SIZE)
    except OSError:
        os.close(fd)
        return -1, None


def _pidfd(pid: int) -> int | None:
    """A descriptor that polls readable when process ``pid`` ends (Linux 5.3 and later)."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined,no-any-return]
    except (AttributeError, OSError):
        return None
