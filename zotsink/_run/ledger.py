"""The ledger as ``zotsink run`` writes it: rows appended under the lock with fsync, and
the claim of tasks in the same lock hold.

The file format and its readers are :mod:`zotsink._ledgerfile`; what rows mean for a task
is :mod:`zotsink._run.states` (the one fold), and the recorded settings
:mod:`zotsink._run.settings`. A :class:`Ledger` writes a run's rows (``start`` before a task
runs, ``end`` after its records are in OUT, ``run`` for its settings) and, under the lock
of each append, reads the rows other runs appended since it last looked, folds them into
its tasks' states, and claims tasks by writing their start rows.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from .._core.fileio import pread_chunks
from .._core.header import existing_header
from .._core.outlet import Outcome, Outlet
from .._core.records import Encoder, decode_row
from .._core.snapshot import snapshot
from .._core.stamp import stamp_values, utc_now
from .._core.stop import Stopper
from .._core.writer import Writer, seen_to
from .._ledgerfile import (
    LATER_COLUMNS,
    LEDGER_COLUMNS,
    RUN_EVENT,
    RUN_TASKNUM,
    LedgerScan,
    parse_row,
    row_blocks,
    rows_in,
    tasknum_of,
)
from ..errors import UsageError
from .alive import PROC_START, proc_start
from .control import Control
from .queue import Picked, TaskQueue
from .settings import check_news_settings, settings_note
from .states import TaskState, fold, given_up, start_alive

__all__ = ["Claimable", "Ledger"]


def _columns_of(header: bytes | None) -> tuple[str, ...]:
    """The columns of a ledger whose first line is ``header`` (None: a new ledger, which
    gets every column this release writes). A first line that is no ledger header is left
    to the reader's refusal: the rows then get this release's columns."""
    if header is not None:
        names = tuple(decode_row(header[:-1].decode("utf-8", "surrogateescape"), "tsv"))
        if names[: len(LEDGER_COLUMNS)] == LEDGER_COLUMNS:
            return names
    return (*LEDGER_COLUMNS, *LATER_COLUMNS)


class Claimable(Protocol):
    """A task as :meth:`Ledger.claim` takes it: its number and its line."""

    @property
    def num(self) -> int: ...

    @property
    def line(self) -> str: ...


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
        # A ledger begun by another zotsink keeps its columns: its header cannot change. An
        # older one's rows lack the later columns it lacks; a newer one's columns this
        # release does not know stay empty in its rows (read for what the releases share).
        self.columns = _columns_of(existing_header(self.path))
        self.encoder = Encoder("tsv", self.columns)
        self._later = [self.columns.index(c) if c in self.columns else -1 for c in LATER_COLUMNS]
        # fsync always: a start row must be on disk before the task runs, or a node that
        # dies takes the knowledge that the task started with it.
        self.timeout = timeout
        self._lock = lock
        self._stopper = stopper
        #: What ``zotsink close`` and ``zotsink stop`` told the runs, as far as read.
        self.control = Control()
        self._began = 0  # the ledger's size when this run began: a stop after it is for it
        # A side file: never through a link, only ever this user's (a ledger planted with
        # forged ok rows would make every task be skipped).
        self.writer = Writer(
            self.path,
            lock=lock,
            sync="fsync",
            header=self.encoder.header_line(),
            side_file=True,
            prepare=self._claim_tasks,
        )
        self.outlet = Outlet(self.writer, timeout=timeout, stopper=stopper)
        # What this run knows of the tasks it may claim (see begin() and claim()).
        self._keys: dict[int, str] = {}  # the tasks whose rows this run folds
        self._states: dict[int, TaskState] = {}
        self._seen = 0  # ledger bytes read so far: rows past it are news
        self._rerun: set[int] = set()  # ok before this run began, to run again (--rerun)
        # a claim under way: the queue, how many, and the tasks whose history to read first
        self._want: tuple[TaskQueue[Any], int, Mapping[int, str]] | None = None
        self._picked = Picked([], [])
        self._claimed_bytes = 0
        self._news_end = 0  # where the claim's look at the news ended
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
        return self._row(RUN_EVENT, RUN_TASKNUM, "", "", {"note": settings_note(settings)})

    def control_row(self, event: str, note: str = "") -> bytes:
        """A control row (``close``, ``open``, ``stop``: task number 0, no key), stamped with
        this process's job, host and pid; see :mod:`zotsink._run.control`."""
        return self._row(event, RUN_TASKNUM, "", "", {"note": note})

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
        control: Control | None = None,
    ) -> None:
        """What this run found in the ledger's snapshot (``seen`` bytes of it) for its tasks
        (number -> line): the start of what :meth:`claim` keeps up to date; ``control``:
        the control rows found then (:func:`~zotsink._run.control.read_control`).

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
        self._keys = dict(keys)  # grows by what _learn reads
        self._states = dict(states)
        self._seen = seen
        self._began = seen
        if control is not None:
            self.control = control
        self._rerun = {n for n, st in states.items() if st.state == "ok"} if rerun else set()

    def claim(
        self, queue: TaskQueue[Any] | deque[Claimable], want: int, ends: Sequence[bytes]
    ) -> tuple[list[tuple[Any, int]], list[Any]]:
        """Claim up to ``want`` tasks that ``queue`` picks, under the ledger's lock.

        Under one lock hold: the history of tasks the queue got since this run began is
        read (:attr:`TaskQueue.unlearned`), then the rows other runs appended since this run
        last looked; the queue picks by those states (a task finished (``ok``) or running
        in a live process, this host's pid table or else the scheduler, is dropped); the
        picked ones get their next attempt number and a ``start`` row, written with
        ``ends`` in one fsynced append. Two runs started together so never run the same
        task, and attempt numbers are unique. Returns the tasks claimed (with their
        attempt) and those dropped. Raises like :meth:`append` (nothing claimed then).

        ``queue`` may be a plain deque of tasks, picked from by what :meth:`begin` was told
        (``rerun``, ``max_attempts``).
        """
        if isinstance(queue, deque):
            keys = self._keys
            late = {t.num: t.line for t in queue if t.num not in keys}
            queue = TaskQueue.over(queue, given_up=self.gives_up, rerun_ok=self._rerun)
        else:
            late = queue.unlearned
        self._want = (queue, want, late)
        self._picked = Picked([], [])
        self._claimed_bytes = 0
        self._news_end = self._seen
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
        # (nothing written: the news were read up to the size the hook saw)
        self._seen = (
            self.writer.last_at + self._claimed_bytes if self._claimed_bytes else self._news_end
        )
        return self._picked.claimed, self._picked.dropped

    def gives_up(self, state: TaskState) -> bool:
        """Whether ``state`` is given up under this run's ``max_attempts`` (see :meth:`begin`)."""
        return given_up(state, self.max_attempts)

    def _claim_tasks(self, fd: int, st: os.stat_result, data: bytes) -> bytes:
        """The writer's hook, run under the ledger's exclusive lock before each append: with
        a claim under way, fold the history of tasks the queue got late, the rows appended
        since the last look and this run's own end rows (``data``) into the tasks' states,
        then let the queue pick and add the start rows (see :meth:`claim`)."""
        if self._want is None:
            return data
        queue, want, late = self._want
        if late:
            self._learn(fd, late)
            queue.learn(self._states)
        self._read_news(fd, st.st_size)
        if self.stopped:
            queue.stop()  # `zotsink stop` since this run began: it claims nothing more
        self._news_end = max(self._news_end, st.st_size)
        # this run's own end rows, about to be written: its failures count too
        for _n, _at, block in row_blocks((data,)):
            self._fold(rows_in(block), news=False)
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

    def _read_news(self, fd: int, size: int) -> None:
        """Fold the rows appended since the last look into the states of this run's tasks."""
        if size <= self._seen:
            return
        # A network client (GlusterFS) may answer reads from what it cached before another
        # client appended while it reports the server's size: a short read would skip other
        # runs' start rows for good, and their tasks would be claimed again.
        seen_to(fd, size, self._seen)
        chunks = pread_chunks(fd, size, 1 << 20, start=self._seen)
        for _n, at, block in row_blocks(chunks, start=self._seen):
            self._fold(rows_in(block), news=True, at=at)

    def look(self) -> Mapping[int, TaskState]:
        """Fold the rows other runs appended since this run last looked, read from a
        snapshot under a shared lock (a run waiting on others' tasks takes no exclusive
        lock to look); the states of this run's tasks."""
        if self._seen == 0 and not os.path.exists(self.path):
            return self._states  # no run wrote a row yet
        fd, size = snapshot(self.path, lock=self._lock, timeout=self.timeout, stopper=self._stopper)
        try:
            if size > self._seen:
                self._read_news(fd, size)
                self._seen = size
        finally:
            os.close(fd)
        return self._states

    @property
    def states(self) -> Mapping[int, TaskState]:
        """The states of this run's tasks, as of its last look at the ledger."""
        return self._states

    @property
    def stopped(self) -> bool:
        """Whether ``zotsink stop`` told this run to claim nothing more."""
        return self.control.stopped(self._began)

    def _fold(self, rows: Iterable[bytes], *, news: bool, at: int = 0) -> None:
        """Fold ledger rows into the states of this run's tasks; with ``news`` (rows other
        runs wrote) a ``run`` row of settings other than this run's is a conflict. Only the
        tasks the queue was given count (:meth:`begin`'s keys, which grow as the queue's
        source does): :meth:`_learn` reads a late task's earlier rows before any news."""
        keys, states = self._keys, self._states
        pos = at  # where the next row begins: a stop row is for the runs begun before it
        for line in rows:
            here, pos = pos, pos + len(line) + 1
            if not line or line.startswith(b"event\t"):
                continue
            num = tasknum_of(line)
            if num == RUN_TASKNUM:
                if not news:
                    continue
                if line.startswith(RUN_EVENT.encode() + b"\t"):
                    self._check_news_settings(line)
                else:
                    self.control = self.control.feed(line, here)  # close, open, stop
                continue
            key = keys.get(num)
            if key is None:
                continue
            row = parse_row(line, self._later)
            if row is None or row.key != key:
                continue  # torn, or another line had this number once
            states[num] = fold(row, states.get(num))

    def _learn(self, fd: int, late: Mapping[int, str]) -> None:
        """Fold the rows before the news (the first ``_seen`` bytes of the ledger, open at
        ``fd`` under this run's lock) of ``late`` tasks (number -> line), which this run got
        after it began: every look at the news passed their rows by. From now on their
        news is folded too."""
        scan = LedgerScan.under_lock(self.path, fd, self._seen)
        for lineno, _at, line in scan.lines(late):
            row = scan.row(lineno, line)
            if late.get(row.tasknum) == row.key:
                self._states[row.tasknum] = fold(row, self._states.get(row.tasknum))
        self._keys.update(late)

    def _check_news_settings(self, line: bytes) -> None:
        if self._settings is None:
            return
        row = parse_row(line, self._later)
        if row is None:
            return
        conflict, same = check_news_settings(self.path, row.note, self._settings)
        if conflict is not None:
            self._conflict = conflict
        elif same and self._settings_row:
            self._settings_row = b""  # another run recorded the same: once is enough

    def outcome(self) -> Outcome:
        return self.outlet.outcome()

    def close(self) -> None:
        self.outlet.close()
