#!/usr/bin/env python3
"""What ``zotsink run --call`` costs per task beyond a plain loop, in CPU of the process tree.

    .venv/bin/python scripts/bench/call.py                       # 5,000 and 50,000 tasks, 2 rounds
    .venv/bin/python scripts/bench/call.py --tasks 5000 --rounds 3
    .venv/bin/python scripts/bench/call.py --root /tmp/before    # turn about with another tree

The function is trivial (it returns its line), so what is measured is the path, not the work.
The ways, each a fresh child process whose CPU (user + system, its whole tree: the workers
are its waited-for children) ``os.wait4`` reports:

  loop   one Python process that imports the same module, loops over the task lines, calls
         ``f(line)`` and appends each result as a line to a file (what a careful user writes)
  run1   zotsink run TASKS OUT --call mod.py:f --jobs 1
  run2   zotsink run TASKS OUT --call mod.py:f --jobs 2

With ``--inline`` a fourth way, ``inline``: ``run --jobs 1`` with the function called in the
run's own process (``benchlib/inline.py``, a prototype for measuring another design: no
worker, no pipes), the floor of the run's own work per task.

With ``--root OTHER`` (another source tree, e.g. a checkout of an older commit) ``run1`` and
``run2`` run a second time per round with OTHER's zotsink (its tree first on ``PYTHONPATH``).

The ways alternate within a round, the order rotating from round to round; each figure is
the median over the rounds, differences and ratios are taken per round. The per-task
difference, (way - loop) / tasks, holds the fixed costs too (an interpreter that imports
zotsink, a worker's start); the slope between the two sizes is the cost of one more task.
Prints numbers, never asserts one; checks that every way wrote every record.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
MOD = "def f(line):\n    return line\n"
LOOP = """\
import sys
sys.path.insert(0, sys.argv[1])
from mod import f
with open(sys.argv[2], encoding="utf-8") as tasks, open(sys.argv[3], "a", encoding="utf-8") as out:
    for line in tasks:
        result = f(line.rstrip("\\n"))
        if result is not None:
            out.write(result + "\\n")
