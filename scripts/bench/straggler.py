#!/usr/bin/env python3
"""Stragglers: 4 pull runs against 4 fixed chunks over one list with a few slow tasks.

    .venv/bin/python scripts/bench/straggler.py               # 5 rounds, turn about
    .venv/bin/python scripts/bench/straggler.py --rounds 9 --root ../other-checkout

The list: 40 tasks, the first 8 take 1 s each, the other 32 take 0.05 s (each a command,
``sh -c 'sleep LINE; echo LINE'``). Fixed chunks: 4 runs started together, ``--index I
--chunk 10 --jobs 1``, so the first element holds every slow task. Pull: 4 runs started
together, ``--pull --jobs 1``, each taking the next tasks nobody has. Each round runs both,
in a fresh directory each, turn about (A B, B A, ...); the time of a side is from the
first start to the last exit. Every round checks that the committed view holds 40
records. Prints the times and the ratio pull / fixed of each round and their median, with
the command, the date and the load; asserts nothing (the target is a ratio of 0.5 or
less; with 8 slow tasks on 4 runs the ideal is about 0.3).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLOW, FAST = 8, 32
RUNS, CHUNK = 4, 10
TASK = ("sh", "-c", 'sleep "$1"; echo "$1"', "sh")


def task_list(d: Path) -> Path:
    path = d / "tasks.txt"
    path.write_text("1.0\n" * SLOW + "0.05\n" * FAST)
    return path


def side(code: Path, pull: bool) -> tuple[float, str]:
    """One side of a round: its runs started together in a fresh directory; the seconds
    from the first start to the last exit, and what is amiss (runs that exited non-zero,
    records missing from the committed view), "" when nothing is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
    env["PYTHONPATH"] = str(code)
    with tempfile.TemporaryDirectory(prefix="zotsink-straggler.") as tmp:
        d = Path(tmp)
        task_list(d)
        base = [sys.executable, "-m", "zotsink", "run", "tasks.txt", "out.txt", "--jobs", "1"]
        argvs = [
            [*base, "--pull", "--", *TASK]
            if pull
            else [*base, "--index", str(i), "--chunk", str(CHUNK), "--", *TASK]
            for i in range(1, RUNS + 1)
        ]
        began = time.perf_counter()
        procs = [
            subprocess.Popen(a, cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for a in argvs
        ]
        codes = []
        for p in procs:
            p.communicate()
            codes.append(p.returncode)
        took = time.perf_counter() - began
        cat = subprocess.run(
            [sys.executable, "-m", "zotsink", "cat", "out.txt"],
            cwd=d,
            env=env,
            capture_output=True,
            check=True,
        )
        got = len(cat.stdout.splitlines())
        amiss = [f"exit {c}" for c in codes if c != 0]
        if got != SLOW + FAST:
            amiss.append(f"{got}/{SLOW + FAST} records")
        return took, ", ".join(amiss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--root", type=Path, default=ROOT, help="the zotsink tree to run")
    args = parser.parse_args()
    code = args.root.resolve()
    print(f"command: {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}")
    print(f"date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    print(f"zotsink: {code}")
    print(f"load before: {os.getloadavg()[0]:.2f}")
    print(f"{SLOW} tasks of 1 s and {FAST} of 0.05 s, {RUNS} runs of --jobs 1")
    print(f"{'round':>5}  {'fixed s':>8}  {'pull s':>8}  {'pull/fixed':>10}  amiss")
    ratios = []
    fixed_all, pull_all = [], []
    for r in range(args.rounds):
        if r % 2 == 0:
            (fixed, fx), (pull, pl) = side(code, False), side(code, True)
        else:
            (pull, pl), (fixed, fx) = side(code, True), side(code, False)
        amiss = "; ".join(f"{name}: {what}" for name, what in (("fixed", fx), ("pull", pl)) if what)
        fixed_all.append(fixed)
        pull_all.append(pull)
        ratios.append(pull / fixed)
        print(f"{r + 1:>5}  {fixed:>8.2f}  {pull:>8.2f}  {pull / fixed:>10.2f}  {amiss}")
    print(
        f"median  {statistics.median(fixed_all):>8.2f}  {statistics.median(pull_all):>8.2f}  "
        f"{statistics.median(ratios):>10.2f}   (target <= 0.50)"
    )
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
