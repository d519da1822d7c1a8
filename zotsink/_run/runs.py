"""The runs a ledger names, and which of them are alive: what ``status`` shows of them.

A run is a ``zotsink run`` process, known by its ``run`` row: its host, the boot and pid
namespace of its pid table, its pid and start time, its job and array element. Whether it
is alive is :mod:`zotsink._run.alive`'s rule, asked of the runs that hold a task and of the
few that wrote the latest rows (an idle run that follows its list), not of every run a long
ledger names.

The control rows come from the same pass (:class:`~zotsink._ledger.control.Control`):
whether the list is closed, and a stop, which the runs begun before it are obeying while
they live.
"""

from __future__ import annotations

import os
import time
from typing import Any, Final, NamedTuple

from .._ledger.control import Control
from .._ledger.format import iso_time, ledger_time
from .._ledger.read import Snapshot
from .._ledger.view import LedgerView
from .alive import Judge

__all__ = ["LiveRuns", "RunInfo", "live_runs", "read_runs"]

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
    started: int  # attempts it began
    ok: int  # attempts it ended ok
    not_ok: int  # attempts it ended otherwise
    running: int  # tasks it runs (begun, not ended)
    alive: bool | None  # None: nobody can tell (another host, no scheduler answer)
    stopping: bool  # a stop row came after it began
    claimed: int = 0  # tasks it claimed and has not begun
    id: str = ""  # its id in the ledger (what ``zotsink release --run`` takes)
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


def live_runs(view: LedgerView, judge: Any, *, recent: int = RECENT_RUNS) -> LiveRuns:
    """The runs a folded (and settled) view names that are alive, asked of ``judge``: the
    runs holding tasks and the ``recent`` ones that wrote the latest rows (an idle run that
    follows its list holds none)."""
    held = view.held_by()
    latest = sorted(view.runs, key=lambda r: r.last_at, reverse=True)[:recent]
    asked = {r.index for r in latest} | {i for i in held if i >= 0}
    live: list[RunInfo] = []
    unknown: list[RunInfo] = []
    control = view.control
    now = time.time()
    for r in sorted((view.runs[i] for i in asked), key=lambda r: r.first_at):
        alive = judge.run_alive(r)
        claimed, running = held.get(r.index, (0, 0))
        info = RunInfo(
            host=r.host,
            pid=r.pid,
            job=r.job,
            array_task=r.element,
            first_time=iso_time(r.first_time),
            last_time=iso_time(r.last_time),
            first_at=r.first_at,
            started=r.begun,
            ok=r.ok,
            not_ok=r.not_ok,
            running=running,
            alive=alive,
            stopping=r.first_at < control.stop_at,
            claimed=claimed,
            id=r.id,
            idle=None if running else max(0.0, now - r.last_time),
        )
        if alive:
            live.append(info)
        elif alive is None and (info.running or info.claimed):
            unknown.append(info)
    return LiveRuns(live=live, unknown=unknown, control=control, runs=len(view.runs))


def read_runs(
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    recent: int = RECENT_RUNS,
) -> LiveRuns:
    """The runs ``ledger`` names that are alive (as seen from this host), from one pass over
    a snapshot, with its control rows folded."""
    view = LedgerView()
    with Snapshot(ledger, lock=lock, timeout=timeout) as snap:
        view.feed(snap.rows())
    judge = Judge()
    view.settle(judge)
    return live_runs(view, judge, recent=recent)
