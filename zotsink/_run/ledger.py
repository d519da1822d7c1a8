"""The ledger: one TSV of task events, appended under the lock with fsync, read as a snapshot.

Each row is an event of one task: ``start`` when it starts, ``end`` when it ends, with the
end's ``status`` (``ok``, ``failed``, ``killed``, ``timeout``, ``interrupted``). A task's
state is its latest row whose ``key`` is the task's line today: a row written for another
line (the task list was edited since) says nothing about this one. A ``start`` with no
``end`` is ``running`` while the ``run`` process that wrote it lives, and ``lost`` once it is
known dead (same host, process gone); a task with no row is ``never``.

A ``run`` row (task number 0, no key) records how a run was called: its settings, a JSON
object of text values in ``note`` (see :data:`COMPARED_SETTINGS`). The latest one counts; it is
written with a run's first claim when the ledger has none, or when its settings changed.
Readers of task rows never see it: no task has the number 0.
"""

from __future__ import annotations

import heapq
import math
import os
import re
import warnings
import weakref
from array import array
from collections import deque
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple, Protocol

from .._core.fileio import line_blocks, pread_chunks, side_file_problem
from .._core.header import existing_header
from .._core.outlet import Outcome, Outlet
from .._core.records import MAX_LINE, Encoder, decode_row, unescape_tsv
from .._core.snapshot import snapshot
from .._core.stamp import stamp_values, utc_now
from .._core.stop import Stopper
from .._core.writer import Writer
from ..errors import InputError, UsageError, ZotsinkWarning
from .alive import PROC_START, proc_start, run_alive
from .queue import Picked, TaskQueue

__all__ = [
    "COMPARED_SETTINGS",
    "END_STATES",
    "FAILING",
    "LATER_COLUMNS",
    "LEDGER_COLUMNS",
    "STATES",
    "Claims",
    "Ledger",
    "LedgerRow",
    "LedgerScan",
    "LedgerTally",
    "TaskState",
    "claims",
    "given_up",
    "read_begin",
    "read_ledger",
    "read_states",
    "recorded_max_attempts",
    "settings_conflict",
    "settings_message",
    "start_alive",
    "states_of",
]

#: The ledger's header, in order.
LEDGER_COLUMNS: Final = (
    "event",
    "time",
    "tasknum",
    "key",
    "attempt",
    "job",
    "array_task",
    "host",
    "pid",
    "status",
    "exit",
    "signal",
    "seconds",
    "records",
    "bytes",
    "note",
)
#: Columns after LEDGER_COLUMNS, in ledgers that have them (older ledgers end at ``note``
#: and are still read and appended to as they are): ``out_offset`` is where the records of
#: the attempt begin in OUT, so that with ``bytes`` it names the part of OUT that attempt
#: wrote; ``out_header`` is the length of OUT's header line (0: OUT has none).
LATER_COLUMNS: Final = ("out_offset", "out_header")
#: ``status`` values of ``end`` rows.
END_STATES: Final = ("ok", "failed", "killed", "timeout", "interrupted")
#: End statuses that count towards ``max_attempts`` (``interrupted`` does not: a walltime
#: warning or a cancel says nothing of the task).
FAILING: Final = ("failed", "killed", "timeout")
#: Every state a task can be in, in the order reports list them. ``given-up``: its latest
#: attempt failed, and its failed attempts reached the run's ``max_attempts``.
STATES: Final = (*END_STATES, "given-up", "running", "lost", "never")
#: The ``event`` of the row that records a run's settings, and its task number.
RUN_EVENT: Final = "run"
RUN_TASKNUM: Final = 0
#: Settings a resubmission must share with the recorded ones (a key missing on one side
#: counts as ""). ``chunk`` is compared only when both runs had an array index (a run
#: without one runs every task, whatever its chunk). Other recorded settings may change
#: from run to run: ``tasks``, ``max_attempts``, and ``base``, which only names the indices
#: of the same chunks (the parts of a resubmission split under the site's MaxArraySize each
#: run under a base of their own); the first recorded base stays on record.
COMPARED_SETTINGS: Final = ("chunk", "format", "columns", "kv", "stamp", "command", "call")
_ARRAY_SETTINGS: Final = ("chunk",)


class LedgerRow(NamedTuple):
    """One row of the ledger, values as text (``tasknum`` as int)."""

    event: str
    time: str
    tasknum: int
    key: str
    attempt: str
    job: str
    array_task: str
    host: str
    pid: str
    status: str
    exit: str
    signal: str
    seconds: str
    records: str
    bytes: str
    note: str
    out_offset: str = ""  # "" in an older ledger, in a start row, and for no records
    out_header: str = ""


