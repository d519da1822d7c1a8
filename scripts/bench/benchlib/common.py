"""Shared pieces of ``scripts/bench/bench.py``: sizes, timing helpers, pipelines, baselines' data.

Importing this module puts the zotsink tree to measure first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
#: The entry point, run again as the contention workers and the floor stream consumer.
BENCH = ROOT / "scripts" / "bench" / "bench.py"
#: The zotsink tree to measure (``--root``, e.g. a copy with a change to try): this one.
CODE = Path(os.environ.get("ZOTSINK_BENCH_ROOT", ROOT))
sys.path.insert(0, str(CODE))

FIGURES = ("stream", "concurrent", "record", "sink", "contention", "tinyfiles", "startup", "stamp")
LINE = b"%09d\t" % 0 + b"x" * 79 + b"\n"  # 90 bytes: a typical short result line
#: Child processes get the environment a user has: byte-code caching on.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
if CODE != ROOT:
    CHILD_ENV["PYTHONPATH"] = str(CODE)
#: Sizes: (full, --quick).
SIZES: dict[str, tuple[int, int]] = {
    "lines": (1_000_000, 20_000),
    "streams": (8, 3),
    "records": (100_000, 2_000),
    "sink_records": (1_000_000, 20_000),
    "procs": (16, 3),
    "per_proc": (10_000, 300),
    "tiny": (27_000, 500),
    "spawns": (21, 3),
}
RUNS: dict[str, tuple[int, int]] = {
    "stream": (9, 1),
    "concurrent": (3, 1),
    "record": (5, 1),
    "sink": (5, 1),
    "contention": (3, 1),
    "tinyfiles": (3, 1),
    "startup": (1, 1),  # one run = ``spawns`` alternating rounds
    "stamp": (9, 1),
}


# -- small helpers ---------------------------------------------------------------------------
def load1() -> float:
    return round(os.getloadavg()[0], 2)


def med(xs: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def fmt_stat(s: dict[str, float], digits: int = 0, scale: float = 1.0) -> str:
    f = f"{{:,.{digits}f}}"
    return (
        f"{f.format(s['median'] * scale)} "
        f"[{f.format(s['min'] * scale)}-{f.format(s['max'] * scale)}]"
    )


def alternate(runs: int, a: Callable[[int], Any], b: Callable[[int], Any]) -> tuple[list, list]:
    """Run ``a`` and ``b`` ``runs`` times each, in the order A B, B A, A B, ..."""
    ra: list[Any] = []
    rb: list[Any] = []
    for i in range(runs):
        if i % 2 == 0:
            ra.append(a(i))
            rb.append(b(i))
        else:
            rb.append(b(i))
            ra.append(a(i))
    return ra, rb


def pair_ratios(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    return med([x / y for x, y in zip(xs, ys)])


def zotsink_cmd() -> list[str]:
    script = Path(sys.executable).parent / "zotsink"
    return [str(script)] if script.exists() else [sys.executable, "-m", "zotsink"]


def unlink(*paths: str | Path) -> None:
    for p in paths:
        Path(p).unlink(missing_ok=True)


def pipeline(infile: str | Path, consumer: list[str], out: str | Path | None) -> float:
    """``cat INFILE | CONSUMER [>> OUT]``: the wall time from the first spawn to both exits.

    ``out`` set: the consumer's stdout is OUT opened for appending (``cat >> OUT``) without a
    shell, so that neither side pays for one.
    """
    t0 = time.perf_counter()
    prod = subprocess.Popen(["cat", str(infile)], stdout=subprocess.PIPE, env=CHILD_ENV)
    sink = open(out, "ab") if out is not None else None  # noqa: SIM115
    try:
        cons = subprocess.Popen(consumer, stdin=prod.stdout, stdout=sink, env=CHILD_ENV)
    finally:
        if sink is not None:
            sink.close()
    assert prod.stdout is not None
    prod.stdout.close()
    cpu = reap(cons)
    rc = cons.returncode, prod.wait()
    dt = time.perf_counter() - t0
    if rc != (0, 0):
        raise SystemExit(f"bench: {consumer} exited {rc}")
    CPU.append(cpu)
    return dt


#: The consumer's CPU seconds (user + system) of each :func:`pipeline`, in order: a measure
#: that other work on a shared machine inflates far less than wall time.
CPU: list[float] = []


def reap(p: subprocess.Popen[bytes]) -> float:
    """Wait for ``p``; its CPU seconds (user + system)."""
    _pid, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime


def pipelines(
    infile: Path, consumer: Callable[[int], tuple[list[str], Path | None]], k: int
) -> float:
    """``k`` concurrent pipelines (see :func:`pipeline`), all started together."""
    t0 = time.perf_counter()
    procs = []
    for j in range(k):
        cmd, out = consumer(j)
        prod = subprocess.Popen(["cat", str(infile)], stdout=subprocess.PIPE, env=CHILD_ENV)
        sink = open(out, "ab") if out is not None else None  # noqa: SIM115
        cons = subprocess.Popen(cmd, stdin=prod.stdout, stdout=sink, env=CHILD_ENV)
        if sink is not None:
            sink.close()
        assert prod.stdout is not None
        prod.stdout.close()
        procs += [prod, cons]
    rcs = [p.wait() for p in procs]
    dt = time.perf_counter() - t0
    if any(rcs):
        raise SystemExit(f"bench: a pipeline exited {rcs}")
    return dt


def make_input(d: Path, lines: int) -> Path:
    p = d / f"in-{lines}.txt"
    if not p.exists():
        with open(p, "wb") as f:
            chunk = LINE * 10_000
            for _ in range(lines // 10_000):
                f.write(chunk)
            f.write(LINE * (lines % 10_000))
    return p


def empty_input(d: Path) -> Path:
    p = d / "empty.txt"
    p.touch()
    return p


def whole_lines(path: Path, width: int) -> tuple[int, int]:
    """(lines, lines whose length is not ``width``) of a file of fixed-width lines."""
    n = bad = 0
    rest = b""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 24)
            if not chunk:
                break
            parts = (rest + chunk).split(b"\n")
            rest = parts.pop()
            n += len(parts)
            bad += len(parts) - sum(1 for x in parts if len(x) == width - 1)
    return n + (1 if rest else 0), bad + (1 if rest else 0)


# -- figures ---------------------------------------------------------------------------------
class Ctx:
    def __init__(self, args: argparse.Namespace, d: Path) -> None:
        self.args = args
        self.d = d
        self.quick = args.quick

    def size(self, name: str) -> int:
        return SIZES[name][1 if self.quick else 0]

    def runs(self, fig: str) -> int:
        if self.args.runs:
            return self.args.runs
        return RUNS[fig][1 if self.quick else 0]


def rotate(runs: int, fns: Sequence[Callable[[int], Any]]) -> list[list[Any]]:
    """Run each of ``fns`` ``runs`` times, the order rotating each round (A B C, B C A, ...)."""
    out: list[list[Any]] = [[] for _ in fns]
    for i in range(runs):
        for j in range(len(fns)):
            k = (i + j) % len(fns)
            out[k].append(fns[k](i))
    return out


def _rows(n: int) -> list[tuple[Any, ...]]:
    return [(f"item{i}", i, "ok", i * 0.5) for i in range(n)]


def _encoded(rows: list[tuple[Any, ...]]) -> list[bytes]:
    from zotsink._core.records import encode_row

    return [(encode_row(r, "tsv") + "\n").encode() for r in rows]


def _timed(fn: Callable[[], Any], n: int) -> float:
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)
