"""The ledger: one TSV of task events, appended under the lock with fsync, read as a snapshot.

Each row is an event of one task: ``start`` when it starts, ``end`` when it ends, with the
end's ``status`` (``ok``, ``failed``, ``killed``, ``timeout``, ``interrupted``). A task's
state is its latest row whose ``key`` is the task's line today: a row written for another
line (the task list was edited since) says nothing about this one. A ``start`` with no
``end`` is ``running`` while the ``run`` process that wrote it lives, and ``lost`` once it is
known dead (same host, process gone); a task with no row is ``never``.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple

from .._core.outlet import Outcome, Outlet
from .._core.records import Encoder, decode_row
from .._core.stamp import stamp_values, utc_now
from .._core.stop import Stopper
from .._core.writer import Writer
from .._read import read_records
from ..errors import InputError

__all__ = [
    "END_STATES",
    "LEDGER_COLUMNS",
    "STATES",
    "Ledger",
    "LedgerRow",
    "TaskState",
    "read_ledger",
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
#: ``status`` values of ``end`` rows.
END_STATES: Final = ("ok", "failed", "killed", "timeout", "interrupted")
#: Every state a task can be in, in the order reports list them.
STATES: Final = (*END_STATES, "running", "lost", "never")


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


class TaskState(NamedTuple):
    """Where one task stands: its state, how often it was started, its latest row."""

    tasknum: int
    state: str
    starts: int
    last: LedgerRow | None


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
        self.encoder = Encoder("tsv", LEDGER_COLUMNS)
        # fsync always: a start row must be on disk before the task runs, or a node that
        # dies takes the knowledge that the task started with it.
        self.timeout = timeout
        self.writer = Writer(self.path, lock=lock, sync="fsync", header=self.encoder.header_line())
        self.outlet = Outlet(self.writer, timeout=timeout, stopper=stopper)
        job, array_task, host = stamp_values(("job", "task", "host"), env)
        self._fixed = (job, array_task, host, str(os.getpid()))

    def start_row(self, tasknum: int, key: str, attempt: int) -> bytes:
        return self._row("start", tasknum, key, attempt, {})

    def end_row(self, tasknum: int, key: str, attempt: int, **fields: Any) -> bytes:
        return self._row("end", tasknum, key, attempt, fields)

    def _row(
        self, event: str, tasknum: int, key: str, attempt: int, fields: Mapping[str, Any]
    ) -> bytes:
        job, array_task, host, pid = self._fixed
        values = [event, utc_now(), tasknum, key, attempt, job, array_task, host, pid]
        values += [fields.get(c, "") for c in LEDGER_COLUMNS[len(values) :]]
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

    def outcome(self) -> Outcome:
        return self.outlet.outcome()

    def close(self) -> None:
        self.outlet.close()


def read_ledger(
    path: str | os.PathLike[str],
    *,
    tasknums: Container[int] | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[LedgerRow]:
    """The rows of a ledger, from a consistent snapshot; nothing when it does not exist yet.

    With ``tasknums`` only the rows of those tasks: the others are not even decoded (an
    array element of 100 tasks reads a 27,000-task ledger in a tenth of the time).
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        return
    # Read as plain lines, decoded below only when wanted: unescaping every value of every
    # row is most of the cost of reading a large ledger.
    lines = read_records(p, format="lines", lock=lock, timeout=timeout)
    first = next(lines, None)
    if first is None:
        return
    head = decode_row(first[0], "tsv")
    if tuple(head[: len(LEDGER_COLUMNS)]) != LEDGER_COLUMNS:
        raise InputError(
            f"{p} is not a zotsink ledger (its first line is not the ledger header); "
            "give the ledger with --ledger",
            path=p,
        )
    width = len(head)
    for n, (line,) in enumerate(lines, 2):
        num = line.split("\t", 3)[2] if line.count("\t") >= 3 else ""
        if not num.isdigit():
            raise InputError(
                f"{p} line {n} is not a ledger row; run `zotsink verify {p} -f tsv`", path=p
            )
        tasknum = int(num)
        if tasknums is not None and tasknum not in tasknums:
            continue
        row = decode_row(line, "tsv")
        if len(row) != width:
            raise InputError(
                f"{p} line {n} is not a ledger row; run `zotsink verify {p} -f tsv`", path=p
            )
        yield LedgerRow(row[0], row[1], tasknum, *row[3 : len(LEDGER_COLUMNS)])


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True


def states_of(
    keys: Mapping[int, str], rows: Iterable[LedgerRow], *, host: str | None = None
) -> dict[int, TaskState]:
    """The state of each task in ``keys`` (task number -> line) from the ledger ``rows``."""
    last: dict[int, LedgerRow] = {}
    starts: dict[int, int] = {}
    for row in rows:
        if keys.get(row.tasknum) != row.key:
            continue  # another line had this number once: not this task's history
        last[row.tasknum] = row
        if row.event == "start":
            starts[row.tasknum] = starts.get(row.tasknum, 0) + 1
    here = os.uname().nodename if host is None else host
    out: dict[int, TaskState] = {}
    for num in keys:
        row = last.get(num)
        if row is None:
            state = "never"
        elif row.event == "start":
            state = "lost" if row.host == here and not _alive(row.pid) else "running"
        else:
            state = row.status if row.status in END_STATES else "failed"
        out[num] = TaskState(num, state, starts.get(num, 0), row)
    return out
