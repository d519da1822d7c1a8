"""The picture of a run, made from one pass over its attempts in bounded memory: what the
``--html`` page draws (:mod:`zotsink._run.page`).

:class:`Timeline` is fed attempts one at a time (:meth:`Timeline.add`, in any order) and
keeps:

- **lanes**: the attempts of each host and array element on lanes, one per slot the
  element ran tasks side by side in, by greedy interval partitioning (:func:`slot_for`): an
  attempt takes the lane that became free last before it began (within :data:`OVERLAP`),
  else a new one. An element run with ``--jobs 2`` has two lanes when its attempts carry
  their own start and end, with no slot recorded anywhere.
- **rows**: what is drawn, at most ``rows`` of them: a row per lane while they fit; past
  that an element's lanes share one row, and past that a host's (the rows merged as they
  go: :attr:`Timeline.mode`), the hosts past the last row in one more.
- **cells**: time in cells of one width (a power of two of seconds) shared by every row
  and series; when the run outgrows :data:`CELLS` cells the width doubles and neighbours
  merge, so the span drawn is always between half of them and all of them. A row's cell
  holds the state that matters most among the attempts in it (a failure over an ok); the
  series hold the attempts ended and the slot-seconds busy per cell.
- **bins** of the attempts' times (linear, the width doubling as the longest grows), the
  distributions of peak memory and CPU per host and per element (:class:`Spread`), the
  attempts that used most, and a few attempts whole: every one while there are at most
  :data:`DETAIL` (drawn one by one, named), and the lost and running ones (up to
  :data:`MARKED`), which end where their run's last row is.

Invariant: memory is rows x cells + series + bins + the attempts kept whole + when each
lane is free, bounded by the constants here and the lanes, never by the number of
attempts; an attempt costs the same however long it ran. The axis spans the run, from its first
start to its last end; an attempt still running ends at ``until`` (the moment the page is
made, when its run is alive) or at that last end.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable
from typing import Final, NamedTuple

from .report import Attempt, AttemptsBy, natural
from .spread import Spread

__all__ = [
    "CELLS",
    "DETAIL",
    "MARKED",
    "OVERLAP",
    "ROWS",
    "STATES_DRAWN",
    "RowKey",
    "Slots",
    "Timeline",
    "Use",
    "slot_for",
]

#: Cells across the run's span, at most (at least half of them are in use).
CELLS: Final = 2048
#: Rows drawn, at most (lanes past this share a row: an element's, then a host's).
ROWS: Final = 190
#: The row of the hosts past the last one drawn.
OTHER_HOSTS: Final = "(other hosts)"
#: Attempts drawn one by one (named, with their task) while there are no more than this.
DETAIL: Final = 2000
#: Lost and running attempts kept whole, at most.
MARKED: Final = 500
#: Attempts that used most, kept per measure.
TOP: Final = 10
#: Running attempts held until the run's last end is known, at most.
WAITING: Final = 10000
#: Linear bins of the attempts' times, at most.
TIME_BINS: Final = 64
#: Lanes of one element, at most: more overlapping attempts share the lane free soonest.
MAX_SLOTS: Final = 256
#: Seconds an attempt may overlap the one before it on a lane: times in the ledger are
#: rounded (a task's seconds to the millisecond).
OVERLAP: Final = 0.002

#: The states a cell may show, the one that matters least first: a cell shared by an ok
#: attempt and a failed one shows the failure.
STATES_DRAWN: Final = (
    "ok",
    "running",
    "lost",
    "interrupted",
    "timeout",
    "killed",
    "oom",
    "given-up",
    "failed",
)
_CODE: Final = {s: i + 1 for i, s in enumerate(STATES_DRAWN)}


#: Per state, the byte table that raises a cell to that state (a cell keeps the larger).
_RAISE: Final = {
    code: bytes(max(v, code) for v in range(256)) for code in range(1, len(STATES_DRAWN) + 1)
}


def _code(status: str) -> int:
    return _CODE.get(status, _CODE["failed"])


#: A row: (host, element, slot) with a lane per slot; (host, element, None) when an
#: element's lanes share it; (host, None, None) when a host's do.
RowKey = tuple[str, "str | None", "int | None"]


class Use:
    """The peaks and CPU times of a host's or an element's attempts."""

    __slots__ = ("cpu", "peak", "unmeasured")

    def __init__(self) -> None:
        self.peak = Spread()  # KiB
        self.cpu = Spread()  # user + system seconds
        self.unmeasured = 0  # ended attempts without a peak

    def add(self, peak_kib: int | None, cpu: float | None) -> None:
        """An ended attempt's peak and CPU seconds (None: not measured)."""
        if peak_kib is None:
            self.unmeasured += 1
        else:
            self.peak.add(peak_kib)
        if cpu is not None:
            self.cpu.add(cpu)


