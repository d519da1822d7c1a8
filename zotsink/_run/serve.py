"""The worker process of ``zotsink run --call FILE.py:FUNC``: FUNC loaded once, called per task.

Starting a Python interpreter and importing the user's libraries for every task is most of
the CPU a quick Python task costs. A worker starts once (:class:`~zotsink._run.worker.Worker`
starts it), imports FUNC's module once, then calls ``FUNC(line)`` for each task it is sent
and answers each call as it ends, in the frames of :mod:`zotsink._run.frames`.

Its descriptors: stdin is ``/dev/null`` (FUNC must not read the task stream); stdout and
stderr are one pipe that the run copies into the log under the task's number; two more pipes
carry frames, tasks in and results out, and are the worker's alone: what FUNC starts does
not inherit them. Values of a record are reduced to what marshal carries (other values,
NumPy's among them, become the text a record holds for them:
:func:`~zotsink._core.records.value_text`). A process FUNC forked that comes back into the
worker's code never answers: it exits at once. The worker flushes a call's prints and marks
its end before it sends the result, so the run, which reads the prints before crediting a
result, never takes one call's lines for another's.

A thread that outlived a call (alive at its end), or that FUNC's load started, is no later
call's: what it prints through ``sys.stdout`` or ``sys.stderr`` goes out as an aside, its
whole lines between an ``A`` mark that names the call it outlived (0.0: the load) and an
``R`` mark, so that the run logs them under task 0, never under the call under way
(:class:`_ByThread`). Bytes written past Python's streams (``os.write``, a C library) can
be told apart by their place only.
"""

from __future__ import annotations

import _thread
import importlib
import importlib.util
import io
import mmap
import os
import sys
import time
import traceback  # before FUNC's module, which may shadow what traceback imports
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, Final

from .._core.fileio import write_all
from .._core.records import value_text
from .._core.stamp import ATTEMPT_VAR, TASKNUM_VAR
from .._core.stop import leave_stops_to_parent
from .frames import (
    FLAG_SIZE,
    LINES,
    PART_SIZE,
    PIECE,
    RECORD,
    WORKER_VAR,
    names_file,
    receive_frame,
    send_frame,
)
from .usage import CallMeter

__all__ = ["load_function", "main"]

#: The plain value types marshal carries as they are (exactly these: marshal refuses a
#: subclass, or dumps a NumPy scalar's raw buffer); other values become their record text.
_PLAIN: Final = frozenset((str, int, float, bool, bytes, type(None)))


def _load(spec: str) -> Callable[[str], Any]:
    where, _, name = spec.rpartition(":")
    if names_file(where):
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


#: FUNC of a spec, loaded as a worker loads it (an Executor's calls load theirs so too).
load_function = _load


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
            send_frame(results, ("part", me, num, attempt, items))
            items, size = [], 0
    return ("done", me, num, attempt, items)


def _warm_traceback() -> None:
    """Format one traceback before FUNC's module is loaded: traceback imports what it
    formats with (linecache, tokenize, and more in newer Pythons) only then, and a module of
    the user's named like one of them, on the import path, would be found instead."""
    try:
        raise ValueError("warm")
    except ValueError as e:
        traceback.format_exception(type(e), e, e.__traceback__)


#: The threads that outlived a call (alive at its end) or FUNC's load, and which call:
#: ``(task, attempt)``, ``(0, 0)`` for the load. What they print is not a later call's.
_outlived: dict[Any, tuple[int, int]] = {}
#: Held while prints are written once a thread outlived a call, so that an aside is never
#: cut by the worker's own lines or marks.
_print_lock = _thread.RLock()
_MAIN: Final = _thread.get_ident()


