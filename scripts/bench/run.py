#!/usr/bin/env python3
"""``zotsink run`` against the habits it replaces, measured in one invocation.

    .venv/bin/python scripts/bench/run.py            # 2,000 tasks, 5 alternating rounds
    .venv/bin/python scripts/bench/run.py --quick    # 200 tasks, 1 round

Three ways to run N tasks of a short Python processor (prints one ``key:value`` record),
two at a time, all into one table but the last:

  run      zotsink run TASKS OUT --kv --jobs 2 -- python3 proc.py
  xargs    xargs -P 2 sh -c 'python3 proc.py "$0" | zotsink --kv OUT'    (one zotsink per task)
  tiny     xargs -P 2 sh -c 'python3 proc.py "$0" > results/$0.out'     (a file per task)

and the per-task overhead of ``run`` itself: N tasks of ``true`` with ``--jobs 1``, against
a loop in one Python process that starts ``true`` the same way (pipes, a new session) and
does nothing else. The difference per task is what ``run`` adds: ledger rows (locked,
fsynced), reading the pipes, the log.

Runs alternate (run, xargs, tiny, then the next round in rotated order); each figure is the
median over the rounds, ratios are taken per round. Prints numbers, never asserts one.

With ``--root OTHER`` (another source tree, e.g. a checkout of an older commit) the ``run``
way and the overhead run a second time per round with OTHER's zotsink (``python -m zotsink``
with OTHER first on PYTHONPATH), alternating with this tree's, and the ratio this/OTHER is
printed: a change is measured turn about against the tree before it, in one invocation.

    .venv/bin/python scripts/bench/run.py --root /tmp/before
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
PROC = 'import sys\nname = sys.argv[1]\nprint(f"file:{name} length:{len(name)} first:{name[0]}")\n'


def zotsink() -> list[str]:
    exe = shutil.which("zotsink")
    return [exe] if exe else [sys.executable, "-m", "zotsink"]


def timed(
    cmd: list[str] | str, cwd: Path, stdin: Path | None = None, env: dict[str, str] | None = None
) -> float:
    t0 = time.perf_counter()
    with open(stdin or os.devnull, "rb") as f:
        subprocess.run(
            cmd,
            cwd=cwd,
            stdin=f,
            shell=isinstance(cmd, str),
            check=True,
            stdout=subprocess.DEVNULL,
            env=env,
        )
    return time.perf_counter() - t0


def spawn_loop(n: int) -> float:
    """Start ``true`` n times the way run does, with nothing else around it."""
    t0 = time.perf_counter()
    for _ in range(n):
        p = subprocess.Popen(
            ["true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        p.communicate()
    return time.perf_counter() - t0


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="200 tasks, one round")
    ap.add_argument("--tasks", type=int, help="tasks per run [2000]")
    ap.add_argument("--rounds", type=int, help="alternating rounds [5]")
    ap.add_argument("--dir", help="where to run (default: a temporary directory)")
    ap.add_argument("--overhead-only", action="store_true", help="only run's own per-task overhead")
    ap.add_argument("--root", help="another source tree whose run to alternate with this one's")
    args = ap.parse_args()
    n = args.tasks or (200 if args.quick else 2000)
    rounds = args.rounds or (1 if args.quick else 5)
    # against another tree both start the same way (python -m zotsink), each its own tree
    zs = [sys.executable, "-m", "zotsink"] if args.root else zotsink()
    base = Path(tempfile.mkdtemp(prefix="zotsink-bench-run-", dir=args.dir))
    (base / "proc.py").write_text(PROC)
    (base / "tasks.txt").write_text("".join(f"img_{i:05d}.jpg\n" for i in range(1, n + 1)))
    py = sys.executable
    z = " ".join(zs)
    ways = {
        "run": lambda d: timed(
            [*zs, "run", "../tasks.txt", "out.tsv", "--kv", "--jobs", "2", "--", py, "../proc.py"],
            d,
        ),
        "xargs": lambda d: timed(
            f"xargs -P 2 -n 1 sh -c '{py} ../proc.py \"$0\" | {z} --kv out.tsv'",
            d,
            base / "tasks.txt",
        ),
        "tiny": lambda d: timed(
            f"mkdir -p results && xargs -P 2 -n 1 sh -c '{py} ../proc.py \"$0\" > results/$0.out'",
            d,
            base / "tasks.txt",
        ),
    }
    other_env = None
    if args.root:
        other_env = {**os.environ, "PYTHONPATH": str(Path(args.root).resolve())}
        other_zs = [py, "-m", "zotsink"]
        ways["run@root"] = lambda d: timed(
            [
                *other_zs,
                "run",
                "../tasks.txt",
                "out.tsv",
                "--kv",
                "--jobs",
                "2",
                "--",
                py,
                "../proc.py",
            ],
            d,
            env=other_env,
        )
    print(f"# zotsink run benchmark: {n} tasks, {rounds} rounds, {time.strftime('%F %T %Z')}")
    print(
        f"# {os.uname().nodename}, {os.cpu_count()} CPUs, "
        f"uptime: {os.popen('uptime').read().strip()}"
    )
    print(f"# in {base}")
    if args.root:
        print(f"# run@root: {args.root}")
    if args.overhead_only:
        ways = {}
    times: dict[str, list[float]] = {k: [] for k in ways}
    order = list(ways)
    for r in range(rounds if order else 0):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            d = base / f"{name}-{r}"
            d.mkdir()
            times[name].append(ways[name](d))
            got = (
                count_lines(d / "out.tsv") - 1 if name != "tiny" else len(os.listdir(d / "results"))
            )
            if got != n:
                sys.exit(f"{name} round {r}: {got} records, not {n}")
            shutil.rmtree(d)
    for name, ts in times.items():
        print(
            f"{name:6s} median {statistics.median(ts):7.2f} s  "
            f"({min(ts):.2f}-{max(ts):.2f})  {n / statistics.median(ts):6.0f} tasks/s"
        )
    for other in [o for o in ("xargs", "tiny", "run@root") if o in ways]:
        ratios = [a / b for a, b in zip(times["run"], times[other])]
        print(
            f"run / {other}: median {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f}-{max(ratios):.2f})"
        )

    # Per-task overhead of run: tasks of `true`, one at a time.
    run_t: list[float] = []
    loop_t: list[float] = []
    root_t: list[float] = []
    for r in range(rounds):
        d = base / f"true-{r}"
        d.mkdir()
        pair = [
            lambda d=d: run_t.append(
                timed([*zs, "run", "../tasks.txt", "out.txt", "--", "true"], d)
            ),
            lambda: loop_t.append(spawn_loop(n)),
        ]
        if other_env is not None:
            pair.append(
                lambda d=d: root_t.append(
                    timed(
                        [py, "-m", "zotsink", "run", "../tasks.txt", "root.txt", "--", "true"],
                        d,
                        env=other_env,
                    )
                )
            )
        for f in pair if r % 2 == 0 else pair[::-1]:
            f()
        shutil.rmtree(d)
    per = [(a - b) / n * 1000 for a, b in zip(run_t, loop_t)]
    print(
        f"true x{n}: run median {statistics.median(run_t):.2f} s, bare spawn loop "
        f"{statistics.median(loop_t):.2f} s"
    )
    print(
        f"run's own overhead per task: median {statistics.median(per):.2f} ms "
        f"({min(per):.2f}-{max(per):.2f}), target <= 5 ms"
    )
    if root_t:
        ratios = [a / b for a, b in zip(run_t, root_t)]
        print(
            f"true x{n}: run@root median {statistics.median(root_t):.2f} s; this/root "
            f"median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        )
    print(f"# uptime after: {os.popen('uptime').read().strip()}")
    shutil.rmtree(base)


if __name__ == "__main__":
    main()
