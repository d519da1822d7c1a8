"""zotsink._run.spread: a distribution in bounded memory; its quantiles are never below the
true ones and above them by less than one bin."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from zotsink._run.spread import BIN_RATIO, Spread


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


figures = st.lists(
    st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1e9)), min_size=1, max_size=300
)


@given(figures, st.sampled_from([0.01, 0.5, 0.9, 0.95, 0.99, 1.0]))
def test_a_quantile_is_within_one_bin_above_the_truth(values: list[float], q: float) -> None:
    s = Spread()
    for v in values:
        s.add(v)
    got, truth = s.quantile(q), exact(values, q)
    assert got is not None
    assert truth <= got <= max(truth * BIN_RATIO, truth) * (1 + 1e-12) or (truth == 0 == got)
    assert got <= max(values)
    assert s.count == len(values) and s.high == max(values) and s.low == min(values)
    assert math.isclose(s.total, math.fsum(values), rel_tol=1e-9, abs_tol=1e-9)


@given(figures, st.integers(1, 40))
def test_bins_hold_every_figure(values: list[float], n: int) -> None:
    s = Spread()
    for v in values:
        s.add(v)
    bins = list(s.bins(n))
    assert 1 <= len(bins) <= n
    assert sum(c for *_, c in bins) == len(values)
    for (lo, hi, _), (lo2, _, _) in zip(bins, bins[1:]):
        assert lo <= hi and math.isclose(hi, lo2)


def test_merge_is_adding_each() -> None:
    a, b, both = Spread(), Spread(), Spread()
    for i, v in enumerate([3.0, 0.0, 7.5, 1e6, 42.0, 0.1]):
        (a if i % 2 else b).add(v)
        both.add(v)
    a.merge(b)
    assert (a.count, a.low, a.high, a.quantile(0.5), a.total) == (
        both.count,
        both.low,
        both.high,
        both.quantile(0.5),
        both.total,
    )


def test_empty() -> None:
    s = Spread()
    assert s.quantile(0.5) is None and s.mean is None and list(s.bins(5)) == []
