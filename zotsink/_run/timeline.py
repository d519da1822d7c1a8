"""The picture of a run, made from one pass over its attempts in bounded memory: what the
``--html`` page draws (:mod:`zotsink._run.page`).

:class:`Timeline` is fed attempts one at a time (:meth:`Timeline.add`, in any order) and
keeps:

- **lanes**: the attempts of each host and array element on lanes, one per slot the
  element ran tasks side by side in, by greedy interval partitioning: an attempt takes the
  lane that became free last before it began (within :data:`OVERLAP`), else a new one.
  An element run with ``--jobs 2`` has two lanes when its attempts carry their own start
  and end, with no slot recorded anywhere.
- **cells**: time in cells of one width (a power of two of seconds) shared by every lane
  and series; when the run outgrows :data:`CELLS` cells the width doubles and neighbours
  merge, so the span drawn is always between half of them and all of them. A lane's cell
  holds the state that matters most among the attempts in it (a failure over an ok); the
  series hold the attempts ended and the slot-seconds busy per cell.
- **bins** of the attempts' times (linear, the width doubling as the longest grows), the
  distributions of peak memory and CPU per host and per element (:class:`Spread`), the
  attempts that used most, and a few attempts whole: every one while there are at most
  :data:`DETAIL` (drawn one by one, named), and the lost and running ones (up to
  :data:`MARKED`), which end where their run's last row is.

Invariant: memory is lanes x cells + series + bins + the attempts kept whole, bounded by
the constants here, never by the number of attempts. The axis spans the run, from its first
start to its last end; an attempt still running ends at ``until`` (the moment the page is
made, when its run is alive) or at that last end.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from itertools import repeat
from typing import Final, NamedTuple

from .report import Attempt, AttemptsBy, natural
from .spread import Spread

__all__ = [
    "CELLS",
    "DETAIL",
    "MARKED",
    "OVERLAP",
    "STATES_DRAWN",
    "Lane",
    "Slots",
    "Timeline",
    "Use",
    "slot_for",
]

#: Cells across the run's span, at most (at least half of them are in use).
CELLS: Final = 2048
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


def _code(status: str) -> int:
    return _CODE.get(status, _CODE["failed"])


class Lane:
    """One slot of an element: its cells."""

    __slots__ = ("cells",)

    def __init__(self, size: int) -> None:
        self.cells = bytearray(size)


class Use:
    """The peaks and CPU times of a host's or an element's attempts."""

    __slots__ = ("cpu", "peak", "unmeasured")

    def __init__(self) -> None:
        self.peak = Spread()  # KiB
        self.cpu = Spread()  # user + system seconds
        self.unmeasured = 0  # ended attempts without a peak


class _Kept(NamedTuple):
    """An attempt kept whole, with its lane."""

    group: tuple[str, str]  # (host, element)
    lane: int
    start: float
    end: float
    attempt: Attempt


class Timeline:
    """A run's attempts, summed for drawing as they come (see the module docstring)."""

    def __init__(self, *, until: float | None = None, cells: int = CELLS) -> None:
        """``until``: where attempts still running end (the page's moment while their runs
        live); None: at the run's last end."""
        self.until = until
        self.size = cells
        self.level: int | None = None  # a cell is 2**level seconds
        self.origin = 0  # the absolute index (time // width) of cell 0
        self.extent: tuple[int, int] | None = None  # absolute indices of the cells in use
        self.first: float | None = None  # the run's first start
        self.last: float | None = None  # its last end
        self.groups: dict[tuple[str, str], list[Lane]] = {}
        self._frees: dict[tuple[str, str], list[float]] = {}  # when each lane is free
        self.ended_ok = [0] * cells
        self.ended_bad = [0] * cells
        self.busy = [0.0] * cells  # slot-seconds busy
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
        for use in (host, element):
            if a.peak_kib is None:
                use.unmeasured += 1
            else:
                use.peak.add(a.peak_kib)
            if cpu is not None:
                use.cpu.add(cpu)
        if a.peak_kib is not None:
            _keep(self.top_peak, (a.peak_kib, a.tasknum, a.attempt, a.element))
        if cpu is not None:
            _keep(self.top_cpu, (cpu, a.tasknum, a.attempt, a.element))

    def _draw(self, a: Attempt, start: float, end: float) -> None:
        group = (a.host, a.element)
        lanes = self.groups.get(group)
        if lanes is None:
            lanes = self.groups[group] = []
            self._frees[group] = []
        lane = slot_for(self._frees[group], start, end)
        if lane == len(lanes):
            lanes.append(Lane(self.size))
        i0, i1 = self._fit(start, end)
        cells = lanes[lane].cells
        p0, p1 = i0 - self.origin, i1 - self.origin + 1
        code = _code(a.status)
        cells[p0:p1] = bytes(map(max, cells[p0:p1], repeat(code, p1 - p0)))
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
            self.busy[p0] += end - start
            return
        self.busy[p0] += (i0 + 1) * width - start
        self.busy[p1] += end - i1 * width
        busy = self.busy
        for p in range(p0 + 1, p1):
            busy[p] += width

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

    def _double(self) -> None:
        odd = self.origin % 2 == 1
        for lanes in self.groups.values():
            for lane in lanes:
                lane.cells = _halve_max(lane.cells, odd, self.size)
        self.ended_ok = _halve_sum(self.ended_ok, odd, self.size)
        self.ended_bad = _halve_sum(self.ended_bad, odd, self.size)
        self.busy = _halve_sum(self.busy, odd, self.size)
        assert self.level is not None
        self.level += 1
        self.origin >>= 1
        if self.extent is not None:
            self.extent = (self.extent[0] >> 1, self.extent[1] >> 1)

    def _shift(self, origin: int) -> None:
        by = origin - self.origin
        for lanes in self.groups.values():
            for lane in lanes:
                lane.cells = _moved_cells(lane.cells, by)
        self.ended_ok = _moved_series(self.ended_ok, by)
        self.ended_bad = _moved_series(self.ended_bad, by)
        self.busy = _moved_series(self.busy, by)
        self.origin = origin

    # -- reading ------------------------------------------------------------------------------
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

    def names(self) -> list[tuple[str, str]]:
        """The (host, element) groups in natural order."""
        return sorted(self.groups, key=lambda g: (natural(g[0]), natural(g[1])))

    def biggest(self, measure: str) -> list[tuple[float, int, int, str]]:
        """The attempts that used most, largest first: ``(peak KiB or CPU seconds, task,
        attempt, element)``; ``measure`` is ``peak`` or ``cpu``."""
        top = self.top_peak if measure == "peak" else self.top_cpu
        return sorted(top, reverse=True)  # type: ignore[arg-type]


def slot_for(frees: list[float], start: float, end: float) -> int:
    """The lane an attempt of [start, end] takes among lanes free from ``frees`` (one added
    when none is free by its start, within :data:`OVERLAP`), its end noted: the lane free
    from the latest moment not after ``start``, so that the lanes are as few as the most
    attempts that ran at one moment."""
    best = -1
    for i, free in enumerate(frees):
        if free <= start + OVERLAP and (best < 0 or free > frees[best]):
            best = i
    if best < 0:
        if len(frees) < MAX_SLOTS:
            frees.append(end)
            return len(frees) - 1
        best = min(range(len(frees)), key=frees.__getitem__)  # more than any element runs
    frees[best] = max(frees[best], end)
    return best


class Slots:
    """The slots each array element ran its attempts in, counted as the timeline's lanes
    are (:func:`slot_for`): for ``status --advise``, the ``--jobs`` a run did not record."""

    def __init__(self) -> None:
        self._frees: dict[str, list[float]] = {}

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