class Claimable(Protocol):
    """A task as :meth:`Ledger.claim` takes it: its number and its line."""

    @property
    def num(self) -> int: ...

    @property
    def line(self) -> str: ...


class TaskState(NamedTuple):
    """Where one task stands: its state, how often it was started, its latest row."""

    tasknum: int
    state: str
    starts: int
    last: LedgerRow | None
    failures: int = 0  # attempts that ended failed, killed or timeout (see FAILING)


def given_up(state: TaskState, max_attempts: int | None) -> bool:
    """Whether a task is given up: its latest attempt failed, and ``max_attempts`` of its
    attempts did (``interrupted`` ones do not count)."""
    if state.state == "given-up":
        return True
    return max_attempts is not None and state.state in FAILING and state.failures >= max_attempts


def settings_conflict(
    recorded: Mapping[str, str], new: Mapping[str, str]
) -> tuple[str, str, str] | None:
    """The first setting of :data:`COMPARED_SETTINGS` that differs: (name, recorded, new)."""
    for name in COMPARED_SETTINGS:
        if name in _ARRAY_SETTINGS and not (recorded.get(name) and new.get(name)):
            continue
        old, now = recorded.get(name, ""), new.get(name, "")
        if old != now:
            return name, old, now
    return None


def _settings_of(note: str) -> dict[str, str] | None:
    """The settings a ``run`` row's note holds; None when it holds none (damaged)."""
    import json  # here: cat and verify read the ledger without settings, and skip it

    try:
        value = json.loads(note)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


