#!/usr/bin/env python3
"""What measuring a task's usage costs: per command task, per function call.

Turn about, R rounds of each (the order turned every round), N tasks or calls a round:

    command, measured     what the run adds for a command that ended, beyond wait4: the
                          OOM count noted before it (one pread), the run's floor (one
                          getrusage; its own peak read where that cannot tell), the
                          usage read from wait4's rusage, the OOM judged
    command, not measured the same loop without them
    call, measured        a no-op FUNC(line) between CallMeter.begin() and .end(): the
                          peak reset (/proc/self/clear_refs), VmHWM read, four getrusage
    call, not measured    the same call alone

and, end to end, real processes (``/bin/true``) collected with ``reap`` (wait4, usage read)
against ``Popen.wait`` (waitpid): spawning dominates, the difference is within its noise.
Prints the median and the range per task or call, the difference, and the load (uptime)
before and after. Targets: <= 5 us per command task beyond wait4, <= 20 us per call.

    .venv/bin/python scripts/bench/usage.py                 # 7 rounds of 200,000
    .venv/bin/python scripts/bench/usage.py -r 3 -n 20000   # quick
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, HERE)

from zotsink._run.usage import (  # noqa: E402  (the tree this script is in, not an installed one)
    CallMeter,
    OomCounter,
    OomWatch,
    SpawnFloor,
    command_usage,
    reap,
)


def per_op(loop: Callable[[int], None], n: int) -> float:
    """Seconds per operation of ``loop(n)``."""
    t0 = time.perf_counter()
    loop(n)
    return (time.perf_counter() - t0) / n


def command_measured(
    counter: OomCounter, floor: SpawnFloor, rusage: object
) -> Callable[[int], None]:
    def loop(n: int) -> None:
        for _ in range(n):
            watch = OomWatch(counter)
            watch.before()
            usage = command_usage(rusage, floor=floor, oom=watch.after(None))
            del usage

    return loop


def command_bare(counter: OomCounter, floor: SpawnFloor, rusage: object) -> Callable[[int], None]:
    def loop(n: int) -> None:
        for _ in range(n):
            usage = rusage
            del usage

    return loop


def func(line: str) -> None:
    return None


def call_measured(meter: CallMeter) -> Callable[[int], None]:
    def loop(n: int) -> None:
        for _ in range(n):
            meter.begin()
            func("x")
            usage = meter.end()
            del usage

    return loop


def call_bare(meter: CallMeter) -> Callable[[int], None]:
    def loop(n: int) -> None:
        for _ in range(n):
            func("x")

    return loop


def processes(floor: SpawnFloor, measured: bool) -> Callable[[int], None]:
    def loop(n: int) -> None:
        for _ in range(n):
            p = subprocess.Popen(["/bin/true"])
            if measured:
                got = reap(p, block=True)
                assert got is not None
                command_usage(got.rusage, floor=floor)
            else:
                p.wait()

    return loop


def turn_about(pairs: dict[str, Callable[[int], None]], rounds: int, n: int) -> dict[str, list]:
    names = list(pairs)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            out[name].append(per_op(pairs[name], n))
    return out


def show(title: str, results: dict[str, list[float]], unit: float, label: str) -> None:
    (_, m), (_, b) = results.items()
    diffs = [x - y for x, y in zip(m, b)]
    print(f"{title}")
    for name, values in results.items():
        print(
            f"  {name:28} {statistics.median(values) / unit:9.2f} {label} "
            f"({min(values) / unit:.2f}-{max(values) / unit:.2f})"
        )
    print(
        f"  {'cost of measuring':28} {statistics.median(diffs) / unit:9.2f} {label} "
        f"({min(diffs) / unit:.2f}-{max(diffs) / unit:.2f}), per round in turn"
    )


def uptime() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-r", "--rounds", type=int, default=7)
    ap.add_argument("-n", "--number", type=int, default=200_000, help="tasks or calls a round")
    ap.add_argument("-p", "--processes", type=int, default=300, help="real processes a round")
    args = ap.parse_args()
    now = datetime.now(timezone.utc)
    print(
        f"# {now:%Y-%m-%d %H:%M} UTC on {os.uname().nodename}, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}, load {uptime()}"
    )
    print(f"# {' '.join(sys.argv)}")
    counter = OomCounter()
    floor = SpawnFloor()
    meter = CallMeter()
    p = subprocess.Popen(["/bin/true"])
    got = reap(p, block=True)
    assert got is not None
    print(
        f"# OOM count: {counter.path or 'none here'}; peak reset per call: "
        f"{'yes' if meter.measures_peak else 'refused by this kernel'}"
    )
    us = 1e-6
    results = turn_about(
        {
            "command, measured": command_measured(counter, floor, got.rusage),
            "command, not measured": command_bare(counter, floor, got.rusage),
        },
        args.rounds,
        args.number,
    )
    show(f"per command task, beyond wait4 ({args.number:,} a round):", results, us, "us")
    results = turn_about(
        {"call, measured": call_measured(meter), "call, not measured": call_bare(meter)},
        args.rounds,
        args.number,
    )
    show(f"per function call ({args.number:,} a round):", results, us, "us")
    results = turn_about(
        {
            "/bin/true, reap": processes(floor, True),
            "/bin/true, Popen.wait": processes(floor, False),
        },
        args.rounds,
        args.processes,
    )
    show(f"real processes, end to end ({args.processes} a round):", results, us, "us")
    print(f"# load after: {uptime()}")


if __name__ == "__main__":
    main()
