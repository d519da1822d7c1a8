#!/usr/bin/env python3
"""Streaming figures: ``cat big | zotsink out`` against ``cat big | cat >> out``.

    .venv/bin/python scripts/bench/stream.py                  # every figure, 1 M and 10 M lines
    .venv/bin/python scripts/bench/stream.py plain tsv --lines 1000000 --runs 7
    .venv/bin/python scripts/bench/stream.py --quick          # tiny sizes: a smoke run

Each figure runs a consumer and its baseline alternately (A B, B A, ...) on the same input
file, in the same invocation, and prints per-pair ratios of throughput (median, min-max).
Lines are 88 bytes. For inputs under 5 M lines the start-up cost (the median of runs on empty
input) is subtracted from every run, so that the figure is the steady state; at 10 M lines
start-up is under 5 % of a run and nothing is subtracted.

Figures and their targets:

    plain   cat big | zotsink out.txt                   vs cat big | cat >> out   >= 0.9
    tsv     cat big | zotsink --columns a,b,c out.tsv   vs cat big | cat >> out   >= 0.8
    stamp   cat big | zotsink --stamp out.txt           vs cat big | zotsink out  >= 0.8
    kv      cat big | zotsink --kv out.tsv              vs cat big | zotsink out  (reported)
    count   cat big | zotsink --count-lines out.txt     vs cat big | zotsink out  (reported)

``--root DIR`` measures the zotsink tree in DIR (e.g. a copy with a change to try). The
script prints numbers and never asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
WIDTH = 88  # bytes per input line, newline included
#: Below this many lines the start-up (a run on empty input) is subtracted.
SUBTRACT_BELOW = 5_000_000


def _line(i: int, kind: str) -> bytes:
    """One 88-byte input line of ``kind`` (plain, tsv or kv)."""
    if kind == "kv":
        head = b"id:%09d task:%05d name:" % (i, i % 100_000)
    else:
        head = b"%09d\t%05d\t" % (i, i % 100_000)
    return head + b"x" * (WIDTH - 1 - len(head)) + b"\n"


def make_input(d: Path, lines: int, kind: str) -> Path:
    """A file of ``lines`` lines (10,000 distinct ones repeated: writing it stays quick)."""
    p = d / f"in-{kind}-{lines}.txt"
    if not p.exists():
        block = b"".join(_line(i, kind) for i in range(10_000))
        with open(p, "wb") as f:
            for _ in range(lines // 10_000):
                f.write(block)
            f.write(block[: (lines % 10_000) * WIDTH])
    return p


def pipeline(
    infile: Path, consumer: Sequence[str] | None, out: Path, env: dict
) -> tuple[float, float]:
    """``cat INFILE | CONSUMER OUT`` (``None``: ``cat >> OUT``): wall seconds, both exited,
    and the consumer's CPU seconds (user + system), which other work on a shared machine
    inflates far less than the wall time."""
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    prod = subprocess.Popen(["cat", str(infile)], stdout=subprocess.PIPE)
    if consumer is None:
        with open(out, "ab") as sink:
            cons = subprocess.Popen(["cat"], stdin=prod.stdout, stdout=sink)
    else:
        # Run from OUT's directory: ``python -m`` puts the working directory first on
        # sys.path, and a zotsink tree there would win over the one PYTHONPATH names.
        cons = subprocess.Popen([*consumer, str(out)], stdin=prod.stdout, env=env, cwd=out.parent)
    assert prod.stdout is not None
    prod.stdout.close()
    _pid, status, usage = os.wait4(cons.pid, 0)
    cons.returncode = os.waitstatus_to_exitcode(status)
    rc = cons.returncode, prod.wait()
    dt = time.perf_counter() - t0
    if rc != (0, 0):
        raise SystemExit(f"bench: {consumer or 'cat'} exited {rc}")
    return dt, usage.ru_utime + usage.ru_stime


def figure(
    name: str,
    a: tuple[str, Sequence[str] | None, str],
    b: tuple[str, Sequence[str] | None, str],
    kind: str,
    lines: int,
    runs: int,
    d: Path,
    env: dict,
) -> dict:
    """Throughput of consumer ``a`` over consumer ``b`` (label, command, OUT's suffix)."""
    src = make_input(d, lines, kind)  # kv output loses the keys: 13 bytes a line
    empty = d / "empty.txt"
    empty.touch()
    subtract = lines < SUBTRACT_BELOW

    def run(side: tuple[str, Sequence[str] | None, str], infile: Path) -> tuple[float, float]:
        label, cmd, suffix = side
        out = d / f"out{suffix}"
        dt = pipeline(infile, cmd, out, env)
        if infile is src and out.stat().st_size < lines * (WIDTH - (13 if kind == "kv" else 0)):
            raise SystemExit(f"bench: {label} wrote {out.stat().st_size} bytes, too few")
        out.unlink(missing_ok=True)
        return dt

    e0 = {0: (0.0, 0.0), 1: (0.0, 0.0)}
    if subtract:
        for k, side in enumerate((a, b)):
            empties = [run(side, empty) for _ in range(5)]
            e0[k] = (
                statistics.median(w for w, _ in empties),
                statistics.median(c for _, c in empties),
            )
    walls: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    for i in range(runs):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for k in order:
            wall, cpu = run((a, b)[k], src)
            walls[k].append(wall)
            cpus[k].append(cpu)
    rates = [[lines / max(t - e0[k][0], 1e-9) for t in walls[k]] for k in (0, 1)]
    cpu_rates = [[lines / max(t - e0[k][1], 1e-9) for t in cpus[k]] for k in (0, 1)]
    ratios = [x / y for x, y in zip(*rates)]
    cpu_ratios = [x / y for x, y in zip(*cpu_rates)]
    return {
        "name": name,
        "lines": lines,
        "a": a[0],
        "b": b[0],
        "wall": [statistics.median(w) for w in walls],
        "cpu": [statistics.median(c) for c in cpus],
        "startup": [e0[0][0], e0[1][0]],
        "rate": [statistics.median(r) for r in rates],
        "ratio": (statistics.median(ratios), min(ratios), max(ratios)),
        "cpu_ratio": statistics.median(cpu_ratios),
    }


FIGURES = ("plain", "tsv", "stamp", "kv", "count")
TARGETS = {"plain": 0.9, "tsv": 0.8, "stamp": 0.8, "kv": None, "count": None}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("figures", nargs="*", metavar="FIGURE", help=", ".join(FIGURES))
    ap.add_argument("--lines", type=int, action="append", help="input sizes (repeatable)")
    ap.add_argument("--runs", type=int, default=7, help="runs of each side (default 7)")
    ap.add_argument("--quick", action="store_true", help="20,000 lines, 1 run: a smoke test")
    ap.add_argument("--root", type=Path, default=ROOT, help="the zotsink tree to measure")
    ap.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = ap.parse_args(argv)
    figs = args.figures or list(FIGURES)
    if set(figs) - set(FIGURES):
        ap.error(
            f"unknown figure {sorted(set(figs) - set(FIGURES))[0]!r}: use {', '.join(FIGURES)}"
        )
    sizes = [20_000] if args.quick else args.lines or [1_000_000, 10_000_000]
    runs = 1 if args.quick else args.runs
    env = dict(os.environ, PYTHONPATH=str(args.root.resolve()))
    z = [sys.executable, "-m", "zotsink"]
    cat = ("cat >> out", None, ".txt")
    plain = ("zotsink out", z, ".txt")
    sides = {
        "plain": (plain, cat, "plain"),
        "tsv": (
            ("zotsink --columns a,b,c out.tsv", [*z, "--columns", "a,b,c"], ".tsv"),
            cat,
            "tsv",
        ),
        "stamp": (("zotsink --stamp out.txt", [*z, "--stamp"], ".txt"), plain, "plain"),
        "kv": (("zotsink --kv out.tsv", [*z, "--kv"], ".tsv"), plain, "kv"),
        "count": (("zotsink --count-lines out", [*z, "--count-lines"], ".txt"), plain, "plain"),
    }
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(args.root / "zotsink")], check=True
    )
    print(f"# {' '.join([os.path.basename(sys.argv[0]), *(argv or sys.argv[1:])])}")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} on {platform.node()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {_load()}"
    )
    print(f"# {len(figs)} figures x {sizes} lines of {WIDTH} bytes, {runs} alternating runs each")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = Path(tmp).resolve()
        for lines in sizes:
            for name in figs:
                a, b, kind = sides[name]
                r = figure(name, a, b, kind, lines, runs, d, env)
                med, lo, hi = r["ratio"]
                target = TARGETS[name]
                verdict = (
                    ""
                    if target is None or args.quick
                    else ("  met" if med >= target else "  MISSED")
                )
                print(
                    f"{name:6} {lines:>10,} lines  {r['a']}: {r['rate'][0] / 1e6:.2f} M lines/s "
                    f"(wall {r['wall'][0]:.3f} s)  {r['b']}: {r['rate'][1] / 1e6:.2f} M lines/s "
                    f"(wall {r['wall'][1]:.3f} s)  ratio {med:.2f} [{lo:.2f}-{hi:.2f}]"
                    f" (by consumer CPU time: {r['cpu_ratio']:.2f})"
                    + (f" target >= {target}" if target else "")
                    + verdict
                    + (
                        f"  start-up {r['startup'][0]:.3f}/{r['startup'][1]:.3f} s subtracted"
                        if lines < SUBTRACT_BELOW
                        else ""
                    ),
                    flush=True,
                )
    print(f"# load after: {_load()}")
    return 0


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