class Ledger:
    """Appends rows for the tasks this process runs; every append is locked and fsynced."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock: str = "auto",
        timeout: float = 600.0,
        env: Mapping[str, str] | None = None,
        stopper: Stopper | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.path = os.fspath(path)
        # A ledger begun by an older zotsink keeps its columns: its header cannot change.
        old = existing_header(self.path) == Encoder("tsv", LEDGER_COLUMNS).header_line()
        self.columns = LEDGER_COLUMNS if old else (*LEDGER_COLUMNS, *LATER_COLUMNS)
        self.encoder = Encoder("tsv", self.columns)
        # fsync always: a start row must be on disk before the task runs, or a node that
        # dies takes the knowledge that the task started with it.
        self.timeout = timeout
        # A side file: never through a link, only ever this user's (a ledger planted with
        # forged ok rows would make every task be skipped).
        self.writer = Writer(
            self.path,
            lock=lock,
            sync="fsync",
            header=self.encoder.header_line(),
            side_file=True,
            prepare=self._claim_under_lock,
        )
        self.outlet = Outlet(self.writer, timeout=timeout, stopper=stopper)
        # What this run knows of the tasks it may claim (see begin() and claim()).
        self._keys: Mapping[int, str] = {}
        self._states: dict[int, TaskState] = {}
        self._seen = 0  # ledger bytes read so far: rows past it are news
        self._rerun: set[int] = set()  # ok before this run began, to run again (--rerun)
        self._want: tuple[TaskQueue[Any], int] | None = None  # a claim under way
        self._picked = Picked([], [])
        self._claimed_bytes = 0
        # This run's settings, the row that records them when the ledger's differ or are
        # none (written with the first claim), and the tasks given up under the lock.
        self._settings: Mapping[str, str] | None = None
        self._settings_row = b""
        self._conflict: str | None = None
        self.max_attempts: int | None = None
        self.given_up: set[int] = set()
        job, array_task, host = stamp_values(("job", "task", "host"), env)
        self._fixed = (job, array_task, host, str(os.getpid()))
        started = proc_start(os.getpid())
        self._start_note = {} if started is None else {"note": PROC_START + started}

    def start_row(self, tasknum: int, key: str, attempt: int) -> bytes:
        return self._row("start", tasknum, key, attempt, self._start_note)

    def end_row(self, tasknum: int, key: str, attempt: int, **fields: Any) -> bytes:
        return self._row("end", tasknum, key, attempt, fields)

    def settings_row(self, settings: Mapping[str, str]) -> bytes:
        """The ``run`` row that records ``settings`` (see :data:`COMPARED_SETTINGS`)."""
        import json  # see _settings_of

        note = json.dumps(dict(settings), ensure_ascii=False, sort_keys=True)
        return self._row(RUN_EVENT, RUN_TASKNUM, "", "", {"note": note})

    def _row(
        self, event: str, tasknum: int, key: str, attempt: int | str, fields: Mapping[str, Any]
    ) -> bytes:
        job, array_task, host, pid = self._fixed
        values = [event, utc_now(), tasknum, key, attempt, job, array_task, host, pid]
        values += [fields.get(c, "") for c in self.columns[len(values) :]]
        return self.encoder.encode(values)

    def append(self, rows: Sequence[bytes], *, spill: bool = True) -> None:
        """Append rows in one locked, fsynced write (raises LockTimeout/LockError/WriteError).

        With ``spill`` (end rows) rows that cannot be written are saved to a spill file of the
        ledger, which ``zotsink recover LEDGER`` folds back; start rows are not spilled: the
        tasks they announce are then not started.
        """
        if not rows:
            return
        if spill:
            err = self.outlet.write(b"".join(rows), len(rows))
            if err is not None:
                raise err
        else:
            self.outlet.write_or_raise(b"".join(rows))

    def begin(
        self,
        keys: Mapping[int, str],
        states: Mapping[int, TaskState],
        seen: int,
        *,
        rerun: bool,
        settings: Mapping[str, str] | None = None,
        recorded: Mapping[str, str] | None = None,
        max_attempts: int | None = None,
    ) -> None:
        """What this run found in the ledger's snapshot (``seen`` bytes of it) for its tasks
        (number -> line): the start of what :meth:`claim` keeps up to date.

        ``settings``: how this run was called, recorded with the first claim unless
        ``recorded`` (the ledger's latest) says the same; a run row of other settings that
        another run writes meanwhile makes the claim raise :class:`UsageError`. Tasks whose
        failed attempts reached ``max_attempts`` are not claimed (see :func:`given_up`).
        """
        self._settings = settings
        self._settings_row = b""
        if settings is not None and dict(recorded or {}) != dict(settings):
            self._settings_row = self.settings_row(settings)
        self.max_attempts = max_attempts
        self._keys = keys
        self._states = dict(states)
        self._seen = seen
        self._rerun = {n for n, st in states.items() if st.state == "ok"} if rerun else set()

    def claim(
        self, queue: TaskQueue[Any] | deque[Claimable], want: int, ends: Sequence[bytes]
    ) -> tuple[list[tuple[Any, int]], list[Any]]:
        """Claim up to ``want`` tasks that ``queue`` picks, under the ledger's lock.

        Under one lock hold: the rows other runs appended since this run last looked are
        read (and the whole history of tasks the queue got since, see
        :attr:`TaskQueue.unlearned`); the queue picks by those states (a task finished
        (``ok``) or running in a live process, this host's pid table or else the scheduler,
        is dropped); the picked ones get their next attempt number and a ``start`` row,
        written with ``ends`` in one fsynced append. Two runs started together so never run
        the same task, and attempt numbers are unique. Returns the tasks claimed (with their
        attempt) and those dropped. Raises like :meth:`append` (nothing claimed then).

        ``queue`` may be a plain deque of tasks, picked from by what :meth:`begin` was told
        (``rerun``, ``max_attempts``).
        """
        if isinstance(queue, deque):
            queue = TaskQueue.over(queue, given_up=self.gives_up, rerun_ok=self._rerun)
        self._want = (queue, want)
        self._picked = Picked([], [])
        try:
            self.outlet.write_or_raise(b"".join(ends))
        except BaseException:
            queue.unpick(self._picked)  # not claimed: back where they were
            raise
        finally:
            self._want = None
            self.given_up |= queue.given_up
        if self._conflict is not None:
            raise UsageError(self._conflict, path=self.path)
        self._settings_row = b""  # on disk now: recorded once
        # This run began under its settings: another run that records others from now on
        # (--new-settings) does not stop it halfway.
        self._settings = None
        # this run's own rows are no news to it: the next look starts after them (the
        # writer put them after a header or a newline, if it wrote either)
        self._seen = self.writer.last_at + self._claimed_bytes
        return self._picked.claimed, self._picked.dropped

    def gives_up(self, state: TaskState) -> bool:
        """Whether ``state`` is given up under this run's ``max_attempts`` (see :meth:`begin`)."""
        return given_up(state, self.max_attempts)

    def _claim_under_lock(self, fd: int, st: os.stat_result, data: bytes) -> bytes:
        """The writer's hook, run under the ledger's exclusive lock before each append: with
        a claim under way, the news read, the queue's pick and its start rows added."""
        if self._want is None:
            return data
        queue, want = self._want
        if queue.unlearned:
            self._read_history(fd, queue)
        self._read_news(fd, st.st_size)
        # this run's own end rows, about to be written: its failures count too
        for lines, _whole in line_blocks((data,)):
            self._fold(lines, news=False)
        if self._conflict is not None:
            return data  # another run recorded other settings: nothing is claimed
        here = os.uname().nodename
        self._picked = queue.pick(want, self._states, lambda row: start_alive(row, here))
        for task, attempt in self._picked.claimed:  # running here from now on
            old = self._states.get(task.num)
            failures = old.failures if old is not None else 0
            self._states[task.num] = TaskState(task.num, "running", attempt, None, failures)
        starts: list[bytes] = [self._settings_row] if self._settings_row else []
        starts += [self.start_row(t.num, t.line, attempt) for t, attempt in self._picked.claimed]
        rows = data + b"".join(starts)
        self._claimed_bytes = len(rows)
        return rows

    def _read_history(self, fd: int, queue: TaskQueue[Any]) -> None:
        """Fold the rows before the news of tasks the queue got after this run began (their
        rows were passed over then), and let the queue learn their states."""
        keys, self._keys = self._keys, dict(queue.unlearned)
        try:
            rows: list[bytes] = []
            for lines, whole in line_blocks(pread_chunks(fd, self._seen, 1 << 20)):
                if whole:
                    rows += lines
            self._fold(rows, news=False)
        finally:
            self._keys = keys
        queue.learn(self._states)

    def _read_news(self, fd: int, size: int) -> None:
        """Fold the rows appended since the last look into the states of this run's tasks."""
        if size <= self._seen:
            return
        rows: list[bytes] = []
        for lines, whole in line_blocks(pread_chunks(fd, size, 1 << 20, start=self._seen)):
            if whole:  # a last piece without its newline is a torn row: not a row
                rows += lines
        self._fold(rows, news=True)

    def _fold(self, rows: Iterable[bytes], *, news: bool) -> None:
        """Fold ledger rows into the states of this run's tasks; with ``news`` (rows other
        runs wrote) a ``run`` row of settings other than this run's is a conflict."""
        here = os.uname().nodename
        for line in rows:
            if not line or line.startswith(b"event\t"):
                continue
            num = _tasknum(line)
            if num == RUN_TASKNUM and news and line.startswith(RUN_EVENT.encode() + b"\t"):
                self._check_news_settings(line)
                continue
            key = self._keys.get(num)
            if key is None:
                continue
            row = decode_row(line.decode("utf-8", "surrogateescape"), "tsv")
            if len(row) < len(LEDGER_COLUMNS) or row[3] != key:
                continue  # torn, or another line had this number once
            full = LedgerRow(row[0], row[1], num, *row[3 : len(LEDGER_COLUMNS)])
            old = self._states.get(num)
            starts = (old.starts if old is not None else 0) + (full.event == "start")
            failures = old.failures if old is not None else 0
            if full.event == "start":
                state = "lost" if start_alive(full, here) is False else "running"
            else:
                state = full.status if full.status in END_STATES else "failed"
                failures += state in FAILING
            self._states[num] = TaskState(num, state, starts, full, failures)

    def _check_news_settings(self, line: bytes) -> None:
        if self._settings is None:
            return
        row = decode_row(line.decode("utf-8", "surrogateescape"), "tsv")
        if len(row) < len(LEDGER_COLUMNS):
            return
        recorded = _settings_of(row[LEDGER_COLUMNS.index("note")])
        if recorded is None:
            return
        differ = settings_conflict(recorded, self._settings)
        if differ is not None:
            self._conflict = settings_message(self.path, *differ)
        elif self._settings_row and recorded == dict(self._settings):
            self._settings_row = b""  # another run recorded the same: once is enough

    def outcome(self) -> Outcome:
        return self.outlet.outcome()

    def close(self) -> None:
        self.outlet.close()


def read_ledger(
    path: str | os.PathLike[str],
    *,
    tasknums: Collection[int] | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[LedgerRow]:
    """The rows of a ledger, from a consistent snapshot; nothing when it does not exist yet.

    With ``tasknums`` only the rows of those tasks: a chunk of an array (``run --index``)
    finds its rows with one C-speed search per block of the ledger, and no other row is even
    split, so reading stays flat in memory and fast however many tasks the ledger holds.
    A torn row (a ``run`` killed mid-append, see :class:`LedgerScan`) is left out with a
    warning.
    """
    scan = LedgerScan(path, lock=lock, timeout=timeout)
    try:
        for lineno, _at, line in scan.lines(tasknums):
            if _tasknum(line) != RUN_TASKNUM:  # settings: read_begin and LedgerTally
                yield scan.row(lineno, line)
    finally:
        scan.close()


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


def read_begin(
    path: str | os.PathLike[str],
    keys: Mapping[int, str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    stopper: Stopper | None = None,
) -> tuple[dict[int, TaskState], int, dict[str, str] | None]:
    """:func:`read_states`, and the settings the ledger's latest ``run`` row records (None:
    no run recorded any), from the same snapshot: what a run begins with."""
    scan = LedgerScan(path, lock=lock, timeout=timeout, stopper=stopper)
    settings: dict[str, str] | None = None
    try:
        rows: list[LedgerRow] = []
        # the run rows' number joins the search: an array element still reads only its
        # chunk's rows
        for n, _at, line in scan.lines(_AndRunRows(keys)):
            row = scan.row(n, line)
            if row.tasknum != RUN_TASKNUM:
                rows.append(row)
            elif row.event == RUN_EVENT:
                settings = _settings_of(row.note) or settings
        return states_of(keys, rows), scan.size, settings
    finally:
        scan.close()


class _AndRunRows(Collection[int]):
    """Task numbers and the run rows' 0, without a copy of a million numbers."""

    def __init__(self, keys: Collection[int]) -> None:
        self._keys = keys

    def __contains__(self, num: object) -> bool:
        return num == RUN_TASKNUM or num in self._keys

    def __iter__(self) -> Iterator[int]:
        yield RUN_TASKNUM
        yield from self._keys

    def __len__(self) -> int:
        return len(self._keys) + 1


def recorded_max_attempts(settings: Mapping[str, str] | None) -> int | None:
    """The ``max_attempts`` recorded settings give (None: no limit)."""
    value = (settings or {}).get("max_attempts", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def settings_message(path: str, name: str, old: str, new: str) -> str:
    """Why a run whose setting ``name`` differs from the ledger's is refused, and the ways on."""
    how = {"command": "the command", "call": "--call", "format": "--format (or OUT's name)"}
    option = how.get(name, f"--{name}")
    return (
        f"the ledger {path} records {name} {old or '(none)'!r} for this run's tasks, and "
        f"this run has {new or '(none)'!r}: a resubmission must be called as the run was. "
        f"Run with the recorded {option} (`zotsink status TASKS --ledger {path} --json` "
        "shows every recorded setting), or give a new OUT or --ledger for a new run, or add "
        "--new-settings to record this run's settings and go on with the tasks not ok yet"
    )


#: A search per block instead of a look at every row, up to this many task numbers.
_SEARCH_MAX: Final = 5000


class LedgerScan:
    """One pass over a ledger's snapshot: its whole rows as bytes, the header checked.

    A row with fewer fields than the header is a torn row: a ``run`` died while appending
    it, and the next writer started a fresh line after it (as in OUT). It is left out, and
    the pass ends with a warning naming how many and the first line; a row with more
    fields, or whose task number is not a number, is damage and raises :class:`InputError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock: str = "auto",
        timeout: float = 600.0,
        stopper: Stopper | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.torn: list[int] = []  # line numbers of the torn rows seen
        self._fd = -1
        self._size = 0
        self.width = 0
        self._later: list[int] = []  # where LATER_COLUMNS are in this ledger (-1: not)
        if not os.path.lexists(self.path):
            return
        self._fd, self._size = snapshot(self.path, lock=lock, timeout=timeout, stopper=stopper)
        problem = side_file_problem(os.fstat(self._fd))
        if problem:
            self.close()
            raise UsageError(
                f"the ledger {self.path} is not to be trusted ({problem}): a ledger is only "
                "ever your own, and another user may have put this one there to make your "
                "runs skip their tasks; remove it, or give --ledger a path of your own",
                path=self.path,
            )

    @property
    def exists(self) -> bool:
        return self._fd >= 0

    @property
    def size(self) -> int:
        """The snapshot's size: the rows read are those before this byte."""
        return self._size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _blocks(self) -> Iterator[tuple[int, int, bytes]]:
        """(number of the block's first line, its offset, whole lines of the ledger) in
        blocks; a final piece with no newline (a row being written, or torn) is not a row
        yet. A line longer than any record may be (``MAX_LINE``: a crash can leave a run of
        zero bytes where a row was being written) is never held whole: it is skipped to
        its newline and counted as a torn row."""
        lineno, offset = 1, 0
        rest: list[bytes] = []
        held = 0  # bytes in ``rest``: the start of a line whose newline is still to come
        skipping = False
        for chunk in pread_chunks(self._fd, self._size, 1 << 22):
            if skipping:
                nl = chunk.find(b"\n")
                if nl < 0:
                    offset += len(chunk)
                    continue
                self.torn.append(lineno)
                lineno += 1
                offset += nl + 1
                chunk = chunk[nl + 1 :]
                skipping = False
            nl = chunk.rfind(b"\n")
            if nl < 0:
                rest.append(chunk)
                held += len(chunk)
                if held > MAX_LINE:
                    offset += held
                    rest, held, skipping = [], 0, True
                continue
            block = b"".join([*rest, chunk[: nl + 1]]) if rest else chunk[: nl + 1]
            rest = [chunk[nl + 1 :]] if nl + 1 < len(chunk) else []
            held = len(chunk) - nl - 1
            yield lineno, offset, block
            lineno += block.count(b"\n")
            offset += len(block)

    def _header(self, block: bytes) -> int:
        nl = block.find(b"\n")
        head = decode_row(block[:nl].decode("utf-8", "surrogateescape"), "tsv")
        if tuple(head[: len(LEDGER_COLUMNS)]) != LEDGER_COLUMNS:
            raise InputError(
                f"{self.path} is not a zotsink ledger (its first line is not the ledger "
                "header); give the ledger with --ledger",
                path=self.path,
            )
        self.width = len(head)
        self._later = [head.index(c) if c in head else -1 for c in LATER_COLUMNS]
        return nl + 1

    def lines(self, tasknums: Collection[int] | None = None) -> Iterator[tuple[int, int, bytes]]:
        """``(line number, offset, row)`` of every whole row (of ``tasknums`` only, when
        given), the row without its newline."""
        if self._fd < 0:
            return
        search = None
        if tasknums is not None and len(tasknums) <= _SEARCH_MAX:
            if not tasknums:
                return
            nums = sorted({str(int(n)).encode() for n in tasknums})
            # The numbers as one trie-shaped pattern after the time (which utc_now always
            # ends in "Z": what makes the search selective) and between two tabs: the
            # regular expression engine finds the candidates at C speed, and only their
            # rows are looked at (the tabs before a candidate say whether it is the task
            # number).
            search = re.compile(rb"Z\t" + _alternation(nums) + rb"\t")
        tabs = -1
        for lineno, offset, block in self._blocks():
            start = 0
            if tabs < 0:
                start = self._header(block)
                tabs = self.width - 1
                lineno += 1
            if search is not None:
                seen = -1
                pos, n = start, lineno  # line number ``n`` starts at ``pos``
                for m in search.finditer(block, start):
                    at = block.rfind(b"\n", 0, m.start()) + 1
                    if at == seen or at < start or block.count(b"\t", at, m.start()) != 1:
                        continue  # the same row again, or the number in another field
                    seen = at
                    line = block[at : block.find(b"\n", m.start())]
                    n += block.count(b"\n", pos, at)
                    pos = at
                    if line.count(b"\t") != tabs:
                        self._bad(n, line)
                    else:
                        yield n, offset + at, line
                continue
            # the block holds whole rows only: one list of lines, cut by the one splitter
            lines = next(line_blocks((block[start:],)), ([], True))[0]
            pos = offset + start
            for n, line in enumerate(lines, lineno):
                at = pos
                pos += len(line) + 1
                if line.count(b"\t") != tabs:
                    self._bad(n, line)
                    continue
                if tasknums is not None and _tasknum(line) not in tasknums:
                    continue
                yield n, at, line
        if self.torn:
            warnings.warn(
                ZotsinkWarning(
                    f"{self.path}: left out {len(self.torn)} torn row(s), the first at line "
                    f"{self.torn[0]} (a run killed while writing it; the task's next row "
                    "counts)"
                ),
                stacklevel=2,
            )

    def later_missing(self) -> bool:
        """Whether this ledger lacks a column of LATER_COLUMNS (an older release began it);
        known once :meth:`lines` has read the header."""
        return -1 in self._later or not self._later

    def _bad(self, lineno: int, line: bytes) -> None:
        if line.count(b"\t") < self.width - 1:
            self.torn.append(lineno)
            return
        raise InputError(
            f"{self.path} line {lineno} is not a ledger row; run `zotsink verify {self.path} "
            "-f tsv`",
            path=self.path,
        )

    def row(self, lineno: int, line: bytes) -> LedgerRow:
        """A whole row from :meth:`lines`, decoded."""
        row = decode_row(line.decode("utf-8", "surrogateescape"), "tsv")
        if not row[2].isdigit():
            raise InputError(
                f"{self.path} line {lineno} is not a ledger row; run `zotsink verify "
                f"{self.path} -f tsv`",
                path=self.path,
            )
        later = [row[i] if i >= 0 else "" for i in self._later]
        return LedgerRow(row[0], row[1], int(row[2]), *row[3 : len(LEDGER_COLUMNS)], *later)

    def row_at(self, offset: int) -> LedgerRow:
        """The row that starts at byte ``offset`` of the snapshot, one :meth:`lines` gave."""
        out = b""
        while True:
            data = os.pread(self._fd, 4096, offset + len(out))
            nl = data.find(b"\n")
            if nl >= 0:
                return self.row(0, out + data[:nl])
            if not data:
                return self.row(0, out)
            out += data


class Claims(NamedTuple):
    """The parts of OUT that the ledger's ``ok`` rows claim: what OUT holds exactly once."""

    header: int  # bytes of OUT's header line (0: OUT has none)
    parts: list[tuple[int, int]]  # (offset, length) of each task's latest ok attempt


def claims(
    path: str | os.PathLike[str], *, lock: str = "auto", timeout: float = 600.0
) -> Claims | None:
    """What the ledger at ``path`` says OUT holds once; None when there is no ledger, or it
    was begun by a release that did not record where each attempt's records are.

    Each task (its number and line) counts with its latest ``ok`` attempt: an attempt that
    failed, was interrupted, or ended in a crash before its row was written claims nothing,
    and its lines in OUT are left out of the view.
    """
    p = os.fspath(path)
    if not os.path.lexists(p):
        return None
    scan = LedgerScan(p, lock=lock, timeout=timeout)
    try:
        latest: dict[tuple[int, str], tuple[int, int]] = {}
        header = 0
        known = False
        for lineno, _at, line in scan.lines():
            if not known:
                if scan.later_missing():
                    return None
                known = True
            if not line.startswith(b"end\t"):
                continue
            row = scan.row(lineno, line)
            if row.out_header.isdigit():
                header = int(row.out_header)
            if row.status != "ok":
                continue
            if row.out_offset.isdigit() and row.bytes.isdigit() and int(row.bytes):
                latest[(row.tasknum, row.key)] = (int(row.out_offset), int(row.bytes))
            else:
                latest.pop((row.tasknum, row.key), None)  # its latest ok attempt printed none
        if not known and scan.later_missing():
            return None
    finally:
        scan.close()
    return Claims(header, sorted(latest.values()))


def _alternation(words: Sequence[bytes]) -> bytes:
    """A pattern that matches exactly the sorted, distinct ``words``, shaped as a trie
    (``12|13`` becomes ``1(?:2|3)``), which the engine tries far faster than a flat list."""
    groups: dict[bytes, list[bytes]] = {}
    optional = False
    for w in words:
        if w:
            groups.setdefault(w[:1], []).append(w[1:])
        else:
            optional = True
    parts = [re.escape(k) + _alternation(rest) for k, rest in groups.items()]
    if not parts:
        return b""
    if len(parts) == 1 and not optional:
        return parts[0]
    group = b"(?:" + b"|".join(parts) + b")"
    return group + b"?" if optional else group


def _tasknum(line: bytes) -> int:
    parts = line.split(b"\t", 3)
    try:
        return int(parts[2])
    except ValueError:
        return -1


def start_alive(row: LedgerRow, here: str) -> bool | None:
    """Whether the run process of a ``start`` row still runs (see :func:`.alive.run_alive`)."""
    return run_alive(row.host, row.pid, row.note, row.job, here)


def _start_state(row: LedgerRow, here: str) -> str:
    return "lost" if start_alive(row, here) is False else "running"


def states_of(
    keys: Mapping[int, str],
    rows: Iterable[LedgerRow],
    *,
    host: str | None = None,
    max_attempts: int | None = None,
) -> dict[int, TaskState]:
    """The state of each task in ``keys`` (task number -> line) from the ledger ``rows``;
    with ``max_attempts``, ``given-up`` for the tasks :func:`given_up` says so of."""
    last: dict[int, LedgerRow] = {}
    starts: dict[int, int] = {}
    failures: dict[int, int] = {}
    for row in rows:
        if keys.get(row.tasknum) != row.key:
            continue  # another line had this number once: not this task's history
        last[row.tasknum] = row
        if row.event == "start":
            starts[row.tasknum] = starts.get(row.tasknum, 0) + 1
        elif row.status in FAILING or row.status not in END_STATES:
            failures[row.tasknum] = failures.get(row.tasknum, 0) + 1
    here = os.uname().nodename if host is None else host
    out: dict[int, TaskState] = {}
    for num in keys:
        row = last.get(num)
        if row is None:
            state = "never"
        elif row.event == "start":
            state = _start_state(row, here)
        else:
            state = row.status if row.status in END_STATES else "failed"
        st = TaskState(num, state, starts.get(num, 0), row, failures.get(num, 0))
        if given_up(st, max_attempts):
            st = st._replace(state="given-up")
        out[num] = st
    return out


#: A tally's state codes: an index into this tuple ("start" only while reading).
_CODES: Final = ("never", "start", *END_STATES, "running", "lost", "given-up")
_END_CODE: Final = {name.encode(): _CODES.index(name) for name in END_STATES}
_FAILED: Final = _CODES.index("failed")
_FAILING_CODES: Final = frozenset(_CODES.index(name) for name in FAILING)
_GIVEN_UP: Final = _CODES.index("given-up")
_START: Final = _CODES.index("start")
#: Length of a ledger time (``2026-11-24T10:00:00.000000Z``): only such times make a rate.
_TIME_LEN: Final = 27


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
    ) -> None:
        self._keys = keys
        size = max(keys, default=0) + 1
        code = bytearray(size)
        starts = array("I", bytes(4 * size))
        failures = array("I", bytes(4 * size))
        run_at = -1  # the latest run row
        jobs: set[bytes] = set()  # the scheduler's jobs that started these tasks
        at = array("q", [-1]) * size
        seconds = array("d", [math.nan]) * size
        first = last = b""
        scan = LedgerScan(path, lock=lock, timeout=timeout)
        try:
            for lineno, offset, line in scan.lines():
                event, time, num, key, rest = line.split(b"\t", 4)
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
                at[n] = offset
                if event == b"start":
                    jobs.add(rest.split(b"\t", 2)[1])
                    starts[n] += 1
                    code[n] = _START
                    seconds[n] = math.nan
                    continue
                # attempt job array_task host pid status exit signal seconds ...
                fields = rest.split(b"\t", 9)
                code[n] = _END_CODE.get(fields[5], _FAILED)
                if code[n] in _FAILING_CODES:
                    failures[n] += 1
                try:
                    seconds[n] = float(fields[8])
                except ValueError:
                    seconds[n] = math.nan
            self.settings = _settings_of(scan.row_at(run_at).note) if run_at >= 0 else None
            if max_attempts is None:
                max_attempts = recorded_max_attempts(self.settings)
            self.max_attempts = max_attempts
            here = os.uname().nodename if host is None else host
            for n in keys:
                if code[n] == _START:
                    state = _start_state(scan.row_at(at[n]), here)
                    code[n] = _CODES.index(state)
                elif (
                    max_attempts is not None
                    and code[n] in _FAILING_CODES
                    and failures[n] >= max_attempts
                ):
                    code[n] = _GIVEN_UP
        except BaseException:
            scan.close()
            raise
        self._scan = scan
        weakref.finalize(self, scan.close)
        self._code, self._starts, self._at, self._seconds = code, starts, at, seconds
        self._failures = failures
        self.jobs = sorted(j.decode("utf-8", "surrogateescape") for j in jobs if j)
        self.first_time = first.decode() or None
        self.last_time = last.decode() or None

    def state(self, num: int) -> str:
        return _CODES[self._code[num]] if num in self._keys else "never"

    def counts(self) -> dict[str, int]:
        """How many tasks are in each state of :data:`STATES`, zero included."""
        counts = dict.fromkeys(STATES, 0)
        code = self._code
        for n in self._keys:
            counts[_CODES[code[n]]] += 1
        return counts

    def slowest(self, count: int) -> list[tuple[int, float, str]]:
        """The ``count`` tasks whose latest row is an end that took longest: (task number,
        seconds, task line), slowest first."""
        seconds = self._seconds
        ended = (
            (n, seconds[n])
            for n in self._keys
            if self._code[n] > _START and not math.isnan(seconds[n])
        )
        return [(n, s, self._keys[n]) for n, s in heapq.nlargest(count, ended, key=lambda x: x[1])]

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
