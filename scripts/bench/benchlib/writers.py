"""Writer figures: ``record`` (append_record), ``sink`` and ``contention`` (with its worker)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import (
    BENCH,
    CHILD_ENV,
    Ctx,
    _encoded,
    _rows,
    _timed,
    alternate,
    med,
    pair_ratios,
    unlink,
)


def _loop_raw_open(path: str, rows: list[bytes]) -> None:
    import fcntl

    for b in rows:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b)
        os.close(fd)


def _loop_raw_held(path: str, rows: list[bytes]) -> None:
    import fcntl

    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    for b in rows:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b)
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _loop_raw_checked(path: str, rows: list[bytes]) -> None:
    """The system calls the writer needs per batch, and nothing else: the floor for it
    (the lock, the stat that proves the name still holds the inode, the write, unlock)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    for b in rows:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.stat(path)
        os.write(fd, b)
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _loop_inline(path: str, rows: list[tuple[Any, ...]]) -> None:
    """append_record's work written as one loop, without functions: encode the row (escape
    check included), lock, check the name still holds the inode and nobody wrote since,
    write, unlock. What zotsink would reach with no layers at all."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    st = os.fstat(fd)
    dev, ino, end = st.st_dev, st.st_ino, st.st_size
    lock, unlock = fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_UN
    for r in rows:
        line = "\t".join(
            [v if type(v) is str else repr(v) if type(v) is float else str(v) for v in r]
        )
        if "\\" in line or "\n" in line or "\r" in line or line.count("\t") != len(r) - 1:
            raise SystemExit("bench: a row that needs escaping")
        data = line.encode() + b"\n"
        fcntl.flock(fd, lock)
        named = os.stat(path)
        if named.st_ino != ino or named.st_dev != dev or named.st_size != end:
            raise SystemExit("bench: OUT changed under the inline loop")
        end += os.write(fd, data)
        fcntl.flock(fd, unlock)
    os.close(fd)


def fig_record(ctx: Ctx) -> dict[str, Any]:
    from zotsink import append_record

    n = ctx.size("records")
    rows = _rows(n)
    enc = _encoded(rows)

    def zs(i: int) -> float:
        p = str(ctx.d / f"record-{i}.tsv")
        unlink(p)

        def loop() -> None:
            for r in rows:
                append_record(p, r)

        rate = _timed(loop, n)
        unlink(p)
        return rate

    def raw(fn: Callable[[str, Any], None], tag: str, data: Any = enc) -> Callable[[int], float]:
        def run(i: int) -> float:
            p = str(ctx.d / f"{tag}-{i}.tsv")
            unlink(p)
            rate = _timed(lambda: fn(p, data), n)
            unlink(p)
            return rate

        return run

    runs = ctx.runs("record")
    za, held = alternate(runs, zs, raw(_loop_raw_held, "held"))
    za2, opened = alternate(runs, zs, raw(_loop_raw_open, "open"))
    _, checked = alternate(runs, zs, raw(_loop_raw_checked, "checked"))
    za3, inlined = alternate(runs, zs, raw(_loop_inline, "inline", rows))
    z = za + za2
    return {
        "title": "append_record loop, TSV row of 4 values, local disk",
        "records": n,
        "unit": "records/s",
        "zotsink": {"name": "append_record(path, (str, int, str, float))", "records_per_s": med(z)},
        "baseline": {
            "name": "raw Python: held fd, flock+write+unlock (the raw limit)",
            "records_per_s": med(held),
        },
        "baselines": {
            "os.open+flock+write+close per record": med(opened),
            "raw floor of the writer's syscalls (flock, stat, write, unlock)": med(checked),
            "append_record's work as one inline loop (encode, checks, syscalls)": med(inlined),
        },
        "inline_ratio": pair_ratios(za3, inlined),
        "ratio": pair_ratios(za, held),
        "target": "zotsink >= 150,000 records/s",
        "met": statistics.median(z) >= 150_000,
    }


def fig_sink(ctx: Ctx) -> dict[str, Any]:
    import fcntl

    from zotsink import Sink

    n = ctx.size("sink_records")
    lines = [f"item{i}\t{i}\tok\t{i * 0.5}" for i in range(n)]
    rows = _rows(n // 4)

    def zs(i: int) -> float:
        p = ctx.d / f"sink-{i}.tsv"
        unlink(p)

        def loop() -> None:
            with Sink(p) as s:
                w = s.write
                for ln in lines:
                    w(ln)

        rate = _timed(loop, n)
        unlink(p)
        return rate

    def raw(i: int) -> float:
        # The fastest batched writer plain Python allows: encode, buffer, one locked write
        # per 64 KiB, with none of zotsink's checks.
        p = str(ctx.d / f"sinkraw-{i}.tsv")
        unlink(p)

        def loop() -> None:
            fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            buf: list[bytes] = []
            size = 0
            for ln in lines:
                b = ln.encode() + b"\n"
                buf.append(b)
                size += len(b)
                if size >= 65536:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    os.write(fd, b"".join(buf))
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    buf, size = [], 0
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, b"".join(buf))
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

        rate = _timed(loop, n)
        unlink(p)
        return rate

    def zs_rows(i: int) -> float:
        p = ctx.d / f"sinkrows-{i}.tsv"
        unlink(p)

        def loop() -> None:
            with Sink(p) as s:
                for r in rows:
                    s.write(r)

        rate = _timed(loop, len(rows))
        unlink(p)
        return rate

    runs = ctx.runs("sink")
    z, b = alternate(runs, zs, raw)
    zr = [zs_rows(i) for i in range(runs)]
    return {
        "title": "Sink batched writes of TSV lines (str records)",
        "records": n,
        "unit": "records/s",
        "zotsink": {"name": "Sink.write(str line)", "records_per_s": med(z)},
        "baseline": {
            "name": "raw Python: encode, buffer, flock+write per 64 KiB",
            "records_per_s": med(b),
        },
        "baselines": {"Sink.write(4-value tuple), for reference": med(zr)},
        "ratio": pair_ratios(z, b),
        "target": "zotsink >= 1,000,000 records/s",
        "met": statistics.median(z) >= 1_000_000,
    }


# -- contention: worker processes ------------------------------------------------------------
def worker(mode: str, path: str, n: int) -> None:
    """One contention worker: says ready, waits for a line on stdin, appends, reports JSON.

    Lock waits are timed around the lock acquisition only, by wrapping the Locker instance
    of this process (not the product's code path): per acquire, the wall time of the call.
    """
    import fcntl

    pc = time.perf_counter
    rows = _rows(n)
    waits: list[float] = []
    calls: list[float] = []
    if mode == "zotsink":
        from zotsink import _append as api

        t = api._target(path, None, None, None, "auto", "auto", 600.0)
        acquire = t.outlet.writer.locker.acquire

        def timed_acquire(fd: int, timeout: float, shared: bool = False) -> float:
            s = pc()
            r = acquire(fd, timeout, shared)
            waits.append(pc() - s)
            return r

        t.outlet.writer.locker.acquire = timed_acquire  # type: ignore[method-assign]
        append = api.append_record
    enc = _encoded(rows)
    print("ready", flush=True)
    sys.stdin.readline()
    start = pc()
    if mode == "zotsink":
        for r in rows:
            s = pc()
            append(path, r)
            calls.append(pc() - s)
    else:
        for b in enc:
            s = pc()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            w = pc()
            fcntl.flock(fd, fcntl.LOCK_EX)
            waits.append(pc() - w)
            os.write(fd, b)
            os.close(fd)
            calls.append(pc() - s)
    end = pc()
    json.dump({"start": start, "end": end, "waits": waits, "calls": calls}, sys.stdout)


def _contend(ctx: Ctx, mode: str, path: Path) -> dict[str, Any]:
    k, n = ctx.size("procs"), ctx.size("per_proc")
    unlink(path)
    me = [sys.executable, str(BENCH), "_worker", mode, str(path), str(n)]
    procs = [
        subprocess.Popen(
            me, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=CHILD_ENV, text=True
        )
        for _ in range(k)
    ]
    for p in procs:  # every worker has imported and prepared: start them together
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise SystemExit("bench: a contention worker failed to start")
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    reports = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            raise SystemExit(f"bench: a contention worker exited {p.returncode}")
        reports.append(json.loads(out))
    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    unlink(path)
    waits = sorted(w for r in reports for w in r["waits"])
    calls = sorted(c for r in reports for c in r["calls"])
    elapsed = sorted(r["end"] - r["start"] for r in reports)
    wall = max(r["end"] for r in reports) - min(r["start"] for r in reports)

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    return {
        "records_per_s": k * n / wall,
        "lines": lines,
        "expected": k * n,
        "wait_ms": {q: pct(waits, v) * 1e3 for q, v in (("p50", 0.5), ("p99", 0.99))}
        | {"max": waits[-1] * 1e3},
        "call_ms": {q: pct(calls, v) * 1e3 for q, v in (("p50", 0.5), ("p99", 0.99))}
        | {"max": calls[-1] * 1e3},
        "writer_s": {"min": elapsed[0], "median": statistics.median(elapsed), "max": elapsed[-1]},
        "slowest_over_median": elapsed[-1] / statistics.median(elapsed),
    }


def fig_contention(ctx: Ctx) -> dict[str, Any]:
    k, n = ctx.size("procs"), ctx.size("per_proc")
    path = ctx.d / "contention.tsv"
    za, ba = alternate(
        ctx.runs("contention"),
        lambda i: _contend(ctx, "zotsink", path),
        lambda i: _contend(ctx, "raw", path),
    )
    # the run whose p99 wait is the median one stands for all
    rep = sorted(za, key=lambda r: r["wait_ms"]["p99"])[len(za) // 2]
    ok = all(r["lines"] == r["expected"] for r in za)
    return {
        "title": f"{k} processes x {n:,} append_record into one OUT",
        "unit": "records/s",
        "zotsink": {
            "name": "append_record per record",
            "records_per_s": med([r["records_per_s"] for r in za]),
            "runs": za,
            "representative": rep,
        },
        "baseline": {
            "name": "raw Python: os.open+flock(LOCK_EX)+write+close per record",
            "records_per_s": med([r["records_per_s"] for r in ba]),
            "runs": ba,
        },
        "ratio": pair_ratios([r["records_per_s"] for r in za], [r["records_per_s"] for r in ba]),
        "target": "slowest writer <= 2x median; p99 lock wait <= 20 ms",
        "met": ok and rep["slowest_over_median"] <= 2.0 and rep["wait_ms"]["p99"] <= 20.0,
    }
