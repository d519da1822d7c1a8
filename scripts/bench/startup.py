#!/usr/bin/env python3
"""One-record start-up: ``zotsink.pyz`` against the venv's ``zotsink`` command.

    python scripts/bench/startup.py [--rounds 40] [--pyz PATH] [--python PY ...]

Every job-array task starts zotsink once to append a few records, so what counts is the
wall time of ``printf 'x\\t1\\n' | zotsink out.tsv`` from exec to exit. The baseline is the
venv's ``zotsink`` entry point; the candidates run the archive with the same interpreter
(so the ratio is the archive's own cost), with a sources-only archive (what byte-compiling
buys), and with each ``--python`` given (other versions: shown, not in the ratio's target).
Runs alternate in every round (the order flips each round) so that load changes hit all
variants alike; medians and the ratio to the baseline are printed, with date and load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
RECORD = b"x\t1\n"


def build(out: Path, *extra: str) -> Path:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-pyz"), "-o", str(out), *extra],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return out


def once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, input=RECORD, env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--pyz", type=Path, help="an archive already built (default: build one)")
    parser.add_argument("--python", action="append", default=[], help="also run the pyz here")
    args = parser.parse_args()

    venv = ROOT / ".venv" / "bin"
    if not (venv / "zotsink").exists():
        sys.exit("startup.py: no .venv/bin/zotsink: run `. scripts/env.sh` first")
    # children see no ZOTSINK_* settings of the caller, and may write bytecode as usual
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "PYTHONDONT"))}

    with tempfile.TemporaryDirectory(prefix="zotsink-startup.") as tmp:
        work = Path(tmp)
        pyz = args.pyz or build(work / "zotsink.pyz")
        src_only = build(work / "sources.pyz", "--no-compile")
        variants = {
            "venv zotsink (baseline)": [str(venv / "zotsink")],
            "pyz, venv python": [str(venv / "python"), str(pyz)],
            "pyz sources only, venv python": [str(venv / "python"), str(src_only)],
        }
        for python in args.python:
            variants[f"pyz, {python}"] = [python, str(pyz)]
        outs = {name: work / f"out{i}.tsv" for i, name in enumerate(variants)}
        times: dict[str, list[float]] = {name: [] for name in variants}

        for argv in variants.values():  # warm the page cache and __pycache__ once
            once([*argv, str(work / "warm.tsv")], env)
        names = list(variants)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else reversed(names):
                times[name].append(once([*variants[name], str(outs[name])], env))

        for name, out in outs.items():  # every run appended its one record
            lines = out.read_bytes().count(b"\n")
            if lines != args.rounds:
                sys.exit(f"startup.py: {name} wrote {lines} records, expected {args.rounds}")

    base = statistics.median(times[names[0]])
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}"
        f" ({os.cpu_count()} cores); rounds: {args.rounds}, alternating"
    )
    print(f"{'variant':<44} {'median ms':>10} {'min ms':>8} {'ratio':>7}")
    for name in names:
        med = statistics.median(times[name])
        print(f"{name:<44} {med * 1e3:10.1f} {min(times[name]) * 1e3:8.1f} {med / base:7.2f}")


if __name__ == "__main__":
    main()
