"""When a run halts because its tasks fail: the pure decision, fed ended attempts."""

from __future__ import annotations

from zotsink._run.halting import Halting, systematic, window


def test_the_window_is_five_or_twice_the_jobs() -> None:
    assert [window(j) for j in (1, 2, 3, 8)] == [5, 5, 6, 16]


def test_the_first_tasks_all_failing_alike_halt_at_the_window() -> None:
    h = Halting(2, None)
    assert [h.end("failed", "no such file") for _ in range(4)] == [None] * 4
    why = h.end("failed", "no such file", "FileNotFoundError: x\n")
    assert why is not None and "first 5 tasks" in why and "FileNotFoundError: x" in why


def test_failures_not_alike_or_after_an_ok_never_halt_by_default() -> None:
    h = Halting(1, None)
    assert [h.end("failed", k) for k in "aaaab"] == [None] * 5
    assert [h.end("failed", "a") for _ in range(50)] == [None] * 50
    h = Halting(1, None)
    assert h.end("ok", None) is None
    assert [h.end("failed", "a") for _ in range(50)] == [None] * 50
    h = Halting(1, None)  # alike, but in another state: not alike
    assert [h.end(s, "a") for s in ("failed",) * 4 + ("timeout",)] == [None] * 5


def test_interrupted_attempts_are_no_verdict() -> None:
    h = Halting(1, None)
    assert [h.end("interrupted", "") for _ in range(10)] == [None] * 10
    assert [h.end("failed", "a") for _ in range(4)] == [None] * 4
    assert h.end("failed", "a") is not None


def test_halt_after_counts_failures_whatever_ended_ok() -> None:
    h = Halting(4, 3)
    assert h.end("ok", None) is None
    assert [h.end("failed", k) for k in "ab"] == [None, None]
    why = h.end("killed", "c")
    assert why is not None and "--halt-after 3" in why
    never = Halting(1, 0, again=True)
    assert not never.probing
    assert [never.end("failed", "a") for _ in range(100)] == [None] * 100


def test_a_ledger_that_says_systematic_probes_one_task() -> None:
    h = Halting(2, None, again=True)
    assert h.probing
    assert h.end("failed", "other") is not None
    h = Halting(2, None, again=True)
    assert h.end("ok", None) is None
    assert not h.probing
    assert [h.end("failed", "a") for _ in range(10)] == [None] * 10


def test_systematic_reads_the_last_window_of_ended_tasks() -> None:
    failed = [("failed", "k")] * 5
    assert systematic(failed, 2)
    assert not systematic(failed[:4], 2)
    assert not systematic(failed, 3)  # a window of 6
    assert systematic([("ok", ""), *failed], 2)
    assert not systematic([*failed, ("ok", "")], 2)
    assert not systematic([*failed[:4], ("failed", "j")], 2)
    assert systematic([*failed[:2], ("interrupted", ""), *failed[:3]], 1)
