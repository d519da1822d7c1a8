#!/usr/bin/env python3
"""Benchmark reading a large ``zotsink run`` ledger: ``status`` and ``missing --ledger``.

Makes a task list of N lines and a ledger of 2 N rows as ``zotsink run`` writes them (a
start and an end row per task; one task in 33 failed, one in 1,000 has only its start row,
from a run process that is gone), then runs, alternately and R times each:

    zotsink status tasks.txt --ledger out.tsv.ledger
    zotsink status tasks.txt --ledger out.tsv.ledger --by element
    zotsink status tasks.txt --ledger out.tsv.ledger --html page.html
    zotsink missing tasks.txt --ledger out.tsv.ledger
    zotsink run tasks.txt out.tsv --index 2 --chunk 100 -- true

(the last one finds its 100 tasks in the ledger: the first run of all runs the three that
failed, every later one finds all ok and runs nothing)

and prints the wall time and peak RSS (from ``wait4``) of each, with the load average before
and after (``--by`` and ``--html`` read every attempt in one pass: their memory is to stay
within 1.5 times plain ``status``'s). With ``--root`` the same commands run a second tree
too (its zotsink on PYTHONPATH), alternating with this one, and both must print the same.

    scripts/bench/ledger.py                                  # 1,000,000 tasks, 3 runs each
    scripts/bench/ledger.py -n 100000 -r 5 --root /path/to/other/tree
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COLUMNS = [
    "event",
    "time",
    "tasknum",
    "key",
    "attempt",
    "job",
    "array_task",
    "host",
    "pid",
    "status",
    "exit",
    "signal",
    "seconds",
    "records",
    "bytes",
    "note",
]


def _make(work: str, n: int) -> tuple[str, str]:
    tasks_path = os.path.join(work, "tasks.txt")
    ledger_path = os.path.join(work, "out.tsv.ledger")
    with open(tasks_path, "w") as f:
        f.writelines(f"img/{i:07d}.jpg\n" for i in range(1, n + 1))
    host = os.uname().nodename
    with open(ledger_path, "w") as f:
        f.write("\t".join(COLUMNS) + "\n")
        block: list[str] = []
        for i in range(1, n + 1):
            job, pid = 4000 + i // 100, 100000 + i // 100
            # a start with no end reads as lost on this host once its pid is gone: one
            # above Linux's PID_MAX_LIMIT (4,194,304) is never alive
            pid_text = str(4_194_304 + i) if i % 1000 == 0 else str(pid)
            sec, us = divmod(i, 1_000_000)
            t0 = f"2026-11-24T{10 + sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}.{us:06d}Z"
            t1 = f"2026-11-24T{11 + sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}.{us:06d}Z"
            common = f"{i}\timg/{i:07d}.jpg\t1\t{job}\t{i // 100}\t{host}\t{pid_text}"
            block.append(f"start\t{t0}\t{common}\t\t\t\t\t\t\t\n")
            if i % 1000 != 0:
                status, code = ("failed", 1) if i % 33 == 0 else ("ok", 0)
                block.append(
                    f"end\t{t1}\t{common}\t{status}\t{code}\t\t{i % 97 / 10:.1f}\t{i % 5}\t"
                    f"{i % 300}\t\n"
                )
            if len(block) > 20000:
                f.writelines(block)
                block = []
        f.writelines(block)
    return tasks_path, ledger_path


def _run(argv: list[str], root: str) -> tuple[float, float, bytes, int]:
    """(wall s, peak RSS MB, stdout, exit code) of one run of zotsink from ``root``."""
    env = dict(os.environ, PYTHONPATH=root)
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [sys.executable, "-m", "zotsink", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd="/",
        )
        _pid, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        return wall, ru.ru_maxrss / 1024, out.read(), os.waitstatus_to_exitcode(status)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--tasks", type=int, default=1_000_000)
    ap.add_argument("-r", "--runs", type=int, default=3)
    ap.add_argument("--root", help="another source tree to measure against (before)")
    ap.add_argument("--only", help="the commands to run, by the start of their names (status)")
    args = ap.parse_args()
    roots = [("this", HERE)] + ([("root", os.path.abspath(args.root))] if args.root else [])
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as work:
        tasks, ledger = _make(work, args.tasks)
        size = os.path.getsize(ledger) / 1e6
        print(f"{args.tasks:,} tasks, ledger {size:.0f} MB, {args.runs} runs each")
        now = datetime.datetime.now(datetime.timezone.utc)
        print(f"load before: {os.getloadavg()[0]:.2f}  ({now:%Y-%m-%d %H:%M} UTC)")
        commands = {
            "status": ["status", tasks, "--ledger", ledger],
            "status --by element": ["status", tasks, "--ledger", ledger, "--by", "element"],
            "status --html": [
                "status",
                tasks,
                "--ledger",
                ledger,
                "--html",
                os.path.join(work, "page.html"),
            ],
            "missing --ledger": ["missing", tasks, "--ledger", ledger],
            "run --chunk 100": [
                "run",
                tasks,
                os.path.join(work, "out.tsv"),
                "--index",
                "2",
                "--chunk",
                "100",
                "--",
                "true",
            ],
        }
        for name, argv in commands.items():
            if args.only and not name.startswith(args.only):
                continue
            results: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in roots}
            outputs: dict[str, bytes] = {}
            for r in range(args.runs):
                order = roots if r % 2 == 0 else roots[::-1]
                for label, root in order:
                    wall, rss, out, code = _run(argv, root)
                    if code not in (0, 1):
                        raise SystemExit(f"{label}: {name} exited {code}: {out[-500:]!r}")
                    results[label].append((wall, rss))
                    outputs[label] = out
            if len(set(outputs.values())) > 1:
                print(f"  {name}: outputs differ between trees")
            for label, root in roots:
                walls = [w for w, _ in results[label]]
                rsss = [m for _, m in results[label]]
                print(
                    f"  {name:18} {label:5} {statistics.median(walls):6.2f} s "
                    f"({min(walls):.2f}-{max(walls):.2f})  peak RSS {max(rsss):6.0f} MB   [{root}]"
                )
        print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
