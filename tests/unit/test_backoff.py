"""The wait loop: jittered, growing, capped, and never past the deadline."""

from __future__ import annotations

import errno
import itertools
import os
import random
from pathlib import Path

import pytest

from zotsink._core import header
from zotsink._core.backoff import (
    CREATE_RACE,
    FIRST_DELAY,
    HEADER_SETTLE,
    LOCK_WAIT,
    MAX_DELAY,
    STALE_HANDLE,
    Policy,
    delays,
    pause,
    retry_until,
    tries,
)


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


def test_tries_stop_at_the_policy_s_count_with_the_ceilings_as_sleeps() -> None:
    fc = FakeClock()
    policy = Policy(0.01, 0.04, jitter=False, tries=5)
    seen = list(tries(policy, clock=fc.clock, sleep=fc.sleep))
    assert seen == [False, False, False, False, True]
    assert fc.sleeps == pytest.approx([0.01, 0.02, 0.04, 0.04])  # no sleep after the last


def test_tries_keep_a_budget_with_one_attempt_at_its_end() -> None:
    fc = FakeClock()
    at = []
    for last in tries(Policy(0.01, 0.25, jitter=False, budget=1.0), clock=fc.clock, sleep=fc.sleep):
        at.append((fc.now, last))
    assert at[0] == (100.0, False) and at[-1] == (pytest.approx(101.0), True)
    assert not any(last for _, last in at[:-1])
    assert sum(fc.sleeps) == pytest.approx(1.0) and max(fc.sleeps) <= 0.25


def test_a_loop_left_early_sleeps_no_more() -> None:
    fc = FakeClock()
    for n, _last in enumerate(tries(STALE_HANDLE, clock=fc.clock, sleep=fc.sleep)):
        if n == 2:
            break
    assert fc.sleeps == pytest.approx([STALE_HANDLE.first, 2 * STALE_HANDLE.first])


@pytest.mark.parametrize("policy", [CREATE_RACE, STALE_HANDLE, HEADER_SETTLE, LOCK_WAIT])
def test_every_policy_ends_or_is_given_a_deadline(policy: Policy) -> None:
    assert 0 < policy.first <= policy.cap
    if policy is LOCK_WAIT:
        assert policy.tries is None and policy.budget is None  # retry_until gives --timeout
    else:
        assert policy.tries is not None or policy.budget is not None


def test_pause_sleeps_the_policy_s_ceiling_without_jitter() -> None:
    fc = FakeClock()
    for n in range(4):
        pause(STALE_HANDLE, n, sleep=fc.sleep)
    assert fc.sleeps == pytest.approx([0.02, 0.04, 0.05, 0.05])


def test_a_stale_handle_at_out_s_header_is_retried_then_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\tb\n1\t2\n")
    real = header.open_regular
    calls: list[str] = []

    def stale_twice(path: str) -> tuple[int, os.stat_result]:
        calls.append(path)
        if len(calls) <= 2:
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))
        return real(path)

    monkeypatch.setattr(header, "open_regular", stale_twice)
    monkeypatch.setattr(header, "STALE_HANDLE", Policy(1e-3, 1e-3, jitter=False, tries=3))
    assert header.existing_header(str(out)) == b"a\tb\n"
    assert len(calls) == 3

    calls.clear()
    monkeypatch.setattr(header, "STALE_HANDLE", Policy(1e-3, 1e-3, jitter=False, tries=2))
    with pytest.raises(OSError) as e:
        header.existing_header(str(out))
    assert e.value.errno == errno.ESTALE and len(calls) == 2
