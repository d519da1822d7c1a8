"""Streaming figures: ``stream``, ``stamp`` and ``concurrent``, and the floor consumer."""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

from .common import (
    BENCH,
    CPU,
    LINE,
    Ctx,
    empty_input,
    make_input,
    med,
    pair_ratios,
    pipeline,
    pipelines,
    rotate,
    unlink,
    whole_lines,
    zotsink_cmd,
)


def _stream_throughput(ctx: Ctx, consumers: dict[str, list[str] | None]) -> dict[str, Any]:
    """Steady-state throughput of stream consumers (``None``: ``cat >> out``), in turns.

    Each consumer also runs on empty input; the median of those runs (start-up and exit) is
    subtracted from each full run. The first consumer is zotsink, the second the baseline.
    """
    lines = ctx.size("lines")
    src, empty = make_input(ctx.d, lines), empty_input(ctx.d)
    nbytes = lines * len(LINE)
    out = ctx.d / "stream.out"

    def run(cmd: list[str] | None, infile: Path) -> float:
        unlink(out)
        if cmd is None:
            dt = pipeline(infile, ["cat"], out)
        else:
            dt = pipeline(infile, [*cmd, str(out)], None)
        got = out.stat().st_size if out.exists() else 0
        if infile is src and got < nbytes:
            raise SystemExit(f"bench: {out} has {got} bytes, expected at least {nbytes}")
        return dt

    def timed(cmd: list[str] | None, infile: Path) -> tuple[float, float]:
        dt = run(cmd, infile)
        return dt, CPU[-1]

    runs = ctx.runs("stream")
    cmds = list(consumers.values())
    empties = rotate(max(3, runs), [lambda i, c=c: timed(c, empty) for c in cmds])
    fulls = rotate(runs, [lambda i, c=c: timed(c, src) for c in cmds])
    unlink(out)
    sides = []
    for name, e_runs, f_runs in zip(consumers, empties, fulls):
        e = [w for w, _ in e_runs]
        f = [w for w, _ in f_runs]
        e0 = statistics.median(e)
        rates = [lines / max(t - e0, 1e-9) for t in f]  # records/s
        c0 = statistics.median([c for _, c in e_runs])
        cpu_rates = [lines / max(c - c0, 1e-9) for _, c in f_runs]
        sides.append(
            {
                "name": name,
                "records_per_s": med(rates),
                "mb_per_s": med([r * len(LINE) / 1e6 for r in rates]),
                "wall_s": med(f),
                "empty_s": e0,
                "rates": rates,
                "cpu_records_per_s": med(cpu_rates),
                "cpu_rates": cpu_rates,
            }
        )
    return {
        "lines": lines,
        "cpu_ratio": pair_ratios(sides[0]["cpu_rates"], sides[1]["cpu_rates"]),
        "bytes": nbytes,
        "zotsink": sides[0],
        "baseline": sides[1],
        "others": sides[2:],
        "ratio": pair_ratios(sides[0]["rates"], sides[1]["rates"]),
        "unit": "records/s",
    }


