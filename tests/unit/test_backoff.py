"""The wait loop: jittered, growing, capped, and never past the deadline."""

from __future__ import annotations

import itertools
import random

import pytest

from zotsink._core.backoff import FIRST_DELAY, MAX_DELAY, delays, retry_until


def test_ceilings_double_from_50us_to_a_50ms_cap() -> None:
    ceilings = list(itertools.islice(delays(rand=lambda: 1.0), 14))
    assert ceilings[0] == pytest.approx(50e-6)
    assert ceilings[1] == pytest.approx(100e-6)
    assert all(b == pytest.approx(min(MAX_DELAY, 2 * a)) for a, b in zip(ceilings, ceilings[1:]))
    assert ceilings[-1] == MAX_DELAY == pytest.approx(50e-3)
    assert pytest.approx(50e-6) == FIRST_DELAY


def test_sleeps_are_full_jitter_below_the_ceiling() -> None:
    rng = random.Random(7)
    got = list(itertools.islice(delays(rand=rng.random), 200))
    ceilings = list(itertools.islice(delays(rand=lambda: 1.0), 200))
    assert all(0 <= g <= c for g, c in zip(got, ceilings))
    capped = got[20:]  # all at the cap: spread over [0, 50 ms), not one value
    assert len({round(g, 6) for g in capped}) > 150
    assert min(capped) < 0.2 * MAX_DELAY and max(capped) > 0.8 * MAX_DELAY


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.sleeps.append(s)
        self.now += s


def test_gives_up_at_the_deadline_without_oversleeping() -> None:
    fc = FakeClock()
    calls = []

    def attempt() -> bool:
        calls.append(fc.now)
        return False

    ok, tries, waited = retry_until(attempt, 0.5, clock=fc.clock, sleep=fc.sleep, rand=lambda: 1.0)
    assert not ok
    assert waited == pytest.approx(0.5)
    assert fc.now == pytest.approx(100.5)  # the last sleep was cut to the deadline
    assert calls[0] == 100.0  # the first attempt is immediate
    assert calls[-1] == pytest.approx(100.5)  # and one last attempt at the deadline
    assert tries == len(calls)
    assert fc.sleeps[:3] == pytest.approx([50e-6, 100e-6, 200e-6])
    assert max(fc.sleeps) <= MAX_DELAY


def test_succeeds_as_soon_as_the_lock_is_free() -> None:
    fc = FakeClock()
    results = iter([False, False, False, True])
    ok, tries, waited = retry_until(
        lambda: next(results), 10, clock=fc.clock, sleep=fc.sleep, rand=lambda: 0.5
    )
    assert ok and tries == 4
    assert waited == pytest.approx(sum(fc.sleeps)) and len(fc.sleeps) == 3


def test_zero_timeout_means_one_attempt() -> None:
    fc = FakeClock()
    ok, tries, _ = retry_until(lambda: False, 0, clock=fc.clock, sleep=fc.sleep)
    assert (ok, tries, fc.sleeps) == (False, 1, [])
