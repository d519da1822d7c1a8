"""Function workers: ``zotsink run --call FILE.py:FUNC`` runs FUNC in long-lived processes.

Starting a Python interpreter and importing the user's libraries for every task is most of
the CPU a quick Python task costs. A worker starts once, imports FUNC's module once, then
calls ``FUNC(line)`` for each task it is sent. This module owns both ends of the worker's
protocol: :func:`main` (the worker process) and :class:`Worker` (the run's handle on it).

The worker's descriptors: stdin is ``/dev/null`` (FUNC must not read the task stream);
stdout and stderr are one pipe that the run copies into the log under the task's number;
two more pipes carry frames: tasks in, results out. A frame is a 4-byte big-endian length
and a :mod:`marshal` dump (both ends are the same interpreter, and marshal reads only plain
values: it cannot run code the way unpickling can).

Frames, worker to run, each naming the worker's pid: ``("ready", pid)`` once FUNC is
loaded, ``("unloadable", pid, text)`` when it cannot be, and for each task
``("done", pid, tasknum, attempt, items)`` or ``("raised", pid, tasknum, attempt, traceback,
exit)``. The run credits a result only to the task it sent that worker, from that worker's
pid (a process FUNC forked, which came back into the worker's loop, never answers: it exits
at once). ``items`` are the records: ``(0, text)`` for lines, ``(1, {column: value})`` for
one record by name, values reduced to what marshal carries (other values, NumPy's among
them, become the text a record holds for them: :func:`~zotsink._core.records.value_text`).
Run to worker: ``(tasknum, attempt, line)``; end of the stream: stop. Both frame pipes are
the worker's alone: what FUNC starts does not inherit them, and the run sees the worker's
death from the process itself (a pidfd), not only from its results pipe's end.

The prints come a line at a time into the log, cut by the one pipe line cutter, under the
number of the task the worker was sent (task 0, the run's own lines, before the first task
and between tasks). A call that leaves a thread alive may have it print after the call
returned: then the worker writes a mark into its prints after flushing them (a line with a
random token of the run's, which no print holds by chance), and another when the next call
begins; what comes between the two is logged under task 0, after a line that says which
call it followed. A call's prints (and its mark) are flushed before its result, so the
result frame is where they end.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import marshal
import os
import signal
import struct
import sys
import time
import traceback  # before FUNC's module, which may shadow what traceback imports
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any, Final

from .._core.pump import LineCutter, LineSink
from .._core.records import value_text
from .._core.stamp import ATTEMPT_VAR, TASKNUM_VAR
from .._core.stop import leave_stops_to_parent
from ..errors import UsageError

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "WORKER_VAR",
    "Worker",
    "call_spec",
    "function_spec",
    "main",
    "refuse_nested_run",
    "resolved_call",
]

_LEN: Final = struct.Struct(">I")
#: Kinds of result items: text of lines (its last piece), one record by name, a piece of
#: text that the next item goes on with.
LINES: Final = 0
RECORD: Final = 1
PIECE: Final = 2
#: Bytes of result items in one frame, about: a large result comes in frames of this size,
#: held by the run as a command's output is (memory, then a file), never copied whole.
PART_SIZE: Final = 1 << 20
#: The plain value types marshal carries as they are (exactly these: marshal refuses a
#: subclass, or dumps a NumPy scalar's raw buffer); other values become their record text.
_PLAIN: Final = frozenset((str, int, float, bool, bytes, type(None)))
#: Set by a worker process to its own pid: a run started inside it is refused.
WORKER_VAR: Final = "ZOTSINK_WORKER_PID"
_READ_SIZE: Final = 1 << 16
#: The length of each kind of frame a worker sends (see the module's docstring).
_SIZES: Final = {"ready": 2, "unloadable": 3, "part": 5, "done": 5, "raised": 6}


def call_spec(spec: str) -> str:
    """``spec`` checked (``FILE.py:FUNC`` or ``package.module:FUNC``) before any worker
    starts: a typo is a usage error, not as many failures as the run has tasks."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not all(part.isidentifier() for part in name.split(".")):
        raise UsageError(
            f"--call takes FILE.py:FUNC or package.module:FUNC, not {spec!r}: "
            "for instance --call process.py:measure"
        )
    if _is_file(where):
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
    if sep and where and _is_file(where):
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


