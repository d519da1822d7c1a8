#!/usr/bin/env python3
"""Benchmark reading a large ``zotsink run`` ledger: ``status`` and ``missing --ledger``.

Makes a task list of N lines and a ledger as array elements of ``zotsink run --chunk 100
--jobs 2`` write it (each element: its run row, a claim of its 100 tasks, and a begin and
an end row per 10 tasks; one task in 33 failed, one in 1,000 began and never ended, its
run and its process gone), then runs, alternately and R times each:

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

#: Tasks per array element, and per begin and end row of an element.
CHUNK, GROUP = 100, 10
#: A pid no process has (above Linux's PID_MAX_LIMIT, 4,194,304): the lost task's process.
GONE_PID = 4_194_304


def _make(work: str, n: int) -> tuple[str, str]:
    from zotsink._ledger.format import (
        INITIAL,
        EndItem,
        advance,
        begin_items_text,
        end_items_text,
        header_line,
        line_crc,
        make_row,
        tasks_text,
    )
    from zotsink._run.alive import host_identity

    tasks_path = os.path.join(work, "tasks.txt")
    ledger_path = os.path.join(work, "out.tsv.ledger")
    with open(tasks_path, "w") as f:
        f.writelines(f"img/{i:07d}.jpg\n" for i in range(1, n + 1))
    host, hostid = host_identity()
    state = INITIAL
    t0 = time.time() - 86400

    def row(kind: str, t: float, run: str, fields: list[str]) -> bytes:
        nonlocal state
        state = advance(state, kind, fields)
        return make_row(kind, t, run, fields, state)

    with open(ledger_path, "wb") as f:
        f.write(header_line())
        block: list[bytes] = []
        for first in range(1, n + 1, CHUNK):
            element = (first - 1) // CHUNK + 1
            nums = range(first, min(n, first + CHUNK - 1) + 1)
            run, t = f"{element:08x}", t0 + first / 1000
            # the run's process is gone: no process started at clock tick 1 since boot
            who = [host, hostid, str(100000 + element), "1", str(4000 + element), str(element)]
            block.append(row("run", t, run, [*who, ""]))
            lines = [f"img/{i:07d}.jpg" for i in nums]
            claim = [tasks_text((i, 1) for i in nums), f"{line_crc(lines):x}"]
            block.append(row("claim", t, run, claim))
            for g in range(0, len(nums), GROUP):
                group = nums[g : g + GROUP]
                begun = [
                    (i, 1, GONE_PID if i % 1000 == 0 else 200_000 + i % 100_000, "1") for i in group
                ]
                block.append(row("begin", t + g, run, [begin_items_text(begun)]))
                items = [
                    EndItem(
                        i,
                        1,
                        "failed" if i % 33 == 0 else "ok",
                        "1" if i % 33 == 0 else "0",
                        i % 97 * 100_000,
                        None,
                        i % 5,
                        i % 300,
                        True,
                        None,
                        None,
                    )
                    for i in group
                    if i % 1000 != 0
                ]
                block.append(row("end", t + g + 1, run, [":0", "", end_items_text(items), ""]))
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
