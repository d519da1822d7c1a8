#!/usr/bin/env python3
"""``zotsink.Executor.map`` against ``concurrent.futures.ProcessPoolExecutor.map`` on one
machine, and the Executor's memory over more items than a list of futures would hold.

    .venv/bin/python scripts/bench/executor.py                      # 20,000 items, 3 rounds
    .venv/bin/python scripts/bench/executor.py --items 5000 --rounds 2 --memory 20000,80000
    .venv/bin/python scripts/bench/executor.py --chunksize 10       # both ways in chunks

Part 1, time: the same function (it spins for ``--work`` seconds, 0.5 ms by default, on
the CPU), the same items (``range(N)``), ``--workers`` processes at a time (default: the
CPUs this process may use): the pool with ``max_workers`` of them, the Executor as one local
element with ``jobs`` of them. Each way runs in a fresh child process, the two taking turns
(the order rotating from round to round); printed: each round's wall seconds, the CPU of
each way's process tree (user + system, ``os.wait4``), and the ratio Executor / pool, per
round and the median. The work alone is ``N x work / workers`` seconds.

Part 2, memory (``--memory N,N,...``): a trivial function over a generator of N items (never
a list), each way in a fresh child process that prints its own peak resident size: the pool
submits every item at once (a future per item, held until the end), the Executor keeps a
bounded window. The Executor's elements are other processes: their memory is the run's,
not the client's.

Prints numbers, never asserts one; checks that every result came back, in order.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
MOD = """\
import time


def spin(x, work):
    end = time.perf_counter() + work
    while time.perf_counter() < end:
        pass
    return x


def same(x, work):
    return x
"""
CHILD = """\
import concurrent.futures, itertools, resource, sys, time
sys.path[:0] = [sys.argv[1], {root!r}]
from benchmod import spin, same
way, n, work, workers, chunksize, where, fn = sys.argv[2:9]
n, work, workers, chunksize = int(n), float(work), int(workers), int(chunksize)
fn = spin if fn == "spin" else same
items = (i for i in range(n))  # a generator: the items are never a list
works = itertools.repeat(work)
t0 = time.perf_counter()
if way == "pool":
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as ex:
        got = ex.map(fn, items, works, chunksize=chunksize)
        count = sum(1 for i, r in enumerate(got) if r == i)
else:
    import zotsink
    with zotsink.Executor(where, scheduler="local", elements=1, jobs=workers, idle=60) as ex:
        got = ex.map(fn, items, works, chunksize=chunksize)
        count = sum(1 for i, r in enumerate(got) if r == i)
wall = time.perf_counter() - t0
if count != n:
    sys.exit(f"{{way}}: {{count}} of {{n}} results in order")
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"{{wall}} {{rss}}")
"""
#: Child processes get the environment a user has: byte-code caching on.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def one(
    way: str, n: int, work: float, workers: int, chunksize: int, base: Path, fn: str
) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the whole process tree, the client's peak RSS in KiB)."""
    where = base / f"executor-{way}-{time.monotonic_ns()}"
    argv = [
        sys.executable,
        "-c",
        CHILD.format(root=str(ROOT)),
        str(base),
        way,
        str(n),
        str(work),
        str(workers),
        str(chunksize),
        str(where),
        fn,
    ]
    p = subprocess.Popen(argv, env=CHILD_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _pid, status, ru = os.wait4(p.pid, 0)
    assert p.stdout is not None and p.stderr is not None
    out, err = p.stdout.read().decode(), p.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench: {way} failed:\n{err[-3000:]}")
    wall, rss = out.split()
    # the elements are not the client's children once it is gone: their CPU is in the
    # run's own accounting, not here; the pool's workers are reaped by the client
    shutil.rmtree(where, ignore_errors=True)
    return float(wall), ru.ru_utime + ru.ru_stime, int(rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=20_000)
    ap.add_argument("--work", type=float, default=0.0005, help="seconds of CPU per item")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--chunksize", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--memory",
        default="100000,400000",
        help="item counts for the memory part ('' to skip)",
    )
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="zotsink-bench-executor-"))
    (base / "benchmod.py").write_text(MOD)
    try:
        print(
            f"time: {args.items:,} items of {args.work * 1000:g} ms, {args.workers} at a time, "
            f"chunksize {args.chunksize}; the work alone "
            f"{args.items * args.work / args.workers:.2f} s; load {load()}"
        )
        ratios = []
        for r in range(args.rounds):
            order = ["pool", "executor"] if r % 2 == 0 else ["executor", "pool"]
            got = {}
            for way in order:
                got[way] = one(
                    way, args.items, args.work, args.workers, args.chunksize, base, "spin"
                )
            ratio = got["executor"][0] / got["pool"][0]
            ratios.append(ratio)
            print(
                f"  round {r + 1}: pool {got['pool'][0]:.2f} s (CPU {got['pool'][1]:.2f} s), "
                f"executor {got['executor'][0]:.2f} s (client CPU {got['executor'][1]:.2f} s): "
                f"{ratio:.2f}x; load {load()}"
            )
        print(f"  median executor / pool: {statistics.median(ratios):.2f}x")
        sizes = [int(s) for s in args.memory.split(",") if s]
        if sizes:
            print("memory: a trivial function over a generator, the client's peak RSS")
        for n in sizes:
            row = []
            for way in ("pool", "executor"):
                wall, _cpu, rss = one(way, n, 0.0, args.workers, args.chunksize, base, "same")
                row.append(f"{way} {rss / 1024:.0f} MiB ({wall:.1f} s)")
            print(f"  {n:,} items: " + ", ".join(row) + f"; load {load()}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
