"""The runs a ledger names, and which of them are alive: what ``status`` shows of them.

A run is a ``zotsink run`` process, known by the rows it wrote: its ``start`` rows carry
its host, pid and the process's start time (:data:`~.alive.PROC_START`), its ``end`` rows
the host, pid and job. Whether it is alive is :mod:`zotsink._run.alive`'s rule, asked of
the runs that have a task running and of the few that wrote the latest rows (an idle run
that follows its list), not of every run a long ledger names.

The control rows come from the same pass (:class:`~.control.Control`): whether the list is
closed, and a stop, which the runs begun before it are obeying while they live.
"""

from __future__ import annotations

import os
import time as clock  # ``time`` names a row's time below
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

from .._ledgerfile import LedgerScan, ledger_time
from .alive import PROC_START, run_alive
from .control import Control

__all__ = ["LiveRuns", "RunInfo", "read_runs"]

#: Besides those with a task running, how many of the runs that wrote the latest rows are
#: asked whether they are alive (an idle run that follows its list has no task running).
RECENT_RUNS: Final = 32


class RunInfo(NamedTuple):
    """One run, from its rows: where it ran, what it did, whether it lives."""

    host: str
    pid: str
    job: str
    array_task: str
    first_time: str  # its first row's time
    last_time: str  # its latest row's time
    first_at: int  # its first row's offset in the ledger
    started: int  # attempts it started
    ok: int  # attempts it ended ok
    not_ok: int  # attempts it ended otherwise
    running: int  # tasks whose latest row is its start
    alive: bool | None  # None: nobody can tell (another host, no scheduler answer)
    stopping: bool  # a stop row came after it began
    # seconds since its latest row, when no task of it runs (a run that follows its list
    # and waits for lines, or waits on other runs' tasks); None while one runs
    idle: float | None = None

    @property
    def rate(self) -> float | None:
        """Tasks it ended ok per second, from its first row to its latest."""
        start, end = ledger_time(self.first_time), ledger_time(self.last_time)
        if start is None or end is None or end <= start or not self.ok:
            return None
        return self.ok / (end - start)

    def to_dict(self) -> dict[str, Any]:
        d = self._asdict()
        rate = self.rate
        d["rate_per_hour"] = None if rate is None else round(rate * 3600, 3)
        return d


class LiveRuns(NamedTuple):
    """The live runs of a ledger, the runs nobody can tell of, and its control rows."""

    live: list[RunInfo]  # alive, in the order they began
    unknown: list[RunInfo]  # with a task running, and nobody can tell whether alive
    control: Control
    runs: int  # runs the ledger names in all

    @property
    def stopping(self) -> list[RunInfo]:
        """The live runs a stop is ending: they finish their tasks and exit."""
        return [r for r in self.live if r.stopping]

    def to_dict(self) -> dict[str, Any]:
        return {
            "live": [r.to_dict() for r in self.live],
            "unknown": [r.to_dict() for r in self.unknown],
            "runs": self.runs,
            "stopping": len(self.stopping),
            **self.control.to_dict(),
        }


class _Run:
    """What a pass gathers of one run."""

    __slots__ = ("array_task", "first_at", "first_time", "host", "job", "last_at", "last_time")
    __slots__ += ("note", "not_ok", "ok", "pid", "started")

    def __init__(self, at: int, time: str, job: str, task: str, host: str, pid: str) -> None:
        self.first_at = self.last_at = at
        self.first_time = self.last_time = time
        self.job, self.array_task, self.host, self.pid = job, task, host, pid
        self.note = ""
        self.started = self.ok = self.not_ok = 0


def _rows(scan: LedgerScan) -> Iterator[tuple[int, list[bytes], bytes]]:
    """(offset, the first ten fields, the rest) of each row."""
    for _n, at, line in scan.lines():
        fields = line.split(b"\t", 10)
        if len(fields) == 11:
            yield at, fields[:10], fields[10]


def read_runs(
    ledger: str | os.PathLike[str],
    *,
    host: str | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
    recent: int = RECENT_RUNS,
) -> LiveRuns:
    """The runs ``ledger`` names that are alive (as seen from host ``host``, by default this
    one), from one pass over a snapshot, with its control rows folded."""
    here = os.uname().nodename if host is None else host
    runs: dict[tuple[bytes, ...], _Run] = {}
    current: dict[tuple[bytes, bytes, bytes], tuple[bytes, ...]] = {}  # (host, pid, job)
    running: dict[bytes, tuple[bytes, ...]] = {}  # task number -> the run of its start
    control = Control()
    scan = LedgerScan(ledger, lock=lock, timeout=timeout)
    try:
        for at, f, rest in _rows(scan):
            event, time, num = f[0], f[1], f[2]
            if num == b"0":
                control = control.feed(b"\t".join([*f, rest]), at)
                continue
            if event not in (b"start", b"end"):
                continue
            who = (f[7], f[8], f[5])
            key = current.get(who)
            if event == b"start":
                # exit signal seconds records bytes note ...: the note holds the start time
                parts = rest.split(b"\t", 6)
                note = parts[5] if len(parts) > 5 else b""
                key = (*who, note if note.startswith(PROC_START.encode()) else b"")
                current[who] = key
            elif key is None:
                key = current[who] = (*who, b"")
            run = runs.get(key)
            text = time.decode("utf-8", "replace")
            if run is None:
                run = runs[key] = _Run(at, text, *(x.decode("utf-8", "replace") for x in f[5:9]))
                run.note = key[3].decode("utf-8", "replace")
            run.last_at, run.last_time = at, text
            if event == b"start":
                run.started += 1
                running[num] = key
            else:
                if f[9] == b"ok":
                    run.ok += 1
                else:
                    run.not_ok += 1
                if running.get(num) is not None:
                    del running[num]
    finally:
        scan.close()
    busy: dict[tuple[bytes, ...], int] = {}
    for key in running.values():
        busy[key] = busy.get(key, 0) + 1
    latest = sorted(runs, key=lambda k: runs[k].last_at, reverse=True)[:recent]
    now = clock.time()
    live: list[RunInfo] = []
    unknown: list[RunInfo] = []
    for key in sorted(set(busy) | set(latest), key=lambda k: runs[k].first_at):
        r = runs[key]
        alive = run_alive(r.host, r.pid, r.note, r.job, here, r.array_task)
        last = ledger_time(r.last_time)
        info = RunInfo(
            host=r.host,
            pid=r.pid,
            job=r.job,
            array_task=r.array_task,
            first_time=r.first_time,
            last_time=r.last_time,
            first_at=r.first_at,
            started=r.started,
            ok=r.ok,
            not_ok=r.not_ok,
            running=busy.get(key, 0),
            alive=alive,
            stopping=r.first_at < control.stop_at,
            idle=None if busy.get(key) or last is None else max(0.0, now - last),
        )
        if alive:
            live.append(info)
        elif alive is None and info.running:
            unknown.append(info)
    return LiveRuns(live=live, unknown=unknown, control=control, runs=len(runs))