def floor_consumer(out: str) -> None:
    """The leanest Python stream consumer doing zotsink's per-batch work, and nothing more.

    One reused buffer (no allocation per chunk), count the lines, refuse NUL bytes, then per
    64 KiB: flock, fstat, stat, one write of whole lines, unlock. What CPython can reach
    here, whatever zotsink's own design: the physical limit for the streaming figure.
    """
    import fcntl

    fd = os.open(out, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    batch, chunk = 1 << 16, 1 << 17
    buf = bytearray(batch + 2 * chunk)
    view = memoryview(buf)
    filled = records = 0
    while True:
        got = os.readv(0, [view[filled : filled + chunk]])
        if not got:
            break
        records += buf.count(b"\n", filled, filled + got)
        if buf.find(b"\0", filled, filled + got) >= 0:
            raise SystemExit("bench: NUL byte in the input")
        filled += got
        if filled >= batch:
            nl = buf.rfind(b"\n", 0, filled)
            if nl >= 0:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.fstat(fd)
                os.stat(out)
                os.write(fd, view[: nl + 1])
                fcntl.flock(fd, fcntl.LOCK_UN)
                buf[: filled - nl - 1] = view[nl + 1 : filled]
                filled -= nl + 1
    if filled:
        os.write(fd, view[:filled])
    os.close(fd)


def fig_stream(ctx: Ctx) -> dict[str, Any]:
    me = [sys.executable, str(BENCH), "_floor"]
    r = _stream_throughput(
        ctx,
        {
            "cat in | zotsink out": zotsink_cmd(),
            "cat in | cat >> out": None,
            "cat in | python floor (bench.py _floor)": me,
        },
    )
    floor = r["others"][0]
    r["floor_ratio"] = pair_ratios(floor["rates"], r["baseline"]["rates"])
    r["zotsink_over_floor"] = pair_ratios(r["zotsink"]["rates"], floor["rates"])
    r["floor_cpu_ratio"] = pair_ratios(floor["cpu_rates"], r["baseline"]["cpu_rates"])
    r.update(title="streaming 90-byte lines, steady state", target="ratio >= 0.8")
    r["met"] = r["ratio"]["median"] >= 0.8
    return r


def fig_stamp(ctx: Ctx) -> dict[str, Any]:
    z = zotsink_cmd()
    r = _stream_throughput(
        ctx, {"cat in | zotsink --stamp out": [*z, "--stamp"], "cat in | zotsink out": z}
    )
    r.update(title="--stamp streaming vs plain streaming", target="ratio >= 0.5")
    r["met"] = r["ratio"]["median"] >= 0.5
    return r


def fig_concurrent(ctx: Ctx) -> dict[str, Any]:
    lines, k = ctx.size("lines"), ctx.size("streams")
    src, empty = make_input(ctx.d, lines), empty_input(ctx.d)
    out = ctx.d / "concurrent.out"
    kinds: dict[str, list[str] | None] = {
        f"{k} x (cat in | zotsink out)": zotsink_cmd(),
        f"{k} x (cat in | cat >> out)": None,
        f"{k} x (cat in | python floor)": [sys.executable, str(BENCH), "_floor"],
    }
    checks: dict[str, tuple[int, int]] = {}

    def run(cmd: list[str] | None, infile: Path) -> float:
        unlink(out)
        if cmd is None:
            dt = pipelines(infile, lambda j: (["cat"], out), k)
        else:
            dt = pipelines(infile, lambda j: ([*cmd, str(out)], None), k)
        kind = "cat" if cmd is None else "zotsink" if cmd == kinds_list[0] else "floor"
        if infile is src and kind not in checks:
            checks[kind] = whole_lines(out, len(LINE))  # once per kind: it reads everything
        return dt

    kinds_list = list(kinds.values())
    runs = ctx.runs("concurrent")
    empties = rotate(max(3, runs), [lambda i, c=c: run(c, empty) for c in kinds_list])
    fulls = rotate(runs, [lambda i, c=c: run(c, src) for c in kinds_list])
    unlink(out)
    total = lines * k
    sides = []
    for name, e, f in zip(kinds, empties, fulls):
        e0 = statistics.median(e)
        rates = [total / max(t - e0, 1e-9) for t in f]
        sides.append(
            {
                "name": name,
                "records_per_s": med(rates),
                "wall_s": med(f),
                "empty_s": e0,
                "raw_records_per_s": med([total / t for t in f]),
                "rates": rates,
            }
        )
    ratio = pair_ratios(sides[0]["rates"], sides[1]["rates"])
    return {
        "title": f"{k} concurrent streams into one OUT, aggregate, steady state",
        "streams": k,
        "lines_per_stream": lines,
        "zotsink": sides[0],
        "baseline": sides[1],
        "others": sides[2:],
        "ratio": ratio,
        "floor_ratio": pair_ratios(sides[2]["rates"], sides[1]["rates"]),
        "zotsink_over_floor": pair_ratios(sides[0]["rates"], sides[2]["rates"]),
        "unit": "records/s",
        # (lines, torn lines): zotsink must have every line whole; cat >> tears lines
        "lines_check": {kind: {"lines": n, "torn": bad} for kind, (n, bad) in checks.items()},
        "target": "ratio >= 0.7",
        "met": ratio["median"] >= 0.7 and checks.get("zotsink", (total, 0)) == (total, 0),
    }
