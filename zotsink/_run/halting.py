"""When a run stops claiming because its tasks fail: ``--halt-after N``, and the default for
the systematic case.

A wrong path or a missing module fails every task alike, and fast: left alone, each array
element would burn its whole chunk on it. By default a run halts when the first
``max(5, 2 * jobs)`` tasks to end in it all failed alike (the same grouping key as
``status --failed``: the state and the last stderr line, the task's own line and the numbers
in it set aside) and none ended ok; once a task ended ok, nothing halts by default. A run
whose ledger says the last of those tasks already failed alike (:func:`systematic`) runs
one task first and halts when it fails too. ``--halt-after N`` halts after N failed tasks
instead, whatever ended ok; ``--halt-after 0`` halts never.

A :class:`Halting` is fed the attempts that end and says when a halt is due: no I/O here.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Final

__all__ = ["WINDOW_MIN", "Halting", "systematic", "window"]

#: The fewest alike failures, and none ok, that halt a run by default.
WINDOW_MIN: Final = 5
#: End states that are a task's failure (``interrupted`` is no verdict on the task).
_FAILED: Final = frozenset(("failed", "killed", "timeout"))


def window(jobs: int) -> int:
    """How many alike failures (and none ok) halt a run of ``jobs`` at a time by default:
    enough that the first batch of tasks alone does not decide."""
    return max(WINDOW_MIN, 2 * jobs)


def systematic(ended: Iterable[tuple[str, Hashable]], jobs: int) -> bool:
    """Whether the ledger's last ended tasks (``(status, key)`` of each task's latest
    attempt, oldest first) say the systematic case holds: the last :func:`window` all
    failed alike and none ended ok since."""
    last = [(s, k) for s, k in ended if s == "ok" or s in _FAILED][-window(jobs) :]
    return (
        len(last) == window(jobs)
        and all(s in _FAILED for s, _ in last)
        and len({(s, k) for s, k in last}) == 1
    )


class Halting:
    """Whether a run's failures call for a halt (see the module's docstring).

    ``halt_after``: ``--halt-after`` (None: the default rule; 0: never). ``again``: the
    ledger says the systematic case holds (:func:`systematic`): one task first.
    """

    def __init__(self, jobs: int, halt_after: int | None, *, again: bool = False) -> None:
        self.window = window(jobs)
        self.halt_after = halt_after
        self.again = again and halt_after is None
        self.ended = 0  # tasks that ended ok or failed, in this run
        self.failed = 0
        self.any_ok = False
        self._keys: set[tuple[str, Hashable]] = set()

    @property
    def probing(self) -> bool:
        """Claim one task only: the ledger says the last tasks all failed alike."""
        return self.again

    def end(self, status: str, key: Hashable, last_line: str = "") -> str | None:
        """An attempt ended with ``status`` (its failure's grouping ``key``, and the last
        line it wrote to stderr): why the run halts now, or None."""
        if status != "ok" and status not in _FAILED:
            return None  # interrupted: a stop, not the task's failure
        self.ended += 1
        said = f" (last line: {last_line.strip()[:200]})" if last_line.strip() else ""
        if status == "ok":
            self.any_ok = True
            self.again = False
            return None
        self.failed += 1
        if self.halt_after is not None:
            if self.halt_after and self.failed >= self.halt_after:
                return f"{self.failed} tasks failed in this run (--halt-after {self.halt_after})"
            return None
        if self.any_ok:
            return None
        if self.again:
            return (
                f"the ledger's last {self.window} ended tasks failed alike and so did the "
                f"first of this run{said}"
            )
        if self.ended <= self.window:
            self._keys.add((status, key))
            if self.ended == self.window and len(self._keys) == 1:
                return f"the first {self.window} tasks of this run all failed alike{said}"
        return None