def _is_file(where: str) -> bool:
    return where.endswith(".py") or os.sep in where


def _load(spec: str) -> Callable[[str], Any]:
    where, _, name = spec.rpartition(":")
    if _is_file(where):
        path = os.path.abspath(where)
        modname = os.path.splitext(os.path.basename(path))[0]
        if not modname.isidentifier() or _taken(modname, path):
            # a name of its own: FUNC's file must not stand in for the module it is named
            # like (textwrap.py) when the worker or FUNC's libraries import that one
            modname = "zotsink_call_" + str(abs(hash(path)))
        # as `python FILE.py` would: the file's directory first, for its own imports
        sys.path.insert(0, os.path.dirname(path))
        loader = importlib.util.spec_from_file_location(modname, path)
        if loader is None or loader.loader is None:
            raise ImportError(f"cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(loader)
        sys.modules[modname] = module  # for pickling, dataclasses and the like
        loader.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())  # as `python -m` would
        module = importlib.import_module(where)
    obj: Any = module
    for part in name.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{name} in {where} is a {type(obj).__name__}, not a function")
    return obj  # type: ignore[no-any-return]


def _taken(modname: str, path: str) -> bool:
    """Whether ``modname`` names a module already loaded, of the standard library, or
    another file importable from the path (asked before FUNC's directory joins it)."""
    if modname in sys.modules or modname in getattr(sys, "stdlib_module_names", ()):
        return True
    try:
        found = importlib.util.find_spec(modname)
    except (ImportError, ValueError):
        return True
    return found is not None and found.origin != path


def _value(v: Any) -> Any:
    return v if type(v) in _PLAIN else value_text(v)


def _lines(v: str | bytes) -> str | bytes:
    """A str or bytes result as marshal carries it (a subclass, NumPy's ``str_``, as its
    plain characters)."""
    if type(v) is str or type(v) is bytes:
        return v
    return str.__str__(v) if isinstance(v, str) else bytes(v)


def _items(result: Any) -> Iterator[tuple[int, Any]]:
    """FUNC's return value as result items (see the module's docstring)."""
    if result is None:
        return
    if isinstance(result, (str, bytes)):
        yield from _text(result)
    elif isinstance(result, Mapping):
        yield (RECORD, {str(k): _value(v) for k, v in result.items()})
    elif isinstance(result, Iterable):
        for r in result:
            if r is None:
                continue
            if isinstance(r, (str, bytes)):
                yield from _text(r)
            elif isinstance(r, Mapping):
                yield (RECORD, {str(k): _value(v) for k, v in r.items()})
            else:
                raise TypeError(
                    f"a task's records are str or mappings; this one is a {type(r).__name__}"
                )
    else:
        raise TypeError(
            "the function returned a "
            f"{type(result).__name__}: return None, a str, a mapping or an iterable of those"
        )


def _text(v: str | bytes) -> Iterator[tuple[int, Any]]:
    """A str or bytes result as items: one, or pieces of a frame's size when it is large."""
    if len(v) <= PART_SIZE:
        yield (LINES, _lines(v))
        return
    for at in range(0, len(v), PART_SIZE):
        last = at + PART_SIZE >= len(v)
        yield (LINES if last else PIECE, _lines(v[at : at + PART_SIZE]))