"""
#: Child processes get the environment a user has: byte-code caching on.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measured(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """CPU seconds (user + system of the child and its reaped children) and wall seconds."""
    t0 = time.perf_counter()
    with open(cwd / "stderr", "wb") as err:
        p = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err
        )
        _pid, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        said = (cwd / "stderr").read_text(errors="replace")[-2000:]
        sys.exit(f"bench: {argv} exited {p.returncode} in {cwd}:\n{said}")
    return ru.ru_utime + ru.ru_stime, wall


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, action="append", help="tasks per run [5000, 50000]")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds [2]")
    ap.add_argument("--jobs", type=int, action="append", help="--jobs of the run ways [1, 2]")
    ap.add_argument("--root", help="another source tree whose run to alternate with this one's")
    ap.add_argument("--inline", action="store_true", help="also the in-process prototype")
    ap.add_argument("--dir", help="where to run (default: a temporary directory)")
    args = ap.parse_args()
    sizes = args.tasks or [5000, 50000]
    jobs = args.jobs or [1, 2]
    py = sys.executable
    base = Path(tempfile.mkdtemp(prefix="zotsink-bench-call-", dir=args.dir))
    (base / "mod.py").write_text(MOD)
    (base / "loop.py").write_text(LOOP)
    here_env = {**CHILD_ENV, "PYTHONPATH": str(ROOT)}
    trees = {"": here_env}
    if args.root:
        trees["@root"] = {**CHILD_ENV, "PYTHONPATH": str(Path(args.root).resolve())}

    print(f"# {' '.join([Path(py).name, *sys.argv])}")
    print(f"# zotsink run --call against a plain loop, {time.strftime('%F %T %Z')}")
    print(
        f"# {os.uname().nodename}, {os.cpu_count()} CPUs, load {load()}, "
        f"Python {sys.version.split()[0]}"
    )
    print(f"# this tree: {ROOT}" + (f"; root: {args.root}" if args.root else ""))
    slopes: dict[str, list[float]] = {}
    per_size: dict[int, dict[str, list[float]]] = {}
    for n in sizes:
        tasks = base / f"tasks-{n}.txt"
        tasks.write_text("".join(f"img_{i:06d}.png\n" for i in range(1, n + 1)))
        ways: dict[str, list[str]] = {"loop": [py, str(base / "loop.py"), str(base), str(tasks)]}
        envs: dict[str, dict[str, str]] = {"loop": CHILD_ENV}
        for tag, env in trees.items():
            for j in jobs:
                name = f"run{j}{tag}"
                ways[name] = [
                    py,
                    "-m",
                    "zotsink",
                    "run",
                    str(tasks),
                    "out.tsv",
                    "--call",
                    f"{base / 'mod.py'}:f",
                    "--jobs",
                    str(j),
                ]
                envs[name] = env
        if args.inline:
            ways["inline"] = [py, str(ROOT / "scripts" / "bench" / "benchlib" / "inline.py")]
            ways["inline"] += ways["run1"][3:]
            envs["inline"] = here_env
        cpu: dict[str, list[float]] = {k: [] for k in ways}
        wall: dict[str, list[float]] = {k: [] for k in ways}
        order = list(ways)
        print(f"\n## {n} tasks, load {load()}")
        for r in range(args.rounds):
            for name in order[r % len(order) :] + order[: r % len(order)]:
                d = base / f"{name}-{n}-{r}"
                d.mkdir()
                argv = ways[name]
                if name == "loop":
                    argv = [*argv, str(d / "out.tsv")]
                c, w = measured(argv, d, envs[name])
                got = count_lines(d / "out.tsv")
                if got != n:
                    sys.exit(f"bench: {name} round {r + 1}: {got} records, not {n}")
                cpu[name].append(c)
                wall[name].append(w)
                print(f"round {r + 1} {name:10s} cpu {c:7.3f} s  wall {w:7.3f} s  load {load()}")
                shutil.rmtree(d)
        per_size[n] = {}
        for name in ways:
            line = (
                f"{name:10s} cpu median {statistics.median(cpu[name]):7.3f} s "
                f"({min(cpu[name]):.3f}-{max(cpu[name]):.3f})  "
                f"wall median {statistics.median(wall[name]):7.3f} s"
            )
            if name != "loop":
                diff = [(a - b) / n * 1000 for a, b in zip(cpu[name], cpu["loop"])]
                ratio = [a / b for a, b in zip(cpu[name], cpu["loop"])]
                per_size[n][name] = [a - b for a, b in zip(cpu[name], cpu["loop"])]
                line += (
                    f"  cpu/loop {statistics.median(ratio):5.2f}  beyond the loop "
                    f"{statistics.median(diff):.4f} ms/task ({min(diff):.4f}-{max(diff):.4f})"
                )
            print(line)
        for tag in trees:
            if not tag:
                continue
            for j in jobs:
                mine, theirs = cpu[f"run{j}"], cpu[f"run{j}{tag}"]
                ratio = [a / b for a, b in zip(mine, theirs)]
                print(
                    f"run{j} / run{j}{tag} cpu: median {statistics.median(ratio):.2f} "
                    f"({min(ratio):.2f}-{max(ratio):.2f})"
                )
    if len(sizes) >= 2:
        lo, hi = min(sizes), max(sizes)
        print(f"\n## the cost of one more task: (extra CPU at {hi} - at {lo}) / {hi - lo}")
        for name in per_size[lo]:
            slopes[name] = [
                (b - a) / (hi - lo) * 1000 for a, b in zip(per_size[lo][name], per_size[hi][name])
            ]
            s = slopes[name]
            fixed = statistics.median(per_size[lo][name]) - statistics.median(s) * lo / 1000
            print(
                f"{name:10s} {statistics.median(s):.4f} ms/task ({min(s):.4f}-{max(s):.4f}); "
                f"fixed {fixed:.3f} s"
            )
    print(f"\n# load after: {load()}")
    shutil.rmtree(base)


if __name__ == "__main__":
    main()