class _Kept(NamedTuple):
    """An attempt kept whole, with its lane."""

    group: tuple[str, str]  # (host, element)
    lane: int
    start: float
    end: float
    attempt: Attempt


class Timeline:
    """A run's attempts, summed for drawing as they come (see the module docstring)."""

    def __init__(self, *, until: float | None = None, cells: int = CELLS, rows: int = ROWS) -> None:
        """``until``: where attempts still running end (the page's moment while their runs
        live); None: at the run's last end. ``rows``: the rows the drawing has room for."""
        self.until = until
        self.size = cells
        self.most_rows = max(rows, 2)
        self.level: int | None = None  # a cell is 2**level seconds
        self.origin = 0  # the absolute index (time // width) of cell 0
        self.extent: tuple[int, int] | None = None  # absolute indices of the cells in use
        self.first: float | None = None  # the run's first start
        self.last: float | None = None  # its last end
        # each (host, element)'s lanes: (free from, lane), by time
        self.frees: dict[tuple[str, str], list[tuple[float, int]]] = {}
        self.mode = "slots"  # what a row is: a lane, an element's lanes, a host's
        self.rows: dict[RowKey, bytearray] = {}
        self.ended_ok = [0] * cells
        self.ended_bad = [0] * cells
        # slot-seconds busy per cell: the parts of cells, and the cells an attempt covers
        # whole as a difference (an attempt costs the same however long it ran)
        self._busy = [0.0] * cells
        self._whole = [0] * (cells + 1)
        self.times = _Bins(TIME_BINS)
        self.by_host: dict[str, Use] = {}
        self.by_element: dict[str, Use] = {}
        self.top_peak: list[tuple[int, int, int, str]] = []  # (KiB, task, attempt, element)
        self.top_cpu: list[tuple[float, int, int, str]] = []
        self.attempts = 0
        self.states: dict[str, int] = {}
        self.hosts = AttemptsBy("host")  # the attempts summed per host
        self.detail: list[_Kept] | None = []
        self.marked: list[_Kept] = []
        self.marked_left = 0  # lost or running attempts past MARKED, drawn in cells only
        self._waiting: list[Attempt] = []  # running, drawn once the run's end is known

    # -- feeding ------------------------------------------------------------------------------
    def feed(self, attempts: Iterable[Attempt]) -> Timeline:
        """Add every attempt of ``attempts`` (read once); the timeline, for chaining."""
        for a in attempts:
            self.add(a)
        return self

    def add(self, a: Attempt) -> None:
        self.attempts += 1
        self.states[a.status] = self.states.get(a.status, 0) + 1
        self.hosts.add(a)
        if a.status not in ("running", "lost"):  # ended: its time and what it used
            self._count(a)
        if a.start is None:
            return  # never began as far as the ledger tells: nothing to draw
        if a.end is not None:
            end = max(a.end, a.start)
        elif self.until is not None:
            end = max(self.until, a.start)
        elif len(self._waiting) < WAITING:
            self._waiting.append(a)  # drawn at finish(), to the run's last end
            return
        else:  # more than a run claims ahead: drawn to the last end so far
            end = max(self.last if self.last is not None else a.start, a.start)
        self._draw(a, a.start, end)

    def finish(self) -> Timeline:
        """Draw what waited for the run's end (attempts still running); call once, after
        the last :meth:`add`."""
        waiting, self._waiting = self._waiting, []
        for a in waiting:
            assert a.start is not None
            self._draw(a, a.start, max(self.last if self.last is not None else a.start, a.start))
        return self

    def _count(self, a: Attempt) -> None:
        if a.seconds is not None:
            self.times.add(a.seconds, a.status == "ok")
        host = self.by_host.get(a.host)
        if host is None:
            host = self.by_host[a.host] = Use()
        element = self.by_element.get(a.element)
        if element is None:
            element = self.by_element[a.element] = Use()
        cpu = None if a.user_s is None or a.sys_s is None else a.user_s + a.sys_s
        host.add(a.peak_kib, cpu)
        element.add(a.peak_kib, cpu)
        if a.peak_kib is not None:
            _keep(self.top_peak, (a.peak_kib, a.tasknum, a.attempt, a.element))
        if cpu is not None:
            _keep(self.top_cpu, (cpu, a.tasknum, a.attempt, a.element))

    def _draw(self, a: Attempt, start: float, end: float) -> None:
        group = (a.host, a.element)
        frees = self.frees.get(group)
        if frees is None:
            frees = self.frees[group] = []
        lane = slot_for(frees, start, end)
        i0, i1 = self._fit(start, end)
        cells = self._row(group, lane)
        p0, p1 = i0 - self.origin, i1 - self.origin + 1
        cells[p0:p1] = cells[p0:p1].translate(_RAISE[_code(a.status)])
        self._series(a.status, start, end, i0, i1)
        self.first = start if self.first is None else min(self.first, start)
        self.last = end if self.last is None else max(self.last, end)
        kept = _Kept(group, lane, start, end, a)
        if self.detail is not None:
            self.detail.append(kept)
            if len(self.detail) > DETAIL:
                self.detail = None  # too many to draw one by one: cells only
        if a.status in ("lost", "running"):
            if len(self.marked) < MARKED:
                self.marked.append(kept)
            else:
                self.marked_left += 1

    def _series(self, status: str, start: float, end: float, i0: int, i1: int) -> None:
        width = self.width
        p0, p1 = i0 - self.origin, i1 - self.origin
        if status not in ("running", "lost"):
            (self.ended_ok if status == "ok" else self.ended_bad)[p1] += 1
        if p0 == p1:
            self._busy[p0] += end - start
            return
        self._busy[p0] += (i0 + 1) * width - start
        self._busy[p1] += end - i1 * width
        if p1 > p0 + 1:
            self._whole[p0 + 1] += 1
            self._whole[p1] -= 1

    # -- the rows -----------------------------------------------------------------------------
    def row_key(self, group: tuple[str, str], lane: int) -> RowKey:
        """The row an attempt of ``group``'s lane ``lane`` is drawn in (may be one that does
        not exist yet)."""
        host, element = group
        if self.mode == "slots":
            return (host, element, lane)
        if self.mode == "elements":
            return (host, element, None)
        key: RowKey = (host, None, None)
        return key if key in self.rows or len(self.rows) < self.most_rows - 1 else _OTHER

    def _row(self, group: tuple[str, str], lane: int) -> bytearray:
        key = self.row_key(group, lane)
        cells = self.rows.get(key)
        if cells is not None:
            return cells
        while self.mode != "hosts" and len(self.rows) >= self.most_rows:
            self._coarsen()
            key = self.row_key(group, lane)
            cells = self.rows.get(key)
            if cells is not None:
                return cells
        cells = self.rows[key] = bytearray(self.size)
        return cells

    def _coarsen(self) -> None:
        """Rows a level coarser: an element's lanes in one, else a host's."""
        self.mode = "elements" if self.mode == "slots" else "hosts"
        rows, self.rows = self.rows, {}
        for (host, element, _slot), cells in sorted(rows.items(), key=lambda kv: _row_order(kv[0])):
            key = self.row_key((host, element or ""), 0)
            have = self.rows.get(key)
            self.rows[key] = cells if have is None else bytearray(map(max, have, cells))
        if self.mode == "elements" and len(self.rows) >= self.most_rows:
            self._coarsen()

    # -- the cells ------------------------------------------------------------------------------
    @property
    def width(self) -> float:
        """Seconds per cell."""
        return 2.0 ** (self.level or 0)

    def _index(self, t: float) -> int:
        return math.floor(t / self.width)

    def _fit(self, start: float, end: float) -> tuple[int, int]:
        """The absolute cells of [start, end], the cells made to hold them (doubling their
        width, moving their origin)."""
        if self.level is None:
            # the first attempt takes a quarter of the cells: the run is never shorter
            self.level = math.ceil(math.log2(max(end - start, 1e-6) * 4 / self.size))
            self.origin = self._index(start) - self.size // 4
        while True:
            i0 = self._index(start)
            i1 = max(i0, math.ceil(end / self.width) - 1)
            lo, hi = i0, i1
            if self.extent is not None:
                lo, hi = min(lo, self.extent[0]), max(hi, self.extent[1])
            if hi - lo + 1 > self.size:
                self._double()
                continue
            if lo < self.origin:
                self._shift(lo)
            elif hi >= self.origin + self.size:
                self._shift(hi - self.size + 1)
            self.extent = (lo, hi)
            return i0, i1

    def _settle_busy(self) -> None:
        """The cells covered whole, added into the seconds per cell."""
        covered, width = 0, self.width
        busy = self._busy
        for p, step in enumerate(self._whole[: self.size]):
            covered += step
            if covered:
                busy[p] += covered * width
        self._whole = [0] * (self.size + 1)

    def _double(self) -> None:
        self._settle_busy()
        odd = self.origin % 2 == 1
        for key, cells in self.rows.items():
            self.rows[key] = _halve_max(cells, odd, self.size)
        self.ended_ok = _halve_sum(self.ended_ok, odd, self.size)
        self.ended_bad = _halve_sum(self.ended_bad, odd, self.size)
        self._busy = _halve_sum(self._busy, odd, self.size)
        assert self.level is not None
        self.level += 1
        self.origin >>= 1
        if self.extent is not None:
            self.extent = (self.extent[0] >> 1, self.extent[1] >> 1)

    def _shift(self, origin: int) -> None:
        self._settle_busy()
        by = origin - self.origin
        for key, cells in self.rows.items():
            self.rows[key] = _moved_cells(cells, by)
        self.ended_ok = _moved_series(self.ended_ok, by)
        self.ended_bad = _moved_series(self.ended_bad, by)
        self._busy = _moved_series(self._busy, by)
        self.origin = origin

    # -- reading ------------------------------------------------------------------------------
    @property
    def busy(self) -> list[float]:
        """Slot-seconds busy per cell."""
        self._settle_busy()
        return self._busy

    def span(self) -> tuple[float, float] | None:
        """(first start, last end) of the attempts drawn; None when none began."""
        if self.first is None or self.last is None:
            return None
        return self.first, self.last

    def cell_range(self) -> tuple[int, int]:
        """Positions (from 0) of the first and the last cell in use."""
        assert self.extent is not None
        return self.extent[0] - self.origin, self.extent[1] - self.origin

    def cell_time(self, position: int) -> float:
        """The time a cell begins at."""
        return (self.origin + position) * self.width

    def row_keys(self) -> list[RowKey]:
        """The rows in natural order (hosts, elements, slots; the other hosts last)."""
        return sorted(self.rows, key=_row_order)

    def lanes(self, group: tuple[str, str]) -> int:
        """How many lanes ``group`` (host, element) ran in."""
        return len(self.frees.get(group, ()))

    def biggest(self, measure: str) -> list[tuple[float, int, int, str]]:
        """The attempts that used most, largest first: ``(peak KiB or CPU seconds, task,
        attempt, element)``; ``measure`` is ``peak`` or ``cpu``."""
        top = self.top_peak if measure == "peak" else self.top_cpu
        return sorted(top, reverse=True)  # type: ignore[arg-type]