def _reply(results: IO[bytes], me: int, num: int, attempt: int, result: Any) -> tuple[Any, ...]:
    """The items of FUNC's result: those past a frame's size sent ahead as ``part`` frames,
    the rest as the ``done`` frame returned (to be sent once the prints are flushed)."""
    items: list[tuple[int, Any]] = []
    size = 0
    for item in _items(result):
        items.append(item)
        value = item[1]
        size += len(value) if item[0] != RECORD else 64 + 32 * len(value)
        if size >= PART_SIZE:
            _send(results, ("part", me, num, attempt, items))
            items, size = [], 0
    return ("done", me, num, attempt, items)


def _send(f: IO[bytes], message: tuple[Any, ...]) -> None:
    data = marshal.dumps(message)
    f.write(_LEN.pack(len(data)) + data)
    f.flush()


def _receive(f: IO[bytes]) -> tuple[Any, ...] | None:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (size,) = _LEN.unpack(head)
    data = f.read(size)
    if len(data) < size:
        return None
    return marshal.loads(data)  # type: ignore[no-any-return]


def _warm_traceback() -> None:
    """Format one traceback before FUNC's module is loaded: traceback imports what it
    formats with (linecache, tokenize, and more in newer Pythons) only then, and a module of
    the user's named like one of them, on the import path, would be found instead."""
    try:
        raise ValueError("warm")
    except ValueError as e:
        traceback.format_exception(type(e), e, e.__traceback__)


def main(spec: str, tasks_fd: int, results_fd: int, mark: bytes = b"") -> None:
    """The worker process: load FUNC, then call it for each task until the stream ends."""
    # Stop signals are the run's to handle: a walltime warning lets the call in progress
    # finish within the run's --grace; the run ends the worker if it does not.
    leave_stops_to_parent()
    _end_with_parent()
    me = os.getpid()
    os.environ[WORKER_VAR] = str(me)  # for refuse_nested_run
    # not inherited by what FUNC starts (os.system("helper &")): the worker's end must end
    # its results pipe, and nothing else may read its tasks
    os.set_inheritable(tasks_fd, False)
    os.set_inheritable(results_fd, False)
    tasks = os.fdopen(tasks_fd, "rb")
    results = os.fdopen(results_fd, "wb")
    _warm_traceback()
    try:
        func = _load(spec)
    except BaseException:
        _not_forked(me, 1)
        _flush_prints()
        _send(results, ("unloadable", me, traceback.format_exc(limit=-8)))
        return
    _not_forked(me, 0)
    _flush_prints()
    _send(results, ("ready", me))
    marked = False  # an end mark was written: the next call begins with a mark
    while True:
        message = _receive(tasks)
        _not_forked(me, 0)  # a fork that read on is no worker: it answers nothing
        if message is None:
            return
        num, attempt, line = message
        os.environ[TASKNUM_VAR] = str(num)
        os.environ[ATTEMPT_VAR] = str(attempt)
        if marked:  # a thread of an earlier call lives on: what follows is this call's
            _mark(mark, b"B")
            marked = False
        try:
            reply: tuple[Any, ...] = _reply(results, me, num, attempt, func(line))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            _not_forked(me, code)
            if code == 0:
                reply = ("done", me, num, attempt, [])
            else:
                if e.code is not None and not isinstance(e.code, int):
                    print(e.code, file=sys.stderr)
                reply = ("raised", me, num, attempt, "", code)
        except BaseException as e:
            _not_forked(me, 1)
            # the traceback from FUNC's frame on: the worker's own frame is no news to anyone
            tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
            text = "".join(traceback.format_exception(type(e), e, tb))
            reply = ("raised", me, num, attempt, text, 1)
        _not_forked(me, 0)  # a child FUNC forked returned here: it ends, unheard
        _flush_prints()  # before the result: the run reads the prints first
        if mark and _threads_left():  # what they print later is not this call's
            _mark(mark, b"E")
            marked = True
        try:
            _send(results, reply)
        except ValueError as e:  # marshal: an unmarshallable value inside a record
            why = f"the records could not be passed back: {e}\n"
            _send(results, ("raised", me, num, attempt, why, 1))


