"""Where a task stands: the one fold of ledger rows into a task's state, applied three ways.

A task's state is its latest row whose ``key`` is the task's line today: a row written for
another line (the task list was edited since) says nothing about this one. :func:`fold`
is the rule, one row at a time: a ``start`` is ``running``; an end is its ``status``, an
unknown one counting as ``failed``; starts and failed attempts (:data:`FAILING`) are
counted; a row of a kind this release does not know (a newer release's) changes nothing.
:func:`settle` then says what a snapshot's states are now: a ``running`` task whose run is
known dead (same host, process gone) is ``lost``, and one whose latest attempt failed
after ``max_attempts`` failures is ``given-up``. An ``ok`` task whose records are no
longer in OUT (:func:`piece_gone`, when OUT is given) is ``lost`` too: not done. A task
with no row is ``never``.

The fold is applied to a snapshot (:func:`states_of`), incrementally by a run's claim
under the ledger's lock (:class:`~zotsink._run.ledger.Ledger`), and compactly, a few bytes
per task, by :class:`LedgerTally` (``status``, ``missing --ledger``), which keeps the effect
of each kind of row that :func:`fold` gives.
"""

from __future__ import annotations

import heapq
import math
import os
import weakref
from array import array
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, Literal, NamedTuple

from .._core.records import unescape_tsv
from .._core.stop import Stopper
from .._ledgerfile import (
    END_STATES,
    LEDGER_COLUMNS,
    RUN_EVENT,
    RUN_TASKNUM,
    TASK_EVENTS,
    AndRunRows,
    LedgerRow,
    LedgerScan,
    OutFile,
    out_file,
    piece_problem,
)
from .alive import run_alive
from .control import Control
from .settings import recorded_max_attempts, settings_of

__all__ = [
    "FAILING",
    "STATES",
    "LedgerTally",
    "State",
    "TaskState",
    "fold",
    "given_up",
    "piece_gone",
    "read_begin",
    "read_states",
    "settle",
    "start_alive",
    "states_of",
]

#: A task's state.
State = Literal[
    "ok", "failed", "killed", "timeout", "interrupted", "given-up", "running", "lost", "never"
]
#: End statuses that count towards ``max_attempts`` (``interrupted`` does not: a walltime
#: warning or a cancel says nothing of the task).
FAILING: Final = ("failed", "killed", "timeout")
#: Every state a task can be in, in the order reports list them. ``given-up``: its latest
#: attempt failed, and its failed attempts reached the run's ``max_attempts``.
STATES: Final[tuple[State, ...]] = (*END_STATES, "given-up", "running", "lost", "never")  # type: ignore[assignment]


class TaskState(NamedTuple):
    """Where one task stands: its state, how often it was started, its latest row."""

    tasknum: int
    state: State
    starts: int
    last: LedgerRow | None
    failures: int = 0  # attempts that ended failed, killed or timeout (see FAILING)


def fold(row: LedgerRow, old: TaskState | None) -> TaskState:
    """The state of a task after ``row``, one of its rows, from its state before (None: no
    row yet). The one rule from rows to a state; ``running`` is :func:`settle`'s to judge."""
    if row.event not in TASK_EVENTS:
        # a kind of row a newer release writes: nothing this release can act on
        return old if old is not None else TaskState(row.tasknum, "never", 0, None)
    starts, failures = (old.starts, old.failures) if old is not None else (0, 0)
    if row.event == "start":
        return TaskState(row.tasknum, "running", starts + 1, row, failures)
    state: State = row.status if row.status in END_STATES else "failed"  # type: ignore[assignment]
    return TaskState(row.tasknum, state, starts, row, failures + (state in FAILING))


def given_up(state: TaskState, max_attempts: int | None) -> bool:
    """Whether a task is given up: its latest attempt failed, and ``max_attempts`` of its
    attempts did (``interrupted`` ones do not count)."""
    if state.state == "given-up":
        return True
    return max_attempts is not None and state.state in FAILING and state.failures >= max_attempts