_OTHER: Final[RowKey] = (OTHER_HOSTS, None, None)


def _row_order(key: RowKey) -> tuple[object, ...]:
    host, element, slot = key
    return (host == OTHER_HOSTS, natural(host), natural(element or ""), slot or 0)


def slot_for(frees: list[tuple[float, int]], start: float, end: float) -> int:
    """The lane an attempt of [start, end] takes among lanes ``frees`` (``(free from,
    lane)`` in order), a new one when none is free by its start (within :data:`OVERLAP`);
    its end noted. It takes the lane free from the latest moment not after its start, so
    that the lanes are as few as the most attempts that ran at one moment."""
    i = bisect.bisect_right(frees, (start + OVERLAP, math.inf)) - 1
    if i < 0:
        if len(frees) < MAX_SLOTS:
            bisect.insort(frees, (end, len(frees)))
            return len(frees) - 1
        i = 0  # more side by side than any element runs: the lane free soonest
    free, lane = frees.pop(i)
    bisect.insort(frees, (max(free, end), lane))
    return lane


class Slots:
    """The slots each array element ran its attempts in, counted as the timeline's lanes
    are (:func:`slot_for`): for ``status --advise``, the ``--jobs`` a run did not record."""

    def __init__(self) -> None:
        self._frees: dict[str, list[tuple[float, int]]] = {}

    def add(self, a: Attempt) -> None:
        if a.start is None or a.end is None:
            return
        frees = self._frees.get(a.element)
        if frees is None:
            frees = self._frees[a.element] = []
        slot_for(frees, a.start, max(a.end, a.start))

    def most(self) -> int:
        """The most slots of any element (0: no attempt with a start and an end)."""
        return max((len(f) for f in self._frees.values()), default=0)


