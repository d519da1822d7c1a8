"""What the runs of a ledger are told to do: the task list closed or open, a stop.

``zotsink close`` and ``zotsink stop`` write control rows into the ledger, where every run
already looks, appended like every ledger row: under its lock, fsynced, each moving the
``ctl`` counter of the state rows carry, so that a claim notices them without reading the
rows between (see :mod:`zotsink._ledger.format`).

- ``close``: no more lines will come; a run that follows the list (``--follow``) ends once
  every task is done. Its ``lines`` field records how many lines the task list had then
  (a last line without its newline counted: with the list closed, no byte will end it):
  a run that has read fewer reads the list again, however late its filesystem shows it
  the last lines.
- ``open``: the list takes lines again (``zotsink close --reopen``); the latest of
  ``close`` and ``open`` counts.
- ``stop``: the runs live now finish the tasks they are running, claim nothing more and
  exit. A run tells whether a stop is for it by the stop row's offset: a stop at or after
  the ledger's size when the run began came while it ran; one before was there when it
  began, and it proceeds.

:class:`Control` is the decision, folded from rows (pure, tested by feeding it rows); the
one view of a ledger (:mod:`zotsink._ledger.view`) folds them for every reader.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

__all__ = ["CONTROL_KINDS", "Control"]

#: The kinds of control rows.
CONTROL_KINDS: Final = ("close", "open", "stop")


class Control(NamedTuple):
    """The control rows of a ledger, folded: what its runs are to do now.

    ``closed``: the latest ``close``/``open`` row is a ``close``; ``closed_lines``: how many
    lines the task list had then (None: not recorded); ``stop_at``: the offset of the
    latest ``stop`` row (-1: none). Times are the rows' (seconds since the epoch, 0: none).
    """

    closed: bool = False
    closed_time: float = 0.0
    closed_lines: int | None = None
    stop_at: int = -1
    stop_time: float = 0.0

    def fold(self, kind: str, offset: int, time: float = 0.0, lines: str = "") -> Control:
        """The state after a row of ``kind`` at byte ``offset`` of the ledger (rows are
        folded in the ledger's order); a row of any other kind changes nothing."""
        if kind == "close":
            count = int(lines) if lines.isdigit() else None
            return self._replace(closed=True, closed_time=time, closed_lines=count)
        if kind == "open":
            return self._replace(closed=False, closed_time=0.0, closed_lines=None)
        if kind == "stop" and offset > self.stop_at:
            return self._replace(stop_at=offset, stop_time=time)
        return self

    def stopped(self, since: int) -> bool:
        """Whether a run that began with a snapshot of ``since`` bytes of the ledger is told
        to stop: a stop row at or after that size came while it ran."""
        return self.stop_at >= since

    def to_dict(self) -> dict[str, Any]:
        from datetime import datetime, timezone

        def iso(t: float) -> str | None:
            if not t:
                return None
            return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

        return {
            "closed": self.closed,
            "closed_time": iso(self.closed_time),
            "closed_lines": self.closed_lines,
            "stop_offset": None if self.stop_at < 0 else self.stop_at,
            "stop_time": iso(self.stop_time),
        }
