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
exit)``. The run credits a result only to the call under way in that worker (the first task
it was sent and has not answered), from that worker's pid (a process FUNC forked, which
came back into the worker's loop, never answers: it exits at once). ``items`` are the
records: ``(0, text)`` for lines, ``(1, {column: value})`` for one record by name, values
reduced to what marshal carries (other values, NumPy's among them, become the text a record
holds for them: :func:`~zotsink._core.records.value_text`). Run to worker: a batch, a list of
``(tasknum, attempt, line)``, called in that order, each answered as its call ends (a slow
call holds back no earlier call's result); end of the stream: stop. Both frame pipes are the
worker's alone: what FUNC starts does not inherit them, and the run sees the worker's death
from the process itself (a pidfd), not only from its results pipe's end: then only the call
under way dies with it, and the tasks it had not begun go back to the run.

A page shared with the run (a memory file; without one, batches are of one task) carries one
byte the run sets at a stop: the worker begins no more calls, and sends the tasks it holds
and did not begin back in a ``("back", pid, [(tasknum, attempt), ...])`` frame.

The prints come a line at a time into the log, cut by the one pipe line cutter, under the
number of the task whose call printed them (task 0, the run's own lines, before the first
call and between batches). The worker marks each call's end in its prints, after flushing
them (a line with a random token of the run's, which no print holds by chance, a letter and
the call's task and attempt): ``N`` when the next call of the batch begins at once (and
which), ``E`` when none does, ``T`` when the call left a thread alive, which may print
after it returned: what comes after it is logged under task 0, after a line that says which
call it followed, until a ``B`` mark says which call begins. A call's prints and its mark
are flushed before its result, so the run, which reads the prints before crediting a
result, never takes one call's lines for another's.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import marshal
import mmap
import os
import re
import signal
import struct
import sys
import time
import traceback  # before FUNC's module, which may shadow what traceback imports
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any, Final

from .._core.fileio import write_all
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
_SIZES: Final = {"ready": 2, "unloadable": 3, "back": 3, "part": 5, "done": 5, "raised": 6}


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
    if type(result) is str and len(result) <= PART_SIZE:  # the common case, at once
        return ("done", me, num, attempt, [(LINES, result)])
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


def main(spec: str, tasks_fd: int, results_fd: int, mark: bytes = b"", flag_fd: int = -1) -> None:
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
    held = _held_flag(flag_fd)  # before FUNC loads: a page that cannot be mapped ends it here
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
    going = False  # the last end mark said the next call of the batch begins at once
    while True:
        batch = _receive(tasks)
        _not_forked(me, 0)  # a fork that read on is no worker: it answers nothing
        if batch is None:
            return
        for at, (num, attempt, line) in enumerate(batch):
            if not going:
                if held is not None and held[0]:  # the run stops: begin nothing more
                    _send(results, ("back", me, [(n, a) for n, a, _ in batch[at:]]))
                    break
                _flush_prints()  # a thread's: not this call's
                _mark(mark, b"B%d.%d" % (num, attempt))
            began = time.perf_counter()
            reply = _call(func, results, me, num, attempt, line)
            took = int((time.perf_counter() - began) * 1e6)  # microseconds, for the run's batches
            _not_forked(me, 0)  # a child FUNC forked returned here: it ends, unheard
            _flush_prints()  # before the mark and the result: the run reads the prints first
            if _threads_left():  # what they print later is not this call's
                going = False
                _mark(mark, b"T%d.%d %d" % (num, attempt, took))
            elif at + 1 < len(batch) and not (held is not None and held[0]):
                going = True
                nxt = batch[at + 1]
                _mark(mark, b"N%d.%d %d.%d %d" % (num, attempt, nxt[0], nxt[1], took))
            else:
                going = False
                _mark(mark, b"E%d.%d %d" % (num, attempt, took))
            try:
                _send(results, reply)
            except ValueError as e:  # marshal: an unmarshallable value inside a record
                why = f"the records could not be passed back: {e}\n"
                _send(results, ("raised", me, num, attempt, why, 1))


def _call(
    func: Callable[[str], Any], results: IO[bytes], me: int, num: int, attempt: int, line: str
) -> tuple[Any, ...]:
    """One call of FUNC: the frame that answers it (``done`` or ``raised``), to be sent once
    its prints are flushed and marked."""
    environ = os.environ
    environ[TASKNUM_VAR] = str(num)
    if environ.get(ATTEMPT_VAR) != str(attempt):
        environ[ATTEMPT_VAR] = str(attempt)
    try:
        return _reply(results, me, num, attempt, func(line))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        _not_forked(me, code)
        if code == 0:
            return ("done", me, num, attempt, [])
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        return ("raised", me, num, attempt, "", code)
    except BaseException as e:
        _not_forked(me, 1)
        # the traceback from FUNC's frame on: the worker's own frame is no news to anyone
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        text = "".join(traceback.format_exception(type(e), e, tb))
        return ("raised", me, num, attempt, text, 1)


def _held_flag(fd: int) -> mmap.mmap | None:
    """The page the run sets its byte of when it stops (None: no page, batches of one)."""
    if fd < 0:
        return None
    os.set_inheritable(fd, False)
    try:
        return mmap.mmap(fd, _FLAG_SIZE, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


def _threads_left() -> bool:
    """Whether a thread other than the worker's lives on (a call started it)."""
    threading = sys.modules.get("threading")
    return threading is not None and threading.active_count() > 1


def _mark(mark: bytes, what: bytes) -> None:
    """A mark line in the prints, after what was printed so far (flushed)."""
    if mark:
        # not contextlib.suppress: an object made twice per call, for nothing
        try:
            os.write(1, mark + what + b"\n")
        except OSError:  # FUNC closed its stdout: its prints are lost too
            return


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
        try:  # not contextlib.suppress: an object made twice per call, for nothing
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, broken or replaced by FUNC
            continue


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
        # import path: the worker imports this module, and FUNC's, as the run could.
        home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = [home] + [os.path.abspath(p) for p in sys.path if p]
        self._mark = b"\0zotsink " + os.urandom(8).hex().encode() + b" "
        code = (
            # the current directory last, as -c would have it without -P (below)
            f"import os, sys; sys.path[:0] = {path!r}; sys.path.append(os.getcwd()); "
            "from zotsink._run.worker import main; "
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
        #: Sent and not ended, in calling order: (the run's name for the task, tasknum,
        #: attempt). The first is the call under way.
        self.queued: deque[tuple[Any, int, int]] = deque()
        self.sent: tuple[int, int] | None = None  # (tasknum, attempt) of the first queued
        self.ready = False
        self.closed = False
        self.held = False  # told to begin nothing more (see hold)
        #: Tasks to send at once: one, more while calls are quick (see Pool).
        self.batch = 1
        #: Seconds a call takes, recent ones weigh most (as the worker tells), and the last
        #: call it told of.
        self.call_time = 0.0
        self.timed: tuple[int, int] | None = None
        self._cutter = LineCutter(max_line)
        self._prints_to = _Prints(self._mark, prints_to, self)
        self.task: Any = None  # what the run calls the call under way (None: none)

    @property
    def batching(self) -> bool:
        """Whether it can be sent more than one task at a time: it can be held (a page
        shared with it, where the run says stop)."""
        return self._held is not None

    def send(self, tasks: list[tuple[Any, int, int, str]]) -> bool:
        """Hand the worker tasks, called in this order: (the run's name for the task, kept
        until its call ends; tasknum; attempt; line). False when it is gone."""
        for task, num, attempt, _line in tasks:
            self.queued.append((task, num, attempt))
        self.sent = self.queued[0][1:]
        data = marshal.dumps([(num, attempt, line) for _, num, attempt, line in tasks])
        try:
            # whole: a signal may cut a long write short, and a frame cut is no frame
            write_all(self._tasks_w, _LEN.pack(len(data)) + data)
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
        for i in range(min(2, len(queued))):  # the call under way or the next: at once
            if queued[i][1] == num and queued[i][2] == attempt:
                return True
        return any(n == num and a == attempt for _, n, a in queued)

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
        while len(buf) - at >= _LEN.size:
            (size,) = _LEN.unpack_from(buf, at)
            if len(buf) - at < _LEN.size + size:
                break
            try:
                frame = marshal.loads(buf[at + _LEN.size : at + _LEN.size + size])
            except (ValueError, EOFError, TypeError):
                frame = ("garbled",)
            out.append(frame if isinstance(frame, tuple) and frame else ("garbled",))
            at += _LEN.size + size
        if at:
            del buf[:at]
        return out, ended

    def refusal(self, frame: tuple[Any, ...]) -> str | None:
        """Why ``frame`` is not this worker's answer (None: it is): it must come from the
        worker's own pid and, for a result, name the task the worker calls now (the first
        it was sent and has not answered); tasks handed back must be those it holds."""
        kind = frame[0]
        size = _SIZES.get(kind)
        if size is None or len(frame) != size:
            return f"a frame of no known kind ({str(kind)[:40]!r})"
        if frame[1] != self.pid:
            return f"a {kind!r} frame from process {frame[1]}, not the worker ({self.pid})"
        if kind == "back":
            back = [tuple(x) for x in frame[2]]
            held = [(n, a) for _, n, a in list(self.queued)[: len(back)]]
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

    def returned(self) -> Any:
        """The call under way ended (its result came): the task it ran is handed back, and
        the next queued is the call under way."""
        task, self.task = self.task, None
        self._prints_to.returned(self.sent)
        if self.queued:
            self.queued.popleft()
        self.sent = self.queued[0][1:] if self.queued else None
        return task

    def handed_back(self, n: int | None = None) -> list[tuple[Any, int]]:
        """The first ``n`` tasks queued (None: all), not begun, taken off (the worker handed
        them back, or it is gone): the run's names for them, each with its attempt."""
        n = len(self.queued) if n is None else n
        tasks = []
        for _ in range(min(n, len(self.queued))):
            task, _num, attempt = self.queued.popleft()
            tasks.append((task, attempt))
        self.sent = self.queued[0][1:] if self.queued else None
        return tasks

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
#: begins; E: one ended; T: one ended and left a thread alive), the call's task and
#: attempt, for N the next call's, and for an end the microseconds the call took.
_MARK_LINE: Final = re.compile(rb"([BNET])(\d+)\.(\d+)(?: (\d+)\.(\d+))?(?: (\d+))?\n")


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

    def lines(self, block: bytes) -> None:
        at = block.find(self._mark)
        while at >= 0:
            if at:
                head = block[:at]
                self._out(head if head.endswith(b"\n") else head + b"\n")
            end = at + len(self._mark)
            m = _MARK_LINE.match(block, end)
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
        to = self._sink()
        if self._after is not None and not self._told:
            num, attempt = self._after
            self._told = True
            to.lines(
                f"zotsink: printed by the worker after the call of task {num}.{attempt} "
                "returned (by a thread it started?):\n".encode()
            )
        to.lines(block)

    def returned(self, call: tuple[int, int] | None) -> None:
        """``call`` ended (its result came, or its worker died): what follows is not its,
        should its end mark not have come (FUNC closed its stdout)."""
        if call is not None and self.call == call:
            self.call = None

    def long_begin(self, head: bytes) -> None:
        self._sink().long_begin(head)

    def long_more(self, piece: bytes) -> None:
        self._to.long_more(piece)

    def long_end(self, size: int, how: str) -> None:
        self._to.long_end(size, how)


#: Bytes of the page a worker shares with its run: its first byte says "hold".
_FLAG_SIZE: Final = mmap.PAGESIZE


def _flag_page() -> tuple[int, mmap.mmap | None]:
    """A page shared with a worker (a memory file): the descriptor to pass it and the
    run's map of it; (-1, None) where there are no memory files (one task at a time)."""
    try:
        fd = os.memfd_create("zotsink-worker", 0)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return -1, None
    try:
        os.ftruncate(fd, _FLAG_SIZE)
        return fd, mmap.mmap(fd, _FLAG_SIZE)
    except OSError:
        os.close(fd)
        return -1, None


def _pidfd(pid: int) -> int | None:
    """A descriptor that polls readable when process ``pid`` ends (Linux 5.3 and later)."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined,no-any-return]
    except (AttributeError, OSError):
        return None