class _ByThread(io.TextIOWrapper):
    """``sys.stdout`` or ``sys.stderr`` of a worker: while no thread outlived a call, plain
    writes (its ``write`` is the stream's own); then a thread of :data:`_outlived` writes
    its whole lines as an aside, marked with the call it outlived, and every write is made
    under :data:`_print_lock`."""

    def __init__(self, stream: io.TextIOWrapper, mark: bytes) -> None:
        super().__init__(
            stream.buffer,
            encoding=stream.encoding,
            errors=stream.errors,
            line_buffering=stream.line_buffering,
            write_through=stream.write_through,
        )
        self._mark = mark
        self._partial: dict[Any, str] = {}  # an outliving thread's line not ended yet
        self.write = super().write  # type: ignore[method-assign]
        self.flush = super().flush  # type: ignore[method-assign]

    def watch(self) -> None:
        """A thread outlived a call: from now on, writes are sorted by thread."""
        self.__dict__.pop("write", None)
        self.__dict__.pop("flush", None)

    def write(self, s: str) -> int:  # type: ignore[override]
        with _print_lock:
            if _thread.get_ident() != _MAIN:
                thread = sys.modules["threading"].current_thread()
                call = _outlived.get(thread)
                if call is not None:
                    self._aside(thread, call, self._partial.pop(thread, "") + s)
                    return len(s)
            return super().write(s)

    def flush(self) -> None:
        with _print_lock:
            if _thread.get_ident() == _MAIN:  # the end of a call: no line is held back
                for thread, text in list(self._partial.items()):
                    del self._partial[thread]
                    self._aside(thread, _outlived.get(thread, (0, 0)), text + "\n")
            super().flush()

    def _aside(self, thread: Any, call: tuple[int, int], text: str) -> None:
        """The whole lines of ``text`` out as an aside of ``call`` (under the lock); the
        rest held until its line ends."""
        cut = text.rfind("\n") + 1
        if cut < len(text):
            self._partial[thread] = text[cut:]
        if not cut:
            return
        super().flush()  # what the worker printed before goes first
        data = text[:cut].encode(self.encoding, self.errors)
        num, attempt = call
        head, end = b"A%d.%d\n" % (num, attempt), b"R%d.%d\n" % (num, attempt)
        write_all(1, self._mark + head + data + self._mark + end)


def _watch_threads(call: tuple[int, int]) -> None:
    """Note the threads alive now (but the worker's) as outliving ``call``, forget those
    that ended, and sort the prints by thread from now on."""
    threading = sys.modules["threading"]
    with _print_lock:
        for thread in list(_outlived):
            if not thread.is_alive():
                del _outlived[thread]
        for thread in threading.enumerate():
            if thread.ident != _MAIN and thread not in _outlived:
                _outlived[thread] = call
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, _ByThread):
            stream.watch()


def _sort_prints(mark: bytes) -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` :class:`_ByThread` (before FUNC loads: a
    library that keeps a stream, as logging does, keeps these)."""
    if not mark:
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, io.TextIOWrapper):
            stream.flush()
            setattr(sys, name, _ByThread(stream, mark))


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
    _sort_prints(mark)
    try:
        func = _load(spec)
    except BaseException:
        _not_forked(me, 1)
        _flush_prints()
        send_frame(results, ("unloadable", me, traceback.format_exc(limit=-8)))
        return
    _not_forked(me, 0)
    _flush_prints()
    if _threads_left():  # FUNC's load started them: what they print is no call's
        _watch_threads((0, 0))
    send_frame(results, ("ready", me))
    meter = CallMeter()  # what each call used, sent with its result
    going = False  # the last end mark said the next call of the batch begins at once
    while True:
        batch = receive_frame(tasks)
        _not_forked(me, 0)  # a fork that read on is no worker: it answers nothing
        if batch is None:
            return
        for at, (num, attempt, line) in enumerate(batch):
            if not going:
                if held is not None and held[0]:  # the run stops: begin nothing more
                    send_frame(results, ("back", me, [(n, a) for n, a, _ in batch[at:]]))
                    break
                _flush_prints()  # a thread's: not this call's
                _mark(mark, b"B%d.%d" % (num, attempt))
            meter.begin()
            began = time.perf_counter()
            reply = _call(func, results, me, num, attempt, line)
            took = int((time.perf_counter() - began) * 1e6)  # microseconds, for the run's batches
            used = meter.end()
            use = (used.peak_kib, used.user_s, used.sys_s)
            _not_forked(me, 0)  # a child FUNC forked returned here: it ends, unheard
            _flush_prints()  # before the mark and the result: the run reads the prints first
            if _threads_left():  # what they print later is not this call's
                going = False
                _watch_threads((num, attempt))
                _mark(mark, b"T%d.%d %d" % (num, attempt, took))
            elif at + 1 < len(batch) and not (held is not None and held[0]):
                going = True
                nxt = batch[at + 1]
                _mark(mark, b"N%d.%d %d.%d %d" % (num, attempt, nxt[0], nxt[1], took))
            else:
                going = False
                _mark(mark, b"E%d.%d %d" % (num, attempt, took))
            try:
                send_frame(results, (*reply, use))
            except ValueError as e:  # marshal: an unmarshallable value inside a record
                why = f"the records could not be passed back: {e}\n"
                send_frame(results, ("raised", me, num, attempt, why, 1, use))


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
        return mmap.mmap(fd, FLAG_SIZE, prot=mmap.PROT_READ)
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
            if _outlived:
                with _print_lock:  # between two asides, never inside one
                    os.write(1, mark + what + b"\n")
            else:
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
