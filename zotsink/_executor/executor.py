"""``zotsink.Executor``: ``concurrent.futures`` over the elements of a job array, each call's
result once in ONE file, and a client that may die.

The client appends calls to the task list (:data:`~zotsink._executor.directory.CALLS`) in
batches, through ``add_tasks``'s locked append; ``elements`` runs follow that list
(:mod:`zotsink._executor.elements`) and commit one record per call into OUT; the client
learns what was committed through :mod:`zotsink._executor.results` and resolves the futures.
A watcher thread does the client's I/O: it appends what ``submit`` queued, reads the
results, asks whether the elements live, starts them when calls wait and none does, and
reads what the elements said.

Invariants:

- A call is in the task list before its future can resolve, and is in it once: a future
  whose call was appended cannot be cancelled (its call will run); one still queued can.
- Every future resolves exactly once: with its call's value; a :class:`CallError`
  (the call raised), a :class:`ResultError` (its value cannot come back), cancelled; a
  :class:`GivenUp` (its task failed ``max_attempts`` times); or :class:`ExecutorBroken`
  (the elements cannot run the calls: one error for every call left).
- Nothing of the elements depends on the client: a client that dies leaves them working,
  and :meth:`Executor.attach` from another process gives every call's future back, each
  result once, since results live only in OUT and the calls only in the task list.
- ``map`` keeps a bounded window of calls ahead of the one it yields: memory does not grow
  with the number of items.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import itertools
import os
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

from ..errors import (
    CallError,
    ExecutorBroken,
    GivenUp,
    ResultError,
    ZotsinkError,
)
from .calls import call_text, decode_line, decode_record, line_of, spec_of
from .directory import (
    Place,
    Settings,
    append_event,
    checked_settings,
    create,
    open_existing,
    read_events,
)
from .elements import Started, alive, cancel_queued, pick_scheduler, start
from .results import Cursor, committed_records, news_since
from .serve import UNLOADABLE
from .supervise import Supervision

__all__ = ["CallFuture", "Executor"]

#: Calls ``map`` keeps submitted ahead of the one it yields (unless ``buffersize``): enough
#: that the elements are never short of work between two refills, bounded in memory.
WINDOW: Final = 10_000
#: Seconds a ``submit`` waits in the client for others to share its append.
FLUSH_AGE: Final = 0.02
#: Calls queued by ``submit`` that make an append due at once.
FLUSH_CALLS: Final = 10_000
#: The shortest pause between two reads of the results, and how many times the last read's
#: own time the pause is at least (the client reads, it does not spin).
POLL_MIN: Final = 0.05
POLL_SHARE: Final = 3.0
#: Seconds between two looks at the elements' health (given-up tasks, their events, whether
#: they live).
HEALTH_EVERY: Final = 2.0


class CallFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """The future of one call: :attr:`id` names the call (in the task list and in its
    record), :attr:`task` is the number of its task-list line once it is there (None
    before). Once its call is in the task list it cannot be cancelled: it will run."""

    def __init__(self, call_id: str) -> None:
        super().__init__()
        self.id = call_id
        self.task: int | None = None
        self._gate = threading.Lock()
        self._sent = False

    def cancel(self) -> bool:
        with self._gate:
            if self._sent:
                return False
            return super().cancel()

    def _send(self) -> bool:
        """Mark the call as going into the task list; False when it was cancelled."""
        with self._gate:
            if self.cancelled():
                return False
            self._sent = True
            return True

    def _cancelled_unrun(self) -> None:
        """The Executor cancelled the call before it began."""
        concurrent.futures.Future.cancel(self)
        self.set_running_or_notify_cancel()

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled() else "finished" if self.done() else "pending"
        return f"<CallFuture {self.id} task={self.task} {state}>"


class _Line:
    """One task line being made: its calls' texts and futures."""

    __slots__ = ("futures", "texts")

    def __init__(self, texts: list[str], futures: list[CallFuture]) -> None:
        self.texts = texts
        self.futures = futures


