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
    STOP_CHECK,
    Policy,
    delays,
    pause,
    retry_until,
    tries,
    wait_for_lock,
)
from zotsink._core.stop import STOP_LOCK_TIMEOUT, Stopper
from zotsink.errors import LockTimeout


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


# -- the stop-aware lock wait ---------------------------------------------------------------


class HeldLock:
    """Lock calls on a lock another process holds: each waits its whole timeout on a fake
    clock, and a stop signal comes after ``signal_at`` seconds."""

    def __init__(self, stopper: Stopper, signal_at: float = float("inf")) -> None:
        self.now = 100.0
        self.calls: list[float] = []
        self.stopper = stopper
        self.signal_at = 100.0 + signal_at

    def clock(self) -> float:
        return self.now

    def attempt(self, timeout: float) -> None:
        self.calls.append(timeout)
        self.now += timeout
        if self.now >= self.signal_at:
            self.stopper.signum = 15
        raise LockTimeout(f"out: the lock was still held by another writer after {timeout:g} s")


def test_a_wait_nothing_can_stop_is_one_lock_call() -> None:
    held = HeldLock(Stopper())
    with pytest.raises(LockTimeout, match=r"after 600 s$"):
        wait_for_lock(held.attempt, 600.0, path="out", clock=held.clock)
    assert held.calls == [600.0]


def test_a_stoppable_wait_looks_at_the_signal_between_calls_and_tells_the_whole_wait() -> None:
    held = HeldLock(Stopper())
    with pytest.raises(LockTimeout) as e:
        wait_for_lock(held.attempt, 3.5, path="out", stopper=held.stopper, clock=held.clock)
    assert held.calls == [STOP_CHECK, STOP_CHECK, STOP_CHECK, 0.5]
    assert e.value.message == "out: the lock was still held by another writer after 3.5 s"


def test_a_writer_waits_stop_lock_timeout_more_after_a_signal_then_says_it() -> None:
    held = HeldLock(Stopper(), signal_at=2.0)
    with pytest.raises(LockTimeout) as e:
        wait_for_lock(held.attempt, 600.0, path="out", stopper=held.stopper, clock=held.clock)
    assert sum(held.calls) == pytest.approx(2.0 + STOP_LOCK_TIMEOUT)
    assert max(held.calls) <= STOP_CHECK
    assert e.value.message == (
        "out: stopped by signal 15 while waiting for its lock: the lock was still held by "
        f"another writer after {2.0 + STOP_LOCK_TIMEOUT:g} s"
    )


def test_a_reader_gives_up_at_the_signal_after_one_last_try() -> None:
    held = HeldLock(Stopper(), signal_at=2.0)
    with pytest.raises(LockTimeout, match=r"^ledger: stopped by signal 15 while waiting"):
        wait_for_lock(
            held.attempt,
            600.0,
            path="ledger",
            stopper=held.stopper,
            after_stop=0.0,
            clock=held.clock,
        )
    assert held.calls == [STOP_CHECK, STOP_CHECK, 0.0]


def test_a_caller_that_is_ending_waits_no_longer_than_after_a_signal() -> None:
    held = HeldLock(Stopper())
    with pytest.raises(LockTimeout, match=rf"after {STOP_LOCK_TIMEOUT:g} s$"):
        wait_for_lock(held.attempt, 600.0, path="out", stopping=True, clock=held.clock)
    assert sum(held.calls) == pytest.approx(STOP_LOCK_TIMEOUT)


def test_the_wait_ends_when_a_call_gets_the_lock() -> None:
    held = HeldLock(Stopper())
    got = iter([False, False, True])

    def attempt(timeout: float) -> str:
        if next(got):
            return "locked"
        return held.attempt(timeout)  # type: ignore[func-returns-value]

    assert wait_for_lock(attempt, 600.0, path="out", stopper=held.stopper) == "locked"
    assert held.calls == [STOP_CHECK, STOP_CHECK]
