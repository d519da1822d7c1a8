#!/usr/bin/env python3
"""Benchmark ``zotsink missing`` against the awk one-liner it replaces.

Makes a task list of N lines (file paths, one in 50 with backslashes) and a tsv OUT holding
a record for all but one in 20 of them, in shuffled order, then runs, alternately and R
times each:

    zotsink missing tasks.txt out.tsv --key item --array
    awk -F'\\t' 'NR==FNR {if (FNR > 1) done[$1]; next} !($0 in done) {print FNR}' out.tsv tasks.txt

and prints wall-time medians, min-max, peak RSS and the ratio of zotsink to awk per pair,
with the load average before and after. Both must name the same tasks (checked).

    scripts/bench/missing.py                  # 200,000 tasks, 7 runs each
    scripts/bench/missing.py -n 1000000 -r 5
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ZOTSINK = [sys.executable, "-m", "zotsink"]
AWK = "NR==FNR {if (FNR > 1) done[$1]; next} !($0 in done) {print FNR}"


def _make(work: str, n: int, seed: int) -> tuple[str, str, set[int]]:
    rng = random.Random(seed)
    tasks = [
        f"data\\run{i % 7}\\img{i:07d}.jpg" if i % 50 == 0 else f"data/run{i % 7}/img{i:07d}.jpg"
        for i in range(1, n + 1)
    ]
    gone = {i for i in range(1, n + 1) if i % 20 == 7}
    rows = [f"{t}\t{len(t)}\n" for i, t in enumerate(tasks, 1) if i not in gone]
    rng.shuffle(rows)
    tasks_path, out_path = os.path.join(work, "tasks.txt"), os.path.join(work, "out.tsv")
    with open(tasks_path, "w") as f:
        f.writelines(t + "\n" for t in tasks)
    with open(out_path, "w") as f:  # as raw rows from `producer | zotsink out.tsv` land
        f.write("item\tv\n")
        f.writelines(rows)
    return tasks_path, out_path, gone


def _run(argv: list[str]) -> tuple[float, float, bytes]:
    """(wall s, peak RSS MB, stdout) of one run."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
        _pid, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{argv[:4]} failed")
        out.seek(0)
        return wall, ru.ru_maxrss / 1024, out.read()


def _expand(spec: bytes) -> set[int]:
    found: set[int] = set()
    for part in spec.decode().strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            found.update(range(int(lo), int(hi or lo) + 1))
    return found


def _fmt(xs: list[float], digits: int = 3) -> str:
    return f"{statistics.median(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=200_000, help="task lines (default 200000)")
    ap.add_argument("-r", "--runs", type=int, default=7, help="runs of each (default 7)")
    args = ap.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "zotsink"], check=False)
    with tempfile.TemporaryDirectory() as work:
        tasks, out, gone = _make(work, args.n, 1)
        commands = {
            "zotsink missing --array": [
                *ZOTSINK,
                "missing",
                tasks,
                out,
                "--key",
                "item",
                "--array",
            ],
            "awk one-liner": ["awk", "-F", "\t", AWK, out, tasks],
        }
        walls: dict[str, list[float]] = {k: [] for k in commands}
        rss: dict[str, list[float]] = {k: [] for k in commands}
        load_before = os.getloadavg()[0]
        names = list(commands)
        for i in range(args.runs):
            for name in names if i % 2 == 0 else reversed(names):  # A B, B A, ...
                wall, mb, stdout = _run(commands[name])
                got = _expand(stdout) if "zotsink" in name else {int(x) for x in stdout.split()}
                if got != gone:
                    raise SystemExit(f"{name} named {len(got)} tasks, not the {len(gone)} missing")
                walls[name].append(wall)
                rss[name].append(mb)
        load_after = os.getloadavg()[0]
    z, a = walls[names[0]], walls[names[1]]
    print(
        f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{args.n} tasks, {len(gone)} missing, {args.runs} runs each, "
        f"load {load_before:.2f} -> {load_after:.2f}"
    )
    print(f"{'command':<26} {'wall s median (min-max)':<28} {'peak RSS MB'}")
    for name in names:
        print(f"{name:<26} {_fmt(walls[name]):<28} {statistics.median(rss[name]):.0f}")
    ratios = [zz / aa for zz, aa in zip(z, a)]
    print(f"ratio zotsink/awk per pair: {_fmt(ratios, 2)}")


if __name__ == "__main__":
    main()
