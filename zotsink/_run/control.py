"""What the runs of a ledger are told to do: the task list closed or open, a stop.

``zotsink close`` and ``zotsink stop`` write control rows into the ledger, where every run
already looks (:data:`~zotsink._ledgerfile.CONTROL_EVENTS`, task number 0 like the ``run``
row, so that no reader takes them for a task's history), appended like every ledger row:
under its lock, fsynced.

- ``close``: no more lines will come; a run that follows the list (``--follow``) ends once
  every task is done. Its note records how many lines the task list had then
  (``{"lines": "N"}``): a run that has read fewer reads the list again, however late its
  filesystem shows it the last lines.
- ``open``: the list takes lines again (``zotsink close --reopen``); the latest of
  ``close`` and ``open`` counts.
- ``stop``: the runs live now finish the tasks they are running, claim nothing more and
  exit. A run tells whether a stop is for it by the stop row's offset: a stop at or after
  the ledger's size when the run read its first snapshot came while it ran; one before was
  there when it began, and it proceeds.

:class:`Control` is the decision, folded from rows a run already reads (pure, tested by
feeding it rows): the ledger folds those a run reads, :func:`read_control` a snapshot's
(``status``); :mod:`zotsink._run.close` writes them (``close_tasks``, ``stop_runs``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, NamedTuple

from .._ledgerfile import (
    CLOSE_EVENT,
    CONTROL_EVENTS,
    OPEN_EVENT,
    RUN_TASKNUM,
    STOP_EVENT,
    LedgerScan,
    parse_row,
)

__all__ = ["Control", "control_event", "fold_rows", "read_control"]


def control_event(line: bytes) -> str | None:
    """The event of a whole ledger row (bytes, no newline) when it is a control row, else
    None; cheap enough to ask of every row a run reads."""
    event, _, rest = line.partition(b"\t")
    if rest.split(b"\t", 2)[1:2] != [b"0"]:
        return None
    text = event.decode("ascii", "replace")
    return text if text in CONTROL_EVENTS else None


class Control(NamedTuple):
    """The control rows of a ledger, folded: what its runs are to do now.

    ``closed``: the latest ``close``/``open`` row is a ``close``; ``closed_lines``: how many
    lines the task list had then (None: not recorded); ``stop_at``: the offset of the
    latest ``stop`` row (-1: none). Times are the rows' (ledger time text, "" when none).
    """

    closed: bool = False
    closed_time: str = ""
    closed_lines: int | None = None
    stop_at: int = -1
    stop_time: str = ""

    def fold(self, event: str, offset: int, time: str = "", note: str = "") -> Control:
        """The state after a row of ``event`` at byte ``offset`` of the ledger (rows are
        folded in the ledger's order); a row of any other event changes nothing."""
        if event == CLOSE_EVENT:
            return self._replace(closed=True, closed_time=time, closed_lines=_lines(note))
        if event == OPEN_EVENT:
            return self._replace(closed=False, closed_time="", closed_lines=None)
        if event == STOP_EVENT and offset > self.stop_at:
            return self._replace(stop_at=offset, stop_time=time)
        return self

    def feed(self, line: bytes, offset: int) -> Control:
        """:meth:`fold` for a whole row as bytes (no newline) that starts at ``offset``:
        any row may be given, only control rows are decoded."""
        event = control_event(line)
        if event is None:
            return self
        row = parse_row(line, ())
        if row is None:
            return self  # torn: not a row
        return self.fold(event, offset, row.time, row.note)

    def stopped(self, since: int) -> bool:
        """Whether a run that began with a snapshot of ``since`` bytes of the ledger is told
        to stop: a stop row at or after that size came while it ran."""
        return self.stop_at >= since

    def to_dict(self) -> dict[str, Any]:
        return {
            "closed": self.closed,
            "closed_time": self.closed_time or None,
            "closed_lines": self.closed_lines,
            "stop_offset": None if self.stop_at < 0 else self.stop_at,
            "stop_time": self.stop_time or None,
        }


def _lines(note: str) -> int | None:
    try:
        value = json.loads(note).get("lines") if note else None
    except (ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, str) and value.isdigit() else None


def fold_rows(rows: Iterable[tuple[int, bytes]], control: Control | None = None) -> Control:
    """:meth:`Control.feed` over ``(offset, row)`` pairs, from ``control`` (else none)."""
    state = Control() if control is None else control
    for offset, line in rows:
        state = state.feed(line, offset)
    return state


def read_control(
    ledger: str | os.PathLike[str], *, lock: str = "auto", timeout: float = 600.0
) -> tuple[Control, int]:
    """The control rows of a snapshot of ``ledger`` folded (none when it does not exist
    yet), and the snapshot's size. Only rows of task number 0 are split."""
    scan = LedgerScan(ledger, lock=lock, timeout=timeout)
    try:
        state = fold_rows((at, line) for _n, at, line in scan.lines([RUN_TASKNUM]))
        return state, scan.size
    finally:
        scan.close()