def _keep(top: list, item: tuple) -> None:  # type: ignore[type-arg]
    if len(top) < TOP:
        heapq.heappush(top, item)
    elif item > top[0]:
        heapq.heapreplace(top, item)


def _halve_max(cells: bytearray, odd: bool, size: int) -> bytearray:
    """Cells twice as wide: each the larger of the two it replaces."""
    if odd:
        cells = bytearray(1) + cells
    if len(cells) % 2:
        cells.append(0)
    out = bytearray(map(max, cells[0::2], cells[1::2]))
    out.extend(bytes(size - len(out)))
    return out


def _halve_sum(series: list, odd: bool, size: int) -> list:  # type: ignore[type-arg]
    """Cells twice as wide: each the sum of the two it replaces."""
    zero = series[0] * 0
    if odd:
        series = [zero, *series]
    if len(series) % 2:
        series.append(zero)
    out = [x + y for x, y in zip(series[0::2], series[1::2])]
    return out + [zero] * (size - len(out))


def _moved_cells(cells: bytearray, by: int) -> bytearray:
    """Cells with their origin moved ``by`` cells later (earlier when negative): the cells
    moved out are dropped (empty ones), the ones moved in are empty."""
    size = len(cells)
    if abs(by) >= size:
        return bytearray(size)
    return cells[by:] + bytearray(by) if by >= 0 else bytearray(-by) + cells[: size + by]


