"""The tests' one reader of a run's ledger: what it says happened to each task, as rows by
name (through zotsink's own row view, :func:`zotsink.read_ledger`).

Each event is a dict of text values: ``event`` is ``start`` for a claim (a task a run took
to run: the ledger's ``claim``), ``begin``, ``end`` or ``release``; ``run`` rows carry a
run's settings in ``note`` and the control rows (``close``, ``open``, ``stop``) their kind;
``time`` (UTC, ISO 8601 with microseconds: in order as text too), ``tasknum``, ``key`` (the
task's line, from the task list the ledger's run recorded), ``attempt``, ``status``,
``exit``, ``signal``, ``seconds``, ``records``, ``bytes``, ``note``, ``host``, ``pid``,
``job``, ``array_task``, ``out_offset``, ``out_ino`` and ``out_block`` (where an end's
records went: their offset in OUT, the inode OUT was then, and ``OFFSET:LENGTH`` of the
block of the end row that holds them), ``process`` (a begin's ``PID:START``).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from zotsink import ZotsinkWarning
from zotsink._ledger.events import task_events
from zotsink._ledger.format import (
    FIELDS,
    INITIAL,
    EndItem,
    Row,
    advance,
    begin_items_text,
    end_items_text,
    header_line,
    iso_time,
    line_crc,
    make_row,
    notes_text,
    parse_blocks,
    parse_row,
    tasks_text,
)
from zotsink._ledger.read import Snapshot, tail_state
from zotsink._ledger.view import LedgerView
from zotsink._run.alive import host_identity, proc_start
from zotsink._run.tasks import task_lines


def _snapshot(path: Path, lock: bool) -> Snapshot:
    """A pass over the ledger's rows: under its shared lock, or (``lock=False``, a format 2
    ledger) of the bytes there now, for a test whose writer may hold the lock for ever (a
    frozen node)."""
    if lock:
        return Snapshot(path)
    fd = os.open(path, os.O_RDONLY)
    return Snapshot.under_lock(str(path), fd, os.fstat(fd).st_size, 0)


def recorded_tasks(path: Path, snap: Snapshot) -> Path | None:
    """The task list the ledger's latest run recorded (relative to where it ran: the
    ledger's directory in the tests), when it exists."""
    view = LedgerView()
    with warnings.catch_warnings():  # a torn row is told of once, by the pass after this
        warnings.simplefilter("ignore", ZotsinkWarning)
        view.feed(snap.rows())
    snap.torn.clear()
    given = (view.settings or {}).get("tasks")
    if not given:
        return None
    p = Path(given) if os.path.isabs(given) else path.parent / given
    return p if p.exists() else None


#: A row's names, for the rows that are no task's (run, close, open, stop).
BLANK = dict.fromkeys(
    (
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
        "out_offset",
        "out_ino",
        "out_block",
        "process",
    ),
    "",
) | {"tasknum": "0"}


def ledger_rows(
    path: Path, tasks: Path | None = None, *, every: bool = False, lock: bool = True
) -> list[dict[str, str]]:
    """The events (``every``: ``begin`` and ``release`` too; else the claims as ``start``
    rows and the ends, what a ledger told of a task's attempts in zotsink 0.1), read under
    the ledger's shared lock (``lock=False``: of the bytes there now, see :func:`_snapshot`)."""
    if not path.exists():
        return []
    with _snapshot(path, lock) as snap:
        return _events(path, snap, tasks, every)


def _events(path: Path, snap: Snapshot, tasks: Path | None, every: bool) -> list[dict[str, str]]:
    tasks = tasks if tasks is not None else recorded_tasks(path, snap)
    keys = task_lines(tasks)[0] if tasks is not None else None
    out: list[dict[str, str]] = []

    last: list[Row] = []  # the row the events coming out now are of (read lazily)

    def rows(snap: Snapshot) -> Iterator[tuple[int, Row]]:
        for at, row in snap.rows():
            if row.kind == "run" and row.fields["settings"]:
                out.append({**BLANK, "event": "run", "note": row.fields["settings"]})
            elif row.kind in ("close", "open", "stop"):
                out.append({**BLANK, "event": row.kind})
            last[:] = [row]
            yield at, row

    for e in task_events(rows(snap), keys):
        if not every and e.event in ("begin", "release"):
            continue
        out.append(
            {
                "event": "start" if e.event == "claim" else e.event,
                "time": iso_time(e.time),
                "tasknum": str(e.tasknum),
                "key": e.key,
                "attempt": str(e.attempt),
                "job": e.job,
                "array_task": e.array_task,
                "host": e.host,
                "pid": e.pid,
                "status": e.status,
                "exit": e.exit,
                "signal": e.signal,
                "seconds": "" if e.seconds is None else f"{e.seconds:.6f}",
                "records": str(e.records),
                "bytes": str(e.bytes),
                "note": e.note,
                "out_offset": "" if e.offset < 0 else str(e.offset),
                "out_ino": last[0].fields["out"].partition(":")[0] if e.event == "end" else "",
                "out_block": _block(last[0], e.offset) if e.event == "end" else "",
                "process": e.process,
            }
        )
    return out