def start_alive(row: LedgerRow, here: str) -> bool | None:
    """Whether the run process of a ``start`` row still runs (see :func:`.alive.run_alive`)."""
    return run_alive(row.host, row.pid, row.note, row.job, here, row.array_task)


def settle(state: TaskState, here: str, max_attempts: int | None) -> TaskState:
    """A folded state as it stands now, on host ``here``: ``lost`` when it runs in a process
    known dead, ``given-up`` when :func:`given_up` says so."""
    if state.state == "running" and state.last is not None:
        if start_alive(state.last, here) is False:
            return state._replace(state="lost")
    elif given_up(state, max_attempts):
        return state._replace(state="given-up")
    return state


def piece_gone(state: TaskState, out: OutFile | None) -> str | None:
    """Why an ``ok`` task's records are not in OUT (``out``: OUT as found now, None when
    it does not exist), by its latest row (see :func:`piece_problem`); None when they may be.
    Such a task is not done: it counts as ``lost``, and the next run runs it again."""
    row = state.last
    if state.state != "ok" or row is None:
        return None
    return piece_problem(row.out_offset, row.bytes, row.out_ino, out)


def states_of(
    keys: Mapping[int, str],
    rows: Iterable[LedgerRow],
    *,
    host: str | None = None,
    max_attempts: int | None = None,
    out: str | os.PathLike[str] | None = None,
) -> dict[int, TaskState]:
    """The state of each task in ``keys`` (task number -> line) from the ledger ``rows``;
    with ``max_attempts``, ``given-up`` for the tasks :func:`given_up` says so of; with
    ``out`` (OUT's path, looked at after the rows are read), ``lost`` for an ``ok`` task
    whose records are not there (:func:`piece_gone`)."""
    folded: dict[int, TaskState] = {}
    for row in rows:
        if keys.get(row.tasknum) != row.key:
            continue  # another line had this number once: not this task's history
        folded[row.tasknum] = fold(row, folded.get(row.tasknum))
    here = os.uname().nodename if host is None else host
    now = out_file(out) if out is not None else None
    never = TaskState(0, "never", 0, None)
    states: dict[int, TaskState] = {}
    for num in keys:
        st = folded.get(num)
        if st is None:
            states[num] = never._replace(tasknum=num)
            continue
        if out is not None and piece_gone(st, now) is not None:
            st = st._replace(state="lost")
        states[num] = settle(st, here, max_attempts)
    return states