def _moved_series(series: list, by: int) -> list:  # type: ignore[type-arg]
    """:func:`_moved_cells` for a series of numbers."""
    size = len(series)
    zero = series[0] * 0
    if abs(by) >= size:
        return [zero] * size
    return series[by:] + [zero] * by if by >= 0 else [zero] * -by + series[: size + by]


class _Bins:
    """Attempts' times in linear bins from zero, ok and not ok; a bin's width doubles (and
    neighbours merge) when a time is past the last."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.width: float | None = None
        self.ok = [0] * n
        self.bad = [0] * n
        self.high = 0.0
        self.count = 0

    def add(self, seconds: float, ok: bool) -> None:
        seconds = max(seconds, 0.0)
        if self.width is None:
            self.width = 2.0 ** math.ceil(math.log2(max(seconds, 1e-6) * 2 / self.n))
        while seconds >= self.n * self.width:
            self.ok = _halve_sum(self.ok, False, self.n)
            self.bad = _halve_sum(self.bad, False, self.n)
            self.width *= 2
        i = min(self.n - 1, int(seconds // self.width))
        (self.ok if ok else self.bad)[i] += 1
        self.high = max(self.high, seconds)
        self.count += 1

    def used(self) -> list[tuple[float, float, int, int]]:
        """(from, to, ok, not ok) of each bin up to the longest time."""
        if self.width is None:
            return []
        last = min(self.n - 1, int(self.high // self.width))
        w = self.width
        return [(i * w, (i + 1) * w, self.ok[i], self.bad[i]) for i in range(last + 1)]