def _block(row: Row, offset: int) -> str:
    """``OFFSET:LENGTH`` of the block of an end row that holds the piece at ``offset`` (its
    CRC covers the block whole: a block cut short vouches for none of its pieces)."""
    for b in parse_blocks(row.fields["blocks"]):
        if b.offset <= offset < b.offset + b.length:
            return f"{b.offset}:{b.length}"
    return ""


def begins(path: Path) -> list[dict[str, str]]:
    """The ``begin`` events so far: a run writes a task's once it has run a moment (one that
    ends sooner may have none), naming the task's own process (``process``)."""
    return [e for e in ledger_rows(path, every=True) if e["event"] == "begin"]


def rewrite_rows(path: Path, change: Callable[[Row], Row | None]) -> None:
    """Rewrite a format 2 ledger's rows through ``change`` (None: leave the row out), each
    stamped again with the state it carried and a CRC of its own: what a test that plants
    or damages history needs (a row edited by hand is no row: its CRC fails)."""
    data = path.read_bytes()
    head, _, body = data.partition(b"\n")
    out = [head + b"\n"]
    for line in body.split(b"\n"):
        if not line:
            continue
        row = parse_row(line)
        if row is None:
            out.append(line + b"\n")
            continue
        new = change(row)
        if new is not None:
            fields = [new.fields[name] for name in FIELDS[new.kind]]
            out.append(make_row(new.kind, new.time, new.run, fields, new.state))
    path.write_bytes(b"".join(out))


class Book:
    """One run's rows, written to a ledger the way a run writes them (a format 2 header for
    a new file, each row stamped with the state after the file's last row): what a test
    plants to set the ledger's history up. Defaults: this host and process, no job."""

    def __init__(
        self,
        path: Path,
        *,
        host: str | None = None,
        hostid: str | None = None,
        pid: int | None = None,
        start: str | None = None,
        job: str = "",
        element: str = "",
        settings: dict[str, str] | None = None,
        run: str | None = None,
        clock: Iterable[float] | None = None,
    ) -> None:
        """``clock``: each row's time, in order (else a millisecond apart from now)."""
        here, here_id = host_identity()
        self.path = Path(path)
        self.run = run or os.urandom(4).hex()
        me = os.getpid() if pid is None else pid
        started = (proc_start(os.getpid()) or "") if start is None else start
        self._rows: list[tuple[str, list[str]]] = [
            (
                "run",
                [
                    here if host is None else host,
                    here_id if hostid is None else hostid,
                    str(me),
                    started,
                    job,
                    element,
                    json.dumps(settings, sort_keys=True) if settings else "",
                ],
            )
        ]
        self.time = time.time()
        self._clock = iter(clock) if clock is not None else None

    def claim(self, num: int, attempt: int = 1, line: str = "", fresh: bool = False) -> Book:
        crc = line_crc([line])
        self._rows.append(("claim", [tasks_text([(num, attempt, fresh)]), f"{crc:x}"]))
        return self

    def begin(self, num: int, attempt: int = 1, pid: int | None = None, start: str = "") -> Book:
        pid = os.getpid() if pid is None else pid
        self._rows.append(("begin", [begin_items_text([(num, attempt, pid, start)])]))
        return self

    def end(
        self,
        num: int,
        attempt: int = 1,
        status: str = "ok",
        code: str = "0",
        seconds: float = 0.1,
        records: int = 0,
        note: str = "",
        size_at: tuple[int, int] | None = None,
    ) -> Book:
        """An end row; ``size_at``: (offset, bytes) of its records in OUT (a block of its
        own, no checksum)."""
        item = EndItem(
            num, attempt, status, code, round(seconds * 1e6), None, records, 0, True, None, None
        )
        notes = notes_text({f"{num}.{attempt}": note} if note else {})
        blocks = ""
        if size_at is not None:
            item = item._replace(size=size_at[1])
            blocks = f"{size_at[0]}:{size_at[1]}:-1"
        self._rows.append(("end", [":0", blocks, end_items_text([item]), notes]))
        return self

    def release(self, num: int, attempt: int = 1) -> Book:
        self._rows.append(("release", [tasks_text([(num, attempt)])]))
        return self

    def row(self, kind: str, *fields: str) -> Book:
        """A row of any kind, a newer release's too (its fields as that release writes
        them)."""
        self._rows.append((kind, list(fields)))
        return self

    def write(self) -> None:
        """Append the rows (the run row first, once)."""
        new = not self.path.exists() or self.path.stat().st_size == 0
        with open(self.path, "ab") as f:
            if new:
                f.write(header_line())
                state = INITIAL
            else:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    state = tail_state(
                        str(self.path), fd, os.fstat(fd).st_size, settle=False, coherent=False
                    )
                finally:
                    os.close(fd)
            for kind, fields in self._rows:
                state = advance(state, kind, fields)
                self.time = next(self._clock) if self._clock is not None else self.time + 1e-3
                f.write(make_row(kind, self.time, self.run, fields, state))
        self._rows = []