def read_states(
    path: str | os.PathLike[str],
    keys: Mapping[int, str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    stopper: Stopper | None = None,
) -> tuple[dict[int, TaskState], int]:
    """The state of each task in ``keys`` (number -> line) from a snapshot of the ledger,
    and the snapshot's size (where :meth:`Ledger.begin` starts looking for news)."""
    states, size, _settings = read_begin(path, keys, lock=lock, timeout=timeout, stopper=stopper)
    return states, size


class Begun(NamedTuple):
    """What a run begins with, from one snapshot of the ledger (:func:`begin_scan`)."""

    states: dict[int, TaskState]
    size: int  # of the snapshot: rows past it are news
    settings: dict[str, str] | None  # the latest run row's (None: no run recorded any)
    control: Control  # what close, open and stop rows said


def begin_scan(
    path: str | os.PathLike[str],
    keys: Mapping[int, str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    stopper: Stopper | None = None,
    out: str | os.PathLike[str] | None = None,
) -> Begun:
    """:func:`read_states`, the settings the ledger's latest ``run`` row records and its
    control rows, from the same snapshot and the same pass: what a run begins with. With
    ``out`` (OUT's path), an ``ok`` task whose records OUT no longer holds is ``lost`` (see
    :func:`states_of`): the cheap check of sizes and identity, no byte of OUT read."""
    scan = LedgerScan(path, lock=lock, timeout=timeout, stopper=stopper)
    settings: dict[str, str] | None = None
    control = Control()
    try:
        rows: list[LedgerRow] = []
        # the run rows' number joins the search: an array element still reads only its
        # chunk's rows (and the task-0 rows: run, close, open, stop)
        for n, at, line in scan.lines(AndRunRows(keys)):
            row = scan.row(n, line)
            if row.tasknum != RUN_TASKNUM:
                rows.append(row)
            elif row.event == RUN_EVENT:
                settings = settings_of(row.note) or settings
            else:
                control = control.fold(row.event, at, row.time, row.note)
        return Begun(states_of(keys, rows, out=out), scan.size, settings, control)
    finally:
        scan.close()


def read_begin(
    path: str | os.PathLike[str],
    keys: Mapping[int, str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    stopper: Stopper | None = None,
    out: str | os.PathLike[str] | None = None,
) -> tuple[dict[int, TaskState], int, dict[str, str] | None]:
    """:func:`begin_scan`'s states, snapshot size and settings."""
    begun = begin_scan(path, keys, lock=lock, timeout=timeout, stopper=stopper, out=out)
    return begun.states, begun.size, begun.settings


#: A tally's state codes: an index into this tuple.
_CODES: Final[tuple[State, ...]] = ("never", *END_STATES, "running", "lost", "given-up")  # type: ignore[assignment]
_NEVER: Final = _CODES.index("never")
_RUNNING: Final = _CODES.index("running")
_GIVEN_UP: Final = _CODES.index("given-up")
_FAILING_CODES: Final = frozenset(_CODES.index(name) for name in FAILING)
_TASK_EVENTS: Final = tuple(e.encode() for e in TASK_EVENTS)
_LOST: Final = _CODES.index("lost")
#: The codes of a task whose latest row is an end that judged it: ok, or a failure
#: (``interrupted`` is a stop, no verdict on the task).
_JUDGED: Final = frozenset(_CODES.index(name) for name in ("ok", *FAILING, "given-up"))
_OK: Final = _CODES.index("ok")
#: The column of ``records``: an end row's fields from there on are split only for a
#: look at the piece an ok row claims.
_RECORDS: Final = LEDGER_COLUMNS.index("records")
#: Length of a ledger time (``2026-11-24T10:00:00.000000Z``): only such times make a rate.
_TIME_LEN: Final = 27


def _effect(event: bytes, status: bytes) -> tuple[int, int, int]:
    """What :func:`fold` makes of a row of this ``event`` and ``status``, whatever came
    before: (state code, starts added, failures added). A tally keeps one per kind of row."""
    text = event.decode("utf-8", "surrogateescape"), status.decode("utf-8", "surrogateescape")
    st = fold(LedgerRow(text[0], "", 0, *[""] * 6, text[1], *[""] * 6), None)
    return _CODES.index(st.state), st.starts, st.failures


class _PieceCheck(NamedTuple):
    """What a tally checks an ok row's piece against: OUT as found, where ``out_offset``
    and ``out_ino`` are among an end row's fields from ``records`` on."""

    found: OutFile | None
    ino: bytes  # OUT's inode as the rows write it
    at_offset: int
    at_ino: int


def _piece_gone(tail: list[bytes], check: _PieceCheck) -> bool:
    """Whether an ok row's piece is not in OUT (see :func:`piece_gone`); ``tail``: the row's
    fields from ``records`` on."""
    length = tail[1] if len(tail) > 1 else b""
    offset = tail[check.at_offset] if len(tail) > check.at_offset else b""
    ino = tail[check.at_ino] if 0 <= check.at_ino < len(tail) else b""
    found = check.found
    if found is not None and ino in (check.ino, b"") and length.isdigit() and offset.isdigit():
        return int(offset) + int(length) > found.size  # the quick path: the same file
    why = piece_problem(offset.decode(), length.decode(), ino.decode(), found)
    return why is not None


def _out_of(
    ledger: str | os.PathLike[str],
    given: str | os.PathLike[str] | None,
    run_row: LedgerRow | None,
) -> str | None:
    """OUT, for the check of ok rows: the file given; else the one the latest run so far
    recorded (relative to the ledger), whether a file of that name exists or not (a
    rotated OUT's tasks are lost); else, for a ledger of an older release, the file the
    ledger is beside (OUT.ledger's OUT) when it exists; None: nothing to check against."""
    if given is not None:
        return os.fspath(given)
    path = os.fspath(ledger)
    settings = settings_of(run_row.note) if run_row is not None else None
    recorded = (settings or {}).get("out")
    if recorded:
        return os.path.join(os.path.dirname(os.path.abspath(path)), recorded)
    beside = path[: -len(".ledger")] if path.endswith(".ledger") else ""
    return beside if beside and os.path.lexists(beside) else None


class LedgerTally(Mapping[int, TaskState]):
    """Where every task of ``keys`` stands, from one pass over the ledger, kept in a few
    bytes per task: at a million tasks the rows themselves would not fit in memory.

    A mapping of task number to :class:`TaskState`, as :func:`states_of` gives; each
    state's ``last`` row is read again from the ledger's snapshot when it is asked for.
    :meth:`state` is the cheap question. The time of the first and the last row of these
    tasks, the rate's span, are compared as text (ledger times all have one form).
    ``settings`` are the latest ``run`` row's (None: none recorded); a task is ``given-up``
    by their ``max_attempts`` unless ``max_attempts`` is given.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        keys: Mapping[int, str],
        *,
        host: str | None = None,
        lock: str = "auto",
        timeout: float = 600.0,
        max_attempts: int | None = None,
        out: str | os.PathLike[str] | None = None,
    ) -> None:
        self._keys = keys
        size = max(keys, default=0) + 1
        code = bytearray(size)
        starts = array("I", bytes(4 * size))
        failures = array("I", bytes(4 * size))
        # what fold makes of a start row, and of any other row by its status (fold asks
        # nothing else of a row but whether it is a start, and its status)
        start = _effect(b"start", b"")
        ends: dict[bytes, tuple[int, int, int]] = {}
        run_at = -1  # the latest run row
        jobs: set[bytes] = set()  # the scheduler's jobs that started these tasks
        runs: set[tuple[bytes, bytes]] = set()  # (host, pid) of the runs that started them
        at = array("q", [-1]) * size
        seconds = array("d", [math.nan]) * size
        first = last = b""
        scan = LedgerScan(path, lock=lock, timeout=timeout)
        # An ok task's records must still be in OUT (see piece_gone). OUT is decided at the
        # first end row, after the run rows that come before any task's rows: see _out_of.
        check: _PieceCheck | None = None
        decided = False
        try:
            for lineno, offset, line in scan.lines():
                event, time, num, key, rest = line.split(b"\t", 4)
                if not decided and event == b"end":
                    decided = True
                    # where the piece's columns are, counted from ``records`` (see below)
                    at_offset = scan.later_index("out_offset") - _RECORDS
                    where = _out_of(path, out, scan.row_at(run_at) if run_at >= 0 else None)
                    if at_offset >= 0 and where is not None:
                        found = out_file(where)
                        ino = b"" if found is None else str(found.ino).encode()
                        at_ino = scan.later_index("out_ino") - _RECORDS
                        check = _PieceCheck(found, ino, at_offset, at_ino)
                try:
                    n = int(num)
                except ValueError:
                    scan.row(lineno, line)  # raises: not a ledger row
                    raise
                want = keys.get(n)
                if want is None:
                    if n == RUN_TASKNUM and event == RUN_EVENT.encode():
                        run_at = offset
                    continue
                text = key.decode("utf-8", "surrogateescape")
                if (unescape_tsv(text) if b"\\" in key else text) != want:
                    continue  # another line had this number once: not this task's history
                if len(time) == _TIME_LEN:
                    if not first or time < first:
                        first = time
                    if time > last:
                        last = time
                if event not in _TASK_EVENTS:
                    continue  # a kind of row a newer release writes (see fold)
                at[n] = offset
                if event == b"start":
                    # attempt job ...: the job, and nothing split further
                    f = rest.split(b"\t", 5)
                    jobs.add(f[1])
                    runs.add((f[3], f[4]) if len(f) > 4 else (b"", b""))
                    code[n] = start[0]
                    starts[n] += start[1]
                    if start[2]:
                        failures[n] += start[2]
                    seconds[n] = math.nan
                    continue
                # attempt job array_task host pid status exit signal seconds ...
                fields = rest.split(b"\t", 9)
                effect = ends.get(fields[5])
                if effect is None:
                    effect = ends[fields[5]] = _effect(b"end", fields[5])
                code[n] = effect[0]
                if check is not None and effect[0] == _OK:
                    # records bytes note ...: is the piece it claims still in OUT?
                    tail = fields[9].split(b"\t")
                    if _piece_gone(tail, check):
                        code[n] = _LOST
                if effect[1]:
                    starts[n] += effect[1]
                if effect[2]:
                    failures[n] += effect[2]
                try:
                    seconds[n] = float(fields[8])
                except ValueError:
                    seconds[n] = math.nan
            self.settings = settings_of(scan.row_at(run_at).note) if run_at >= 0 else None
            if max_attempts is None:
                max_attempts = recorded_max_attempts(self.settings)
            self.max_attempts = max_attempts
            here = os.uname().nodename if host is None else host
            unknown: set[int] = set()
            # only a running state and a failing one settle into another (lost, given-up)
            for n in keys:
                c = code[n]
                if c == _RUNNING or (max_attempts is not None and c in _FAILING_CODES):
                    st = TaskState(n, _CODES[c], starts[n], None, failures[n])
                    if c == _RUNNING:
                        st = st._replace(last=scan.row_at(at[n]))
                        if st.last is not None and start_alive(st.last, here) is None:
                            unknown.add(n)  # nothing here can tell whether its run lives
                    code[n] = _CODES.index(settle(st, here, max_attempts).state)
        except BaseException:
            scan.close()
            raise
        self._scan = scan
        weakref.finalize(self, scan.close)
        self._code, self._starts, self._at, self._seconds = code, starts, at, seconds
        self._failures = failures
        self.jobs = sorted(j.decode("utf-8", "surrogateescape") for j in jobs if j)
        self.runs = len(runs)  # runs that started these tasks
        #: running tasks whose run's life nothing here can tell (another host, no scheduler)
        self.unknown = frozenset(unknown)
        self.first_time = first.decode() or None
        self.last_time = last.decode() or None

    def state(self, num: int) -> State:
        return _CODES[self._code[num]] if num in self._keys else "never"

    def counts(self) -> dict[str, int]:
        """How many tasks are in each state of :data:`STATES`, zero included."""
        counts = dict.fromkeys(STATES, 0)
        code = self._code
        for n in self._keys:
            counts[_CODES[code[n]]] += 1
        return counts

    def median_seconds(self) -> float | None:
        """The median time of the tasks whose latest row is an end (None: none is)."""
        seconds, code = self._seconds, self._code
        times = sorted(
            secs for n in self._keys if code[n] != _NEVER and not math.isnan(secs := seconds[n])
        )
        if not times:
            return None
        half = len(times) // 2
        return times[half] if len(times) % 2 else (times[half - 1] + times[half]) / 2

    def slowest(self, count: int) -> list[tuple[int, float, str]]:
        """The ``count`` tasks whose latest row is an end that took longest: (task number,
        seconds, task line), slowest first."""
        seconds = self._seconds
        ended = (
            (n, seconds[n])
            for n in self._keys
            if self._code[n] != _NEVER and not math.isnan(seconds[n])
        )
        return [(n, s, self._keys[n]) for n, s in heapq.nlargest(count, ended, key=lambda x: x[1])]

    def last_ended(self, count: int) -> list[LedgerRow]:
        """The end rows of the ``count`` tasks that ended last, ok or failed (their latest
        row; ``interrupted`` is no verdict), oldest first: what the last tasks to end say."""
        at, code = self._at, self._code
        latest = heapq.nlargest(count, (at[n] for n in self._keys if code[n] in _JUDGED))
        return [self._scan.row_at(offset) for offset in sorted(latest)]

    def __getitem__(self, num: int) -> TaskState:
        if num not in self._keys:
            raise KeyError(num)
        at = self._at[num]
        row = self._scan.row_at(at) if at >= 0 else None
        return TaskState(num, _CODES[self._code[num]], self._starts[num], row, self._failures[num])

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
