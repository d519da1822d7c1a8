"""A distribution of figures (task times, peaks, CPU) in bounded memory.

:class:`Spread` keeps the count, the sum, the least and the largest exactly, and the rest in
logarithmic bins (:data:`BINS_PER_OCTAVE` to each doubling): a million figures cost what a
few hundred bins cost. A quantile is the upper edge of the bin that holds it, never above
the largest figure: never below the true quantile, and above it by less than one bin's
width (the ratio :data:`BIN_RATIO`). ``status --advise`` and the ``--html`` page read their
distributions from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Final

__all__ = ["BINS_PER_OCTAVE", "BIN_RATIO", "Spread"]

#: Bins per doubling of the figure.
BINS_PER_OCTAVE: Final = 32
#: A bin's upper edge over its lower edge: the most a quantile may be above the truth.
BIN_RATIO: Final = 2 ** (1 / BINS_PER_OCTAVE)
#: The bin of zero (and of figures too small to have a bin of their own).
_ZERO: Final = -(1 << 30)
#: Figures at or below this are counted as zero.
_TINY: Final = 1e-9


class Spread:
    """Figures added one at a time (:meth:`add`); their quantiles, mean and bins."""

    __slots__ = ("_bins", "count", "high", "low", "total")

    def __init__(self) -> None:
        self._bins: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.low = math.inf
        self.high = -math.inf

    def add(self, value: float) -> None:
        """One more figure (a negative one counts as zero)."""
        value = max(value, 0.0)
        self.count += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)
        key = _ZERO if value <= _TINY else math.ceil(math.log2(value) * BINS_PER_OCTAVE)
        self._bins[key] = self._bins.get(key, 0) + 1

    def merge(self, other: Spread) -> None:
        """Add every figure of ``other``."""
        self.count += other.count
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)
        for key, n in other._bins.items():
            self._bins[key] = self._bins.get(key, 0) + n

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0 < q <= 1) by rank (the least figure that ``q`` of them do
        not exceed), as the upper edge of its bin, capped at the largest; None when empty."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for key in sorted(self._bins):
            seen += self._bins[key]
            if seen >= rank:
                edge = 0.0 if key == _ZERO else 2 ** (key / BINS_PER_OCTAVE)
                return min(max(edge, self.low), self.high)
        return self.high

    def bins(self, n: int) -> Iterator[tuple[float, float, int]]:
        """The figures regrouped into ``n`` bins or fewer, of equal ratio, from the least to
        the largest: ``(low edge, high edge, count)``, empty bins included; zeros count in
        the first, whose low edge is then 0."""
        if not self.count or n < 1:
            return
        positive = [k for k in self._bins if k != _ZERO]
        if not positive:
            yield (0.0, 0.0, self.count)
            return
        first, last = min(positive), max(positive)
        per = math.ceil((last - first + 1) / n)  # bins of ours in one of theirs
        counts = [0] * math.ceil((last - first + 1) / per)
        for key, count in self._bins.items():
            counts[0 if key == _ZERO else (key - first) // per] += count
        zeros = self._bins.get(_ZERO, 0)
        for i, count in enumerate(counts):
            low = 2 ** ((first - 1 + i * per) / BINS_PER_OCTAVE)
            high = 2 ** ((first - 1 + (i + 1) * per) / BINS_PER_OCTAVE)
            yield (0.0 if i == 0 and zeros else low, high, count)