def _threads_left() -> bool:
    """Whether a thread other than the worker's lives on (a call started it)."""
    threading = sys.modules.get("threading")
    return threading is not None and threading.active_count() > 1


def _mark(mark: bytes, what: bytes) -> None:
    """What was printed so far flushed, then the mark of a call's begin or end."""
    _flush_prints()
    if mark:
        with contextlib.suppress(OSError):  # FUNC closed its stdout: its prints are lost too
            os.write(1, mark + what + b"\n")


def _not_forked(me: int, code: int) -> None:
    """A process FUNC forked that came back into the worker's code (it returned, or called
    ``sys.exit``) ends here with ``code``: only the worker reads tasks and answers."""
    if os.getpid() != me:
        _flush_prints()
        os._exit(code & 0xFF)


def _end_with_parent() -> None:
    """Linux: SIGTERM when the run dies (SIGKILL, a node's OOM killer), so that a call does
    not go on for hours with nobody to take its result. Elsewhere the worker ends at its
    next task, when it finds the task stream closed."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the run died before prctl took effect
        os._exit(1)


def _flush_prints() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken by FUNC
            stream.flush()


class Worker:
    """The run's handle on one worker process; its prints go, as lines of at most
    ``max_line`` bytes, where ``prints_to(tasknum, attempt)`` says (the log)."""

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
        # Where the zotsink package is (a directory or zotsink.pyz), then this process's
        # import path: the worker imports this module, and FUNC's, as the run could.
        home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = [home] + [os.path.abspath(p) for p in sys.path if p]
        self._mark = b"\0zotsink " + os.urandom(8).hex().encode() + b" "
        code = (
            # the current directory last, as -c would have it without -P (below)
            f"import os, sys; sys.path[:0] = {path!r}; sys.path.append(os.getcwd()); "
            "from zotsink._run.worker import main; "
            f"main({spec!r}, {tasks_r}, {results_w}, {self._mark!r})"
        )
        try:
            self.popen: subprocess.Popen[bytes] = subprocess.Popen(
                # -P (3.11+): no current directory on the path at start, where a file of the
                # user's named like a stdlib module (linecache.py, which 3.13 imports for
                # `-c` itself) would be found first
                [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-c", code],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(tasks_r, results_w),
                start_new_session=True,
                env=dict(env),
            )
        finally:
            os.close(tasks_r)
            os.close(results_w)
        assert self.popen.stdout is not None
        self.prints = self.popen.stdout  # the worker's stdout and stderr, one pipe
        self.prints_fd = self.prints.fileno()
        self.results = os.fdopen(results_r, "rb", buffering=0)
        self.results_fd = results_r
        os.set_blocking(self.results_fd, False)
        os.set_blocking(self.prints_fd, False)
        self._tasks = os.fdopen(self._tasks_w, "wb", buffering=0)
        self._buf = bytearray()
        self.pid = self.popen.pid
        self.pidfd = _pidfd(self.pid)  # readable when the process ended (None: not Linux)
        self.began = time.monotonic()  # when it began to load FUNC
        self.sent: tuple[int, int] | None = None  # (tasknum, attempt) of the call it runs
        self.ready = False
        self.closed = False
        self._cutter = LineCutter(max_line)
        self._prints_to = _Prints(self._mark, prints_to)
        self.task: Any = None  # what the run calls the task it runs (None: idle)

    def send(self, task: Any, num: int, attempt: int, line: str) -> bool:
        """Hand the worker a task (``task``: the run's name for it, kept until the call
        ends); False when it is gone."""
        self.task = task
        self.sent = (num, attempt)
        self._prints_to.send(num, attempt)
        data = marshal.dumps((num, attempt, line))
        try:
            self._tasks.write(_LEN.pack(len(data)) + data)
        except (BrokenPipeError, OSError):
            return False
        return True

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
        while len(self._buf) >= _LEN.size:
            (size,) = _LEN.unpack_from(self._buf)
            if len(self._buf) < _LEN.size + size:
                break
            try:
                frame = marshal.loads(bytes(self._buf[_LEN.size : _LEN.size + size]))
            except (ValueError, EOFError, TypeError):
                frame = ("garbled",)
            out.append(frame if isinstance(frame, tuple) and frame else ("garbled",))
            del self._buf[: _LEN.size + size]
        return out, ended

    def refusal(self, frame: tuple[Any, ...]) -> str | None:
        """Why ``frame`` is not this worker's answer (None: it is): it must come from the
        worker's own pid and, for a result, name the task the worker was sent."""
        kind = frame[0]
        size = _SIZES.get(kind)
        if size is None or len(frame) != size:
            return f"a frame of no known kind ({str(kind)[:40]!r})"
        if frame[1] != self.pid:
            return f"a {kind!r} frame from process {frame[1]}, not the worker ({self.pid})"
        if size > 3:
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
        came (nothing when the pipe was said to be readable: its end). ``last``: the call
        ended, a line it left unfinished ends with it."""
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

    def returned(self) -> Any:
        """The call in progress ended (its result came, or the worker is gone): its last
        prints are taken, and the task it ran is handed back (None: it ran none)."""
        self.take_prints(last=True)  # still under its task: sent before the result
        task, self.task = self.task, None
        self.sent = None
        self._prints_to.returned()
        return task

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
                self._tasks.close()

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


class _Prints:
    """A worker's prints, each where its marks say: under the task whose call made it,
    else under task 0 (see the module's docstring). A
    :class:`~zotsink._core.pump.LineSink`."""

    def __init__(self, mark: bytes, prints_to: Callable[[int, int], LineSink]) -> None:
        self._mark = mark
        self._sinks = prints_to
        self._to = prints_to(0, 0)  # task 0 until a call begins
        self.sent: tuple[int, int] | None = None  # the call the worker was sent
        self._after: tuple[int, int] | None = None  # the call that returned last
        self._told = False  # the line that says what follows it was written

    def send(self, num: int, attempt: int) -> None:
        """A call was sent: its prints are its own, at once, or after its begin mark when
        an earlier call's thread may still print."""
        self.sent = (num, attempt)
        if self._after is None:
            self._to = self._sinks(num, attempt)

    def lines(self, block: bytes) -> None:
        at = block.find(self._mark)
        while at >= 0:
            if at:
                head = block[:at]
                self._out(head if head.endswith(b"\n") else head + b"\n")
            # a mark's line is the mark, one letter (B: a call begins, E: one ended), "\n"
            end = at + len(self._mark)
            self._switch(block[end : end + 1])
            block = block[end + 2 :]
            at = block.find(self._mark)
        if block:
            self._out(block)

    def _switch(self, what: bytes) -> None:
        if what == b"B" and self.sent is not None:
            self._to = self._sinks(*self.sent)
            self._after = None
        elif what == b"E":
            self._after, self.sent = self.sent, None
            self._to = self._sinks(0, 0)
            self._told = False

    def _out(self, block: bytes) -> None:
        if self._after is not None and not self._told and self._to is not None:
            num, attempt = self._after
            self._told = True
            self._to.lines(
                f"zotsink: printed by the worker after the call of task {num}.{attempt} "
                "returned (by a thread it started?):\n".encode()
            )
        self._to.lines(block)

    def returned(self) -> None:
        """The call ended (its result came, or its worker died): what follows is not its."""
        if self.sent is None:
            return  # its end mark came
        self.sent = None
        self._to = self._sinks(0, 0)

    def long_begin(self, head: bytes) -> None:
        self._to.long_begin(head)

    def long_more(self, piece: bytes) -> None:
        self._to.long_more(piece)

    def long_end(self, size: int, how: str) -> None:
        self._to.long_end(size, how)


def _pidfd(pid: int) -> int | None:
    """A descriptor that polls readable when process ``pid`` ends (Linux 5.3 and later)."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined,no-any-return]
    except (AttributeError, OSError):
        return None