class Executor(concurrent.futures.Executor):
    """Python futures over job-array elements, every result once in ONE file.

    ``Executor(directory, *, scheduler="auto", elements=1, jobs="auto", submit_args=(),
    relay=None, idle=300.0, max_attempts=3)`` makes ``directory`` (it must not hold
    another Executor) and runs ``elements`` elements when calls come: an array job of
    ``scheduler`` (``slurm``: ``sbatch --array=1-N``; ``sge``: ``qsub -t 1-N``; ``pbs``:
    ``qsub -J 1-N``; with ``submit_args``), or ``local`` processes of this machine;
    ``auto`` picks the scheduler whose submit command is on PATH, else ``local``. Each
    element calls ``jobs`` functions at a time (``auto``: the CPUs its job has), ends after
    ``idle`` seconds with nothing to do (None: never, until the Executor is shut down), and
    gives up a call whose worker died ``max_attempts`` times. ``relay`` is reserved for
    elements that submit their own successors; only None is taken today (the client
    submits new elements when calls wait and none lives).

    Calls travel as JSON: a function by its module and name, arguments and results as
    JSON values. Results are the committed records of ``directory/results.jsonl``; read
    them with ``zotsink cat``, ``zotsink.read_records`` or :meth:`futures`. A client that
    dies leaves the elements working: :meth:`attach` takes the directory up again.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        scheduler: str = "auto",
        elements: int = 1,
        jobs: int | str = "auto",
        submit_args: Sequence[str] = (),
        relay: int | None = None,
        idle: float | None = 300.0,
        max_attempts: int = 3,
    ) -> None:
        settings = checked_settings(
            scheduler, elements, jobs, submit_args, relay, idle, max_attempts
        )
        self._begin(create(directory, settings), settings)

    @classmethod
    def attach(cls, directory: str | os.PathLike[str]) -> Executor:
        """The Executor whose directory is ``directory``, from any process (its client
        may be dead): :meth:`futures` gives every call's future back, and calls that wait
        run (new elements start when none lives)."""
        place, settings = open_existing(directory)
        self = cls.__new__(cls)
        self._begin(place, settings)
        return self

    def _begin(self, place: Place, settings: Settings) -> None:
        self._place = place
        self._settings = settings
        self._lock = threading.Condition()
        self._token = os.urandom(4).hex()
        self._seq = itertools.count(1)
        self._queued: list[_Line] = []  # submitted, not appended yet
        self._queued_since = 0.0
        self._queued_calls = 0
        self._waiting: dict[str, CallFuture] = {}  # appended (or being appended), unresolved
        self._tasks: dict[int, tuple[str, set[str]]] = {}  # appended task -> line, ids left
        self._cursor: Cursor | None = None
        self._results_at = 0.0
        self._health_at = 0.0
        self._events_seen = 0
        self._sets: list[tuple[Started, list[Any]]] = []  # elements known, and our own procs
        self._dead_sets: set[int] = set()
        self._supervision = Supervision()
        self._cancelled = 0  # cancelled through this task number (0: none)
        self._shutdown = False
        self._broken: str | None = None
        self._thread: threading.Thread | None = None
        me = weakref.ref(self)
        atexit.register(_flush_at_exit, me)

    # -- the public side -------------------------------------------------------------------
    @property
    def directory(self) -> str:
        """The Executor's directory."""
        return self._place.directory

    @property
    def results_path(self) -> str:
        """OUT: every call's record, committed once (``zotsink cat`` reads it)."""
        return self._place.results

    @property
    def calls_path(self) -> str:
        """The task list: one line per call (or chunk of calls)."""
        return self._place.calls

    @property
    def settings(self) -> Settings:
        return self._settings

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> CallFuture:
        """Schedule ``fn(*args, **kwargs)``: its future. ``fn`` and its arguments are
        checked here: a function the elements cannot load by name, or an argument JSON
        cannot carry, is a :class:`UsageError` now, naming it. The call joins the task
        list within a moment (with the calls submitted meanwhile, in one append)."""
        spec = spec_of(fn)
        future = CallFuture(self._next_id())
        text = call_text(future.id, spec, args, kwargs, named=_named(fn))
        with self._lock:
            self._usable()
            if not self._queued:
                self._queued_since = time.monotonic()
            self._queued.append(_Line([text], [future]))
            self._queued_calls += 1
            self._watch()
            self._lock.notify_all()
        return future

    def map(  # type: ignore[override]
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
    ) -> Iterator[Any]:
        """``fn`` over the items, the results in the items' order (an exception of a call
        is raised when its turn comes). ``chunksize`` calls share one task (one line, one
        record each). At most ``buffersize`` calls (default: a bounded window) are
        submitted ahead of the one being yielded, and the items are read as the window
        moves: an iterable larger than memory is fine. ``timeout``: seconds from this call
        that each result may be waited for in all (TimeoutError)."""
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        window = WINDOW if buffersize is None else buffersize
        if window < 1:
            raise ValueError("buffersize must be >= 1.")
        window = max(window, chunksize)
        spec = spec_of(fn)
        named = _named(fn)
        end = None if timeout is None else time.monotonic() + timeout
        items = zip(*iterables)
        order: deque[CallFuture] = deque()
        read_all = [False]

        def fill() -> None:
            lines: list[_Line] = []
            ahead = len(order)
            while ahead < window and not read_all[0]:
                chunk = list(itertools.islice(items, chunksize))
                if not chunk:
                    read_all[0] = True
                    break
                futures = [CallFuture(self._next_id()) for _ in chunk]
                texts = [call_text(f.id, spec, a, {}, named=named) for f, a in zip(futures, chunk)]
                lines.append(_Line(texts, futures))
                ahead += len(chunk)
            if lines:
                with self._lock:
                    self._usable()
                self._append(lines, raise_errors=True)
                for line in lines:
                    order.extend(line.futures)

        fill()  # the first calls go now, as concurrent.futures does

        def results() -> Iterator[Any]:
            while order:
                if len(order) <= window // 2 and not read_all[0]:
                    fill()
                future = order.popleft()
                left = None if end is None else end - time.monotonic()
                yield future.result(left)

        return results()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more calls: the task list is closed (the elements end once every call is
        done) and, with ``wait``, this returns once every future resolved.
        ``cancel_futures``: the calls not begun never run (their futures are cancelled; a
        client attached later sees them cancelled too), the elements finish the calls they
        run and end, and the scheduler's queued elements are cancelled."""
        with self._lock:
            self._shutdown = True
            queued, self._queued, self._queued_calls = self._queued, [], 0
        if cancel_futures:
            for line in queued:
                for future in line.futures:
                    future.cancel()
            self._cancel()
        else:
            self._append(queued)
            self._close()
        with self._lock:
            self._watch()
            self._lock.notify_all()
            thread = self._thread
        if wait and thread is not None:
            thread.join()

    def futures(self) -> list[CallFuture]:
        """The future of every call in the directory (this client's, and those of clients
        before it), in the order they were submitted; a call done has its result already.
        Read from the task list and the results, whole: for millions of calls, read
        ``results_path`` with ``zotsink.read_records`` instead."""
        from .. import read_records

        with self._lock:
            found: list[CallFuture] = []
            if not os.path.exists(self._place.calls):
                return found
            done = self._committed_now()
            registered = False
            for num, (line,) in enumerate(read_records(self._place.calls, format="lines"), 1):
                try:
                    calls = decode_line(line)
                except ValueError:
                    continue  # a torn line (its client died as it wrote): no call of it ran
                for call in calls:
                    future = self._waiting.get(call.id)
                    if future is None:
                        future = CallFuture(call.id)
                        future.task = future_task = num
                        future._send()
                        record = done.get(call.id)
                        if record is not None:
                            self._settle(future, record)
                        else:
                            self._waiting[call.id] = future
                            self._tasks.setdefault(future_task, (line, set()))[1].add(call.id)
                            if self._cursor is not None:  # told before anyone waited
                                self._cursor.again(future_task)
                            registered = True
                    found.append(future)
            if registered:
                self._health_at = 0.0
                self._watch()
                self._lock.notify_all()
            return found

    def future(self, call_id: str) -> CallFuture:
        """The future of the call ``call_id`` (see :meth:`futures`); KeyError when the
        task list has no such call."""
        with self._lock:
            known = self._waiting.get(call_id)
        if known is not None:
            return known
        for future in self.futures():
            if future.id == call_id:
                return future
        raise KeyError(f"no call {call_id!r} in {self._place.calls}")

    # -- submitting ----------------------------------------------------------------------
    def _next_id(self) -> str:
        return f"{self._token}-{next(self._seq)}"

    def _usable(self) -> None:
        """Refuse a call now (under the lock): after shutdown, or once broken."""
        if self._broken is not None:
            raise ExecutorBroken(self._broken, path=self._place.directory)
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")

    def _append(self, lines: list[_Line], *, raise_errors: bool = False) -> None:
        """Append ``lines`` to the task list in one locked append; their futures wait for
        their records from then on. An append that fails fails their futures (and with
        ``raise_errors`` is raised too): none of them is in the list."""
        from .. import add_tasks

        kept: list[_Line] = []
        for line in lines:
            futures = [f for f in line.futures if f._send()]
            if futures:
                texts = [t for t, f in zip(line.texts, line.futures) if f in futures]
                kept.append(_Line(texts, futures))
        if not kept:
            return
        texts = [line_of(line.texts) for line in kept]
        with self._lock:
            for line in kept:  # waiting before the append: a record may come at once
                for future in line.futures:
                    self._waiting[future.id] = future
        try:
            nums = add_tasks(self._place.calls, texts)
        except ZotsinkError as e:
            with self._lock:
                for line in kept:
                    for future in line.futures:
                        self._waiting.pop(future.id, None)
                        if not future.done():
                            future.set_exception(e)
            if raise_errors:
                raise
            return
        with self._lock:
            for num, text, line in zip(nums, texts, kept):
                ids = {f.id for f in line.futures if not f.done()}
                for future in line.futures:
                    future.task = num
                if ids:
                    self._tasks[num] = (text, ids)
            self._health_at = 0.0  # elements may be needed
            self._watch()
            self._lock.notify_all()

    def _flush_queued(self) -> None:
        with self._lock:
            queued, self._queued, self._queued_calls = self._queued, [], 0
        self._append(queued)

    def _close(self) -> None:
        from .. import close_tasks

        if os.path.exists(self._place.calls):
            close_tasks(self._place.calls, self._place.ledger)

    def _cancel(self) -> None:
        """Cancel the calls not begun: close the list, record through which task, stop the
        runs, cancel what is queued of the elements."""
        from .. import close_tasks, stop_runs

        if not os.path.exists(self._place.calls):
            return
        control, _wrote = close_tasks(self._place.calls, self._place.ledger)
        through = control.closed_lines or 0
        append_event(self._place, {"event": "cancel", "through": through})
        if os.path.exists(self._place.ledger):
            stop_runs(self._place.calls, self._place.ledger)
        with self._lock:
            self._cancelled = max(self._cancelled, through)
            sets = [started for started, _procs in self._sets]
        for started in sets + self._recorded_sets():
            cancel_queued(started)
        with self._lock:
            self._health_at = 0.0

    # -- the watcher -----------------------------------------------------------------------
    def _watch(self) -> None:
        """Start the watcher thread when there is something to watch (under the lock)."""
        if self._thread is None and (self._queued or self._waiting):
            self._thread = threading.Thread(
                target=self._run_watcher, name=f"zotsink-executor-{self._token}", daemon=True
            )
            self._thread.start()

    def _run_watcher(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._queued and not self._waiting:
                        self._thread = None
                        return
                    pause = self._pause(time.monotonic())
                    if pause > 0:
                        self._lock.wait(pause)
                    now = time.monotonic()
                    due = self._queued and (
                        self._shutdown
                        or self._queued_calls >= FLUSH_CALLS
                        or now - self._queued_since >= FLUSH_AGE
                    )
                if due:
                    self._flush_queued()
                self._look()
        except Exception as e:  # never a silent end: every waiting future hears it
            where = ""
            if not isinstance(e, ZotsinkError):  # not a word of zotsink's: where it came from
                frame = traceback.extract_tb(e.__traceback__)[-1]
                where = f" (at {frame.filename}:{frame.lineno})"
            self._break(f"the Executor's client thread failed: {type(e).__name__}: {e}{where}")
            with self._lock:
                self._thread = None

    def _pause(self, now: float) -> float:
        """Seconds until the watcher has something due (under the lock)."""
        due = []
        if self._queued:
            due.append(self._queued_since + FLUSH_AGE)
        if self._waiting:
            due += [self._results_at, self._health_at]
        return max(0.0, min(due) - now) if due else 1.0

    def _look(self) -> None:
        now = time.monotonic()
        if self._waiting and now >= self._results_at:
            began = time.monotonic()
            self._read_news()
            took = time.monotonic() - began
            self._results_at = time.monotonic() + max(POLL_MIN, POLL_SHARE * took)
        if self._waiting and now >= self._health_at:
            self._health_at = now + HEALTH_EVERY
            self._elements()

    def _read_news(self) -> None:
        """What was committed or given up since the last look: their futures resolve."""
        with self._lock:
            waiting = {num: line for num, (line, _ids) in self._tasks.items()}
        news = news_since(
            self._place.results,
            self._place.ledger,
            waiting,
            self._settings.max_attempts,
            self._cursor,
        )
        with self._lock:
            self._cursor = news.cursor
            for _task, line in news.committed:
                self._resolve_line(line)
            for num, how in news.given_up:
                if UNLOADABLE in how:  # the halt will say so too: one error, said at once
                    cause = how[how.index(UNLOADABLE) + len(UNLOADABLE) :].rstrip(")")
                    self._break(f"the elements {cause}{_IMPORTABLE}")
                    return
                self._give_up(num, how)

    # -- resolving -----------------------------------------------------------------------
    def _resolve_line(self, line: str) -> None:
        """A committed record: its future resolves (under the lock)."""
        try:
            record = decode_record(line)
        except ValueError:
            return  # no Executor's record: nobody waits for it
        future = self._waiting.pop(record["id"], None)
        if future is None:
            return
        self._forget(future)
        self._supervision.done(1)
        self._settle(future, record)

    def _forget(self, future: CallFuture) -> None:
        entry = self._tasks.get(future.task) if future.task is not None else None
        if entry is not None:
            entry[1].discard(future.id)
            if not entry[1]:
                del self._tasks[future.task]  # type: ignore[arg-type]

    def _settle(self, future: CallFuture, record: dict[str, Any]) -> None:
        """Resolve ``future`` with what its record says."""
        if future.done():
            return
        status = record.get("status")
        error = record.get("error") or {}
        where = f"call {future.id}, task {record.get('task')}"
        if status == "ok":
            future.set_result(record.get("value"))
        elif status == "raised":
            kind, message = str(error.get("type", "")), str(error.get("message", ""))
            tail = str(error.get("traceback", ""))
            future.set_exception(
                CallError(
                    f"{kind}: {message} ({where}, raised where it ran)\n{tail}",
                    call_id=future.id,
                    remote_type=kind,
                    remote_message=message,
                    remote_traceback=tail,
                    path=self._place.results,
                )
            )
        elif status == "unsent":
            future.set_exception(
                ResultError(
                    f"{where}: it ran, but {error.get('message', 'its value cannot come back')}",
                    path=self._place.results,
                )
            )
        elif status == "cancelled":
            future._cancelled_unrun()
        else:
            future.set_exception(ZotsinkError(f"{where}: a record of an unknown status {status!r}"))

    def _committed_now(self) -> dict[str, dict[str, Any]]:
        """Every committed record, by call id (a whole read: :meth:`futures`)."""
        done: dict[str, dict[str, Any]] = {}
        for _task, line in committed_records(self._place.results, self._place.ledger):
            try:
                record = decode_record(line)
            except ValueError:
                continue
            done[record["id"]] = record
        return done

    def _give_up(self, num: int, how: str) -> None:
        """Task ``num`` was given up: its calls' futures say so (under the lock)."""
        entry = self._tasks.pop(num, None)
        if entry is None:
            return
        for call_id in entry[1]:
            future = self._waiting.pop(call_id, None)
            if future is not None and not future.done():
                future.set_exception(
                    GivenUp(
                        f"call {call_id}, task {num}: given up after "
                        f"{self._settings.max_attempts} attempts, the last {how}; its "
                        f"stderr is in {self._place.log} (`zotsink status "
                        f"{self._place.calls} {self._place.results} --failed`)",
                        path=self._place.ledger,
                    )
                )

    # -- the elements ----------------------------------------------------------------------
    def _recorded_sets(self) -> list[Started]:
        """The elements the settings file says were started (by any client)."""
        out = []
        for event in read_events(self._place):
            if event.get("event") == "elements":
                started = Started.of_event(event)
                if started is not None:
                    out.append(started)
        return out

    def _elements(self) -> None:
        """Read what the elements said since; when calls wait and no element lives, start
        new ones or break, as :class:`Supervision` decides."""
        events = read_events(self._place)
        first, self._events_seen = self._events_seen, len(events)
        known = {started.key() for started, _procs in self._sets}
        for index in range(first, len(events)):
            event = events[index]
            self._supervision.event(index, event)
            kind = event.get("event")
            if kind == "elements":
                started = Started.of_event(event)
                if started is not None and started.key() not in known:
                    with self._lock:
                        self._sets.append((started, []))
            elif kind == "cancel" and isinstance(event.get("through"), int):
                self._cancelled = max(self._cancelled, event["through"])
        live = False
        for i, (started, procs) in enumerate(self._sets):
            if i not in self._dead_sets:
                if alive(started, procs):
                    live = True
                else:
                    self._dead_sets.add(i)
        if not live and self._cancelled:
            self._end_cancelled()
        with self._lock:
            waiting = bool(self._waiting)
        decision = self._supervision.decide(live, waiting)
        if decision.action == "start":
            self._start()
        elif decision.action == "break":
            why = self._never_began() if decision.why == "never began" else decision.why
            self._break(
                f"{why}; see {self._place.log} and `zotsink status {self._place.calls} "
                f"{self._place.results}`"
            )

    def _start(self) -> None:
        from .. import close_tasks

        settings = self._settings
        before = len(read_events(self._place))  # what the new elements say comes after
        try:
            scheduler = pick_scheduler(settings.scheduler)
            if not self._shutdown:  # calls come again: the elements are to follow them
                close_tasks(self._place.calls, self._place.ledger, reopen=True)
            started, procs = start(
                scheduler, settings.elements, self._place.directory, settings.submit_args
            )
        except ZotsinkError as e:
            return self._break(f"cannot start the elements: {e}")
        with self._lock:
            self._sets.append((started, procs))
        append_event(self._place, started.to_event())
        self._events_seen = before
        self._supervision.started(before)

    def _never_began(self) -> str:
        started = self._sets[-1][0] if self._sets else None
        what = f"job {started.job}" if started is not None and started.job else "processes"
        return (
            f"the elements ({what}) ended before any of them began its run: cancelled while "
            f"queued, or their Python cannot run zotsink (they run {sys.executable} with "
            "this client's import path): check that it runs there, and the scheduler's "
            "record of the job"
        )

    def _end_cancelled(self) -> None:
        """No element lives after a cancel: the calls through it that no record answers
        never run."""
        self._cursor = self._cursor._replace(at=0.0) if self._cursor is not None else None
        self._read_news()  # what the last elements committed as they ended
        with self._lock:
            for num in [n for n in self._tasks if n <= self._cancelled]:
                for call_id in self._tasks.pop(num)[1]:
                    future = self._waiting.pop(call_id, None)
                    if future is not None and not future.done():
                        future._cancelled_unrun()

    def _break(self, why: str) -> None:
        """The elements cannot run the calls: every call left resolves with one error."""
        with self._lock:
            if self._broken is None:
                if UNLOADABLE in why:
                    why += _IMPORTABLE
                self._broken = (
                    f"{why} (Executor in {self._place.directory}; nothing done is lost: fix "
                    "the cause, then zotsink.Executor.attach(directory) runs the calls left)"
                )
            error = ExecutorBroken(self._broken, path=self._place.directory)
            futures = list(self._waiting.values())
            self._waiting.clear()
            self._tasks.clear()
            queued, self._queued, self._queued_calls = self._queued, [], 0
        for future in futures + [f for line in queued for f in line.futures]:
            if not future.done():
                if future.cancelled():
                    continue
                future.set_exception(error)


#: What to do about a function the elements cannot load.
_IMPORTABLE: Final = (
    "; make its module importable where the elements run (the same environment as this "
    "client, or submit_args that load it)"
)


def _named(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))


def _flush_at_exit(ref: weakref.ReferenceType[Executor]) -> None:
    """At the interpreter's end, the calls ``submit`` queued go into the task list: a
    future the client handed out is never lost for a batch not yet appended."""
    executor = ref()
    if executor is not None:
        executor._flush_queued()
