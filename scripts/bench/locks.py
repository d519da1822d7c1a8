#!/usr/bin/env python3
"""Locked appends per task of ``zotsink run``: OUT, the log and the ledger together.

    .venv/bin/python scripts/bench/locks.py                      # this tree
    .venv/bin/python scripts/bench/locks.py --before ../old      # and another, turn about

Runs N quick tasks (each prints one record and one stderr line) with ``--jobs J`` under
``strace -f -e trace=flock`` and counts the exclusive ``flock`` calls of the whole run, per
task; with ``--before`` the two trees run in turn, several rounds. Each tree runs the tasks
as commands (``--shell``) and, when it has ``--call``, as a Python function. Needs
``strace``. It prints numbers and never asserts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THIS_TREE = Path(__file__).resolve().parent.parent.parent


FUNCTION = """
import sys
def note(line):
    print("note", line, file=sys.stderr)
    return "rec " + line
"""


def has_call(tree: Path) -> bool:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run(
        [sys.executable, "-m", "zotsink", "run", "--help"],
        env=env,
        capture_output=True,
        text=True,
        cwd="/",  # not this tree's directory: `-m` would find its zotsink first
    )
    return "--call" in r.stdout


def count(tree: Path, tasks: int, jobs: int, way: str) -> tuple[int, int]:
    """(exclusive flock calls, records in OUT) of one run."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        work = Path(d)
        if way == "command":
            lines = [f"echo rec {i}; echo note {i} >&2" for i in range(tasks)]
            how = ["--shell"]
        else:
            lines = [str(i) for i in range(tasks)]
            (work / "note.py").write_text(FUNCTION)
            how = ["--call", "note.py:note"]
        (work / "tasks.txt").write_text("".join(f"{line}\n" for line in lines))
        trace = work / "trace"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        cmd = ["strace", "-f", "-qq", "-e", "trace=flock", "-o", str(trace)]
        cmd += [sys.executable, "-m", "zotsink", "run", "tasks.txt", "out.txt", *how]
        cmd += ["--jobs", str(jobs), "-q"]
        subprocess.run(cmd, cwd=work, env=env, check=True)
        locks = sum("LOCK_EX" in line for line in trace.read_text().splitlines())
        records = len((work / "out.txt").read_bytes().splitlines())
    return locks, records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=400)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", type=Path, help="another zotsink tree, run in turn")
    args = ap.parse_args()
    if shutil.which("strace") is None:
        ap.error("needs strace (apt-get install strace)")
    trees = {"this": THIS_TREE}
    if args.before is not None:
        trees = {"before": args.before.resolve(), "after": THIS_TREE}
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')}  {' '.join([Path(sys.executable).name, *sys.argv])}"
    )
    print(f"# {args.tasks} tasks, --jobs {args.jobs}, load {os.getloadavg()[0]:.2f}")
    for rnd in range(args.rounds):
        names = list(trees) if rnd % 2 == 0 else list(reversed(trees))
        for name in names:
            for way in ("command", "function"):
                if way == "function" and not has_call(trees[name]):
                    continue
                locks, records = count(trees[name], args.tasks, args.jobs, way)
                print(
                    f"round {rnd + 1} {name:<6} {way:<8} {locks} exclusive locks, "
                    f"{locks / args.tasks:.2f} per task ({records} records)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
