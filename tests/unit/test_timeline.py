"""zotsink._run.timeline: the run's picture from one pass over its attempts: a lane per
slot, cells that double, bounded memory."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from zotsink._run.report import Attempt
from zotsink._run.timeline import CELLS, Slots, Timeline

T0 = 1_795_514_400.0


def attempt(
    n: int,
    start: float,
    end: float | None,
    status: str = "ok",
    *,
    element: str = "1",
    host: str = "node1",
    peak: int | None = None,
) -> Attempt:
    seconds = None if end is None else end - start
    return Attempt(n, f"line{n}", 1, "7", element, host, start, end, status, seconds, peak)


def slots_run(durations: list[list[float]], gap: float = 0.003) -> list[Attempt]:
    """Attempts of one element, each inner list one slot's tasks one after the other; in the
    order they end (as the ledger has them)."""
    out = []
    n = 0
    for k, slot in enumerate(durations):
        t = T0 + 0.001 * k
        for d in slot:
            n += 1
            out.append(attempt(n, t, t + d))
            t += d + gap
    out.sort(key=lambda a: a.end)  # type: ignore[arg-type, return-value]
    return out


def most_at_once(attempts: list[Attempt]) -> int:
    events = sorted(
        [(a.start, 1) for a in attempts] + [(a.end, -1) for a in attempts],  # type: ignore[misc]
    )
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_an_element_run_two_at_a_time_has_two_lanes() -> None:
    attempts = slots_run([[1.0, 2.0, 0.5, 3.0], [0.2, 0.2, 4.0, 1.0, 0.3]])
    tl = Timeline().feed(attempts).finish()
    assert tl.lanes(("node1", "7[1]")) == 2
    assert sorted(tl.rows) == [("node1", "7[1]", 0), ("node1", "7[1]", 1)]
    slots = Slots()
    for a in attempts:
        slots.add(a)
    assert slots.most() == 2


@given(
    st.lists(
        st.lists(st.floats(min_value=0.01, max_value=100.0), min_size=1, max_size=12),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["end", "start"]),
)
def test_lanes_are_as_few_as_the_most_at_once(slots: list[list[float]], order: str) -> None:
    attempts = slots_run(slots)
    if order == "start":
        attempts.sort(key=lambda a: a.start)  # type: ignore[arg-type, return-value]
    tl = Timeline().feed(attempts).finish()
    assert tl.lanes(("node1", "7[1]")) == most_at_once(attempts) <= len(slots)


def test_the_axis_spans_the_run_and_a_lost_attempt_ends_at_its_run_s_end() -> None:
    attempts = [
        attempt(1, T0, T0 + 10),
        attempt(2, T0 + 1, T0 + 4, "lost", element="2"),  # its run's last row: T0 + 4
        attempt(3, T0 + 5, T0 + 30, "failed"),
        attempt(4, T0 + 20, None, "running", element="3"),  # its run is gone: to the last end
    ]
    tl = Timeline().feed(attempts).finish()
    assert tl.span() == (T0, T0 + 30)
    (lost,) = [k for k in tl.marked if k.attempt.status == "lost"]
    assert lost.end == T0 + 4
    (running,) = [k for k in tl.marked if k.attempt.status == "running"]
    assert running.end == T0 + 30
    # while its run lives, it runs until the page's moment
    live = Timeline(until=T0 + 45).feed(attempts).finish()
    assert live.span() == (T0, T0 + 45)


def code_at(tl: Timeline, group: tuple[str, str], lane: int, t: float) -> int:
    position = int((t - tl.cell_time(0)) // tl.width)
    return tl.rows[tl.row_key(group, lane)][position]


def test_cells_keep_what_they_hold_as_the_run_grows() -> None:
    # one long slot: a failed attempt early, then the run grows a thousandfold
    attempts = [attempt(1, T0, T0 + 1.0), attempt(2, T0 + 1.0, T0 + 2.0, "failed")]
    attempts += [attempt(n, T0 + n, T0 + n + 1.0) for n in range(2, 2000)]
    tl = Timeline().feed(attempts).finish()
    assert code_at(tl, ("node1", "7[1]"), 0, T0 + 1.5) == 9  # failed outranks its ok neighbour
    assert code_at(tl, ("node1", "7[1]"), 0, T0 + 1000.5) == 1  # ok
    c0, c1 = tl.cell_range()
    assert CELLS // 2 <= c1 - c0 + 1 <= CELLS  # the span is drawn on half the cells or more
    assert tl.cell_time(c0) <= T0 and tl.cell_time(c1) + tl.width >= T0 + 2000
    assert sum(tl.ended_ok) == 1999 and sum(tl.ended_bad) == 1
    busy = sum(tl.busy)
    assert abs(busy - 2000.0) < 1e-6  # slot-seconds: every attempt's own
    assert sum(ok + bad for _, _, ok, bad in tl.times.used()) == 2000


def test_an_early_attempt_that_comes_late_moves_the_origin() -> None:
    tl = Timeline()
    tl.add(attempt(1, T0 + 1000, T0 + 1001))
    tl.add(attempt(2, T0, T0 + 1, "failed", element="2"))
    tl.finish()
    assert tl.span() == (T0, T0 + 1001)
    assert code_at(tl, ("node1", "7[2]"), 0, T0 + 0.5) == 9
    assert code_at(tl, ("node1", "7[1]"), 0, T0 + 1000.5) == 1


def many(n: int, elements: int = 16) -> Iterator[Attempt]:
    rng = random.Random(5)
    clocks = [[T0, T0] for _ in range(elements)]
    for i in range(n):
        e = i % elements
        k = 0 if clocks[e][0] <= clocks[e][1] else 1
        start = clocks[e][k]
        end = start + rng.uniform(0.5, 3.0)
        clocks[e][k] = end
        status = "failed" if rng.random() < 0.02 else "ok"
        yield attempt(i + 1, start, end, status, element=str(e), host=f"n{e % 4}", peak=i % 5000)


def test_rows_merge_an_element_s_lanes_then_a_host_s_as_they_outgrow_the_room() -> None:
    # 12 elements on 3 hosts, each 4 at a time: 48 lanes
    attempts = []
    for e in range(12):
        for k in range(4):
            attempts.append(
                attempt(e * 10 + k, T0 + k, T0 + k + 10, element=str(e), host=f"node{e % 3}")
            )
    assert Timeline(rows=48).feed(attempts).finish().mode == "slots"
    tl = Timeline(rows=47).feed(attempts).finish()
    assert tl.mode == "elements" and len(tl.rows) == 12
    assert tl.lanes(("node0", "7[0]")) == 4  # the lanes are still counted
    tl = Timeline(rows=11).feed(attempts).finish()
    assert tl.mode == "hosts" and sorted(tl.rows) == [(f"node{h}", None, None) for h in range(3)]
    tl = Timeline(rows=2).feed(attempts).finish()  # one host, then the others in one row
    assert tl.mode == "hosts" and tl.row_keys() == [
        ("node0", None, None),
        ("(other hosts)", None, None),
    ]
    assert code_at(tl, ("node2", "7[2]"), 0, T0 + 5) == 1


def test_a_long_attempt_costs_what_a_short_one_does() -> None:
    # every attempt spans the whole run: painting and busy time do not walk its cells
    attempts = [
        attempt(n, T0 + n * 1e-3, T0 + 3600 + n * 1e-3, element=str(n % 50)) for n in range(5000)
    ]
    tl = Timeline(rows=20).feed(attempts).finish()
    assert abs(sum(tl.busy) - 5000 * 3600) < 1e-3 * 5000 * 3600


#: Feeds N attempts made one at a time, prints the process's peak (KiB).
FEED = """
import resource, sys
from tests.unit.test_timeline import many
from zotsink._run.timeline import Timeline
Timeline().feed(many(int(sys.argv[1]))).finish()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_kib(n: int) -> int:
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", FEED, str(n)], capture_output=True, cwd=root)
    assert r.returncode == 0, r.stderr.decode()
    return int(r.stdout)


def test_memory_does_not_grow_with_the_attempts() -> None:
    small, large = peak_kib(20_000), peak_kib(300_000)
    # fifteen times the attempts, the same memory: lanes x cells, series, bins, kept
    # attempts (a few dozen bytes kept per attempt would add megabytes)
    assert large < small + 4 * 1024, (small, large)
