#!/usr/bin/env python3
"""``zotsink run --pull`` at scale: many pull runs sharing one task list, OUT and ledger.

    .venv/bin/python scripts/bench/pull.py                  # 64 runs, 100,000 tasks, local
    .venv/bin/python scripts/bench/pull.py --quick          # 8 runs, 5,000 tasks
    .venv/bin/python scripts/bench/pull.py --only sizes     # the claim at 1,000 / 1,000,000
    .venv/bin/python scripts/bench/pull.py --gluster --tasks 20000   # root: the test cluster

Three parts, each printed as a table with the command, the date and the load:

  runs    R pull runs started together (``zotsink run TASKS OUT --pull --call triv.py:task``,
          a function that returns its line; and ``-- echo``, a command per task, on fewer
          tasks): the wall time from the first start to the last exit, tasks/s, the ledger
          appends that claimed tasks (claims) per second, all runs together, the lock hold
          of a claim (p50, p99), and the peak RSS of each run (``wait4``: the run or the
          worker it reaped, whichever was larger), and the tasks given back (``release``
          rows: claimed, never begun). Every task is counted back in OUT, once.
  claims  C claimer processes calling the ledger's claim (``Ledger.claim``, the function a
          pull run's pool calls, by the cursor) one task at a time, as fast as the lock lets
          them, each claim also writing the end row of the task claimed before: the locked
          claims per second the ledger sustains, and the hold of each.
  growth  what many runs cost, fitted to a model: pull runs of ``--call`` over a
          grid of run counts (``--growth-runs``, 4 to 64) and list lengths
          (``--growth-tasks``), each cell ``--rounds`` times in an order that turns about;
          the CPU of all runs together fitted by least squares as
          ``a x runs + b x tasks + c x tasks x (runs - 1)``: ``a`` is what a run costs
          whatever its share (its start, its worker), ``b`` what a task costs, and ``c``
          what a task costs more for each run beside the first (the coordination that
          grows with runs). Also printed: the plain slope of CPU per task from the fewest
          to the most runs at the longest list, which counts each run's start in it.
  sizes   the claim's lock hold of a few pull runs over the last tasks of a list of 1,000
          tasks and of 1,000,000 tasks, the ledger already holding the rows of every other
          task (done by earlier runs: a claim and an end row per 100 tasks): the hold must
          not grow with the ledger.

How the lock hold is measured: each run (or claimer) is started through this script, which
wraps ``Writer._write_locked`` (the part of an append that runs under the lock: the fresh
size, the ledger's claim hook, the write, the fsync) with two ``perf_counter`` calls for
the ledger's writer, and writes the holds to a file of the run's own when it exits. zotsink
itself is run unchanged (``zotsink.cli.main``); the wrap costs two clock reads per append.

With ``--root OTHER`` the runs and growth parts also run OTHER's zotsink (a checkout
before a change), turn about with this tree's, and print the ratios (growth: both fits).
With ``--gluster`` (root) the runs are spread over the three nodes of the test cluster
(scripts/cluster/slurm.sh's namespaces, each node its own GlusterFS client), on the
GlusterFS volume; the script brings up what is down and takes it down again. Prints
numbers, never asserts one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster"
NODE_RUN = Path(os.environ.get("ZOTSINK_SLURM_STATE", "/var/tmp/zotsink-cluster/slurm")) / "run"
GLUSTER_MOUNT = Path("/mnt/zotsink-g1")
TRIVIAL = "def task(line):\n    return line\n"
#: One append of a ledger under its lock: when it began (perf_counter), seconds held,
#: whether it claimed, tasks claimed, bytes of news it read, CPU seconds of the holder.
Hold = tuple[float, float, int, int, int, float]
#: Tasks per claim row (and per end row) of a ledger filled as earlier runs left it.
FILL_BLOCK = 100
#: A pid no process has (above the largest pid_max): the filled ledger's run is gone.
GONE_PID = 4_194_304

# -- the child side: a run or a claimer, its ledger's lock holds recorded ------------------


def _record_holds(holds: list[Hold]) -> None:
    """Wrap the writer's locked part for ledger writers: (start, seconds held, whether it
    claimed, tasks claimed, bytes of news read) per append. A claim reads the rows other
    runs appended only when one of them claimed or freed tasks by name, or a control row
    came: the news are the bytes it folded under the lock."""
    from zotsink._core import writer
    from zotsink._run.ledger import Ledger

    inner = writer.Writer._write_locked
    clock, cpu = time.perf_counter, time.thread_time

    def timed(self: Any, fd: int, st: os.stat_result, data: Any) -> int:
        ledger = getattr(self._prepare, "__self__", None)
        if not isinstance(ledger, Ledger):
            return inner(self, fd, st, data)
        claiming = ledger._want is not None
        seen = ledger._seen
        t0, c0 = clock(), cpu()
        try:
            return inner(self, fd, st, data)
        finally:
            held, used = clock() - t0, cpu() - c0
            result = ledger._result if claiming else None
            got = len(result.tasks) if result is not None else 0
            holds.append((t0, held, int(claiming), got, ledger._seen - seen, used))

    writer.Writer._write_locked = timed  # type: ignore[method-assign]


def _dump(path: str, holds: list[Hold]) -> None:
    with open(path, "w") as f:
        f.writelines(f"{a:.6f} {b:.7f} {c} {d} {e} {g:.7f}\n" for a, b, c, d, e, g in holds)


def child_run(holds_path: str, argv: list[str]) -> None:
    """``zotsink ARGV`` in this process, its ledger holds written to ``holds_path``."""
    holds: list[Hold] = []
    _record_holds(holds)
    from zotsink.cli import main

    try:
        main(argv)
    finally:
        _dump(holds_path, holds)


def child_claim(holds_path: str, ledger_path: str, tasks_path: str, claims: int) -> None:
    """Claim the task list's next task by the cursor, one at a time, ``claims`` times (or
    until none is left), each claim writing the end row of the task claimed before: a
    claimer with no work between."""
    holds: list[Hold] = []
    _record_holds(holds)
    from zotsink._run.attempt import End
    from zotsink._run.events import Usage
    from zotsink._run.ledger import Ledger

    ledger = Ledger(ledger_path, tasks=tasks_path, env={})
    ledger.open()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()  # every claimer starts at once
    for _ in range(claims):
        got = ledger.claim(1, [], cursor=True, closed_lines=None)
        if not got.tasks:
            break
        task, attempt = got.tasks[0]
        end = End((task.num, attempt), "ok", "0", 0.001, None, 1, 0, True, Usage(), "")
        ledger.put(ends=[(None, [end])])
    ledger.flush()
    ledger.close()
    _dump(holds_path, holds)


# -- the parent side -------------------------------------------------------------------


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def write_tasks(path: Path, n: int) -> None:
    with open(path, "w") as f:
        for start in range(1, n + 1, 100_000):
            f.writelines(f"t{i}\n" for i in range(start, min(n, start + 99_999) + 1))


def read_holds(paths: Sequence[Path]) -> list[Hold]:
    holds = []
    for p in paths:
        with contextlib.suppress(FileNotFoundError), open(p) as f:
            for ln in f:
                a, b, c, d, e, g = ln.split()
                holds.append((float(a), float(b), int(c), int(d), int(e), float(g)))
    return holds


def counted(out: Path, n: int) -> tuple[int, int]:
    """(records, distinct tasks) in OUT: each of the n tasks once means (n, n)."""
    seen: set[bytes] = set()
    records = 0
    with open(out, "rb") as f:
        for ln in f:
            records += 1
            seen.add(ln)
    return records, len(seen)


def child_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's runs cache byte code
    env["PYTHONPATH"] = str(root)
    return env


def pull_runs(
    work: Path,
    runs: int,
    tasks: int,
    way: str,
    root: Path,
    prefixes: Sequence[list[str]] = ([],),
    jobs: int = 1,
) -> dict[str, Any]:
    """R pull runs started together on a fresh OUT (in ``work``); their figures."""
    d = Path(tempfile.mkdtemp(prefix=f"{way}-", dir=work))
    (d / "triv.py").write_text(TRIVIAL)
    shutil.copy(work / f"tasks-{tasks}.txt", d / "tasks.txt")
    argv = ["run", "tasks.txt", "out.txt", "--pull", "--jobs", str(jobs)]
    argv += ["--call", "triv.py:task"] if way == "call" else ["--", "echo"]
    env = child_env(root)
    procs = []
    load_before = load()
    t0 = time.perf_counter()
    for i in range(runs):
        prefix = prefixes[i % len(prefixes)]
        if prefix:  # entering a node's mount namespace moves to its root: the same path, its client
            prefix = [*prefix[:-1], f"--wdns={d}", prefix[-1]]
        cmd = [*prefix, sys.executable, str(Path(__file__).resolve())]
        cmd += ["--child-run", str(d / f"holds.{i}"), "--", *argv]
        log = open(d / f"log.{i}", "wb")  # noqa: SIM115
        procs.append(subprocess.Popen(cmd, cwd=d, env=env, stdout=log, stderr=log))
        log.close()
    rss, ends, cpu = [], [], 0.0
    left = {p.pid: i for i, p in enumerate(procs)}
    while left:
        pid, status, ru = os.wait4(-1, 0)
        if pid not in left:
            continue
        i = left.pop(pid)
        ends.append(time.perf_counter())
        rss.append(ru.ru_maxrss / 1024)
        cpu += ru.ru_utime + ru.ru_stime
        if os.waitstatus_to_exitcode(status):
            tail = (d / f"log.{i}").read_text()[-2000:]
            sys.exit(f"pull: a {way} run exited {status}; its log's end:\n{tail}")
    wall = max(ends) - t0
    load_after = load()
    records, distinct = counted(d / "out.txt", tasks)
    # what the ledger commits (each task once), beside OUT's raw lines (an attempt's
    # records stay in OUT uncommitted when its end row says otherwise)
    cat = subprocess.run(
        [sys.executable, "-m", "zotsink", "cat", "out.txt"],
        cwd=d,
        env=env,
        capture_output=True,
        check=True,
    ).stdout.splitlines()
    holds = read_holds([d / f"holds.{i}" for i in range(runs)])
    claims = [h for h in holds if h[2] and h[3]]
    ledger_mb = (d / "out.txt.ledger").stat().st_size / 1e6
    given_back = released(d / "out.txt.ledger")
    shutil.rmtree(d)
    return {
        "way": way,
        "runs": runs,
        "tasks": tasks,
        "wall": wall,
        "tasks_s": tasks / wall,
        "cpu_per_task_ms": 1e3 * cpu / tasks,
        "claims": len(claims),
        "claims_s": len(claims) / wall,
        "per_claim": statistics.mean(h[3] for h in claims) if claims else 0.0,
        "hold_p50_ms": 1e3 * pct([h[1] for h in claims], 0.5),
        "hold_p99_ms": 1e3 * pct([h[1] for h in claims], 0.99),
        "cpu_p50_ms": 1e3 * pct([h[5] for h in claims], 0.5),
        "cpu_p99_ms": 1e3 * pct([h[5] for h in claims], 0.99),
        "news_kb_p50": pct([h[4] for h in claims], 0.5) / 1e3,
        "locked_share": sum(h[1] for h in holds) / wall,
        "appends": len(holds),
        "rss_max": max(rss),
        "rss_p50": statistics.median(rss),
        "records": records,
        "distinct": distinct,
        "committed": len(cat),
        "committed_distinct": len(set(cat)),
        "ledger_mb": ledger_mb,
        "given_back": given_back,
        "load_before": load_before,
        "load_after": load_after,
    }


def fit_growth(cells: Sequence[tuple[int, int, float]]) -> tuple[list[float], float]:
    """Least squares of ``cpu = a*runs + b*tasks + c*tasks*(runs - 1)`` over (runs, tasks,
    cpu seconds): ([a, b, c], R²). The 3 x 3 normal equations, solved by elimination."""
    xs = [(float(r), float(t), float(t) * (r - 1)) for r, t, _ in cells]
    ys = [c for _, _, c in cells]
    m = [[sum(x[i] * x[j] for x in xs) for j in range(3)] for i in range(3)]
    v = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(3)]
    for i in range(3):
        for k in range(i + 1, 3):
            f = m[k][i] / m[i][i]
            m[k] = [a - f * b for a, b in zip(m[k], m[i])]
            v[k] -= f * v[i]
    coef = [0.0, 0.0, 0.0]
    for i in (2, 1, 0):
        coef[i] = (v[i] - sum(m[i][j] * coef[j] for j in range(i + 1, 3))) / m[i][i]
    mean = statistics.mean(ys)
    pred = [sum(c * xi for c, xi in zip(coef, x)) for x in xs]
    ss_res = sum((y - p) ** 2 for y, p in zip(ys, pred))
    ss_tot = sum((y - mean) ** 2 for y in ys) or 1.0
    return coef, 1 - ss_res / ss_tot


def growth(
    work: Path,
    runs: Sequence[int],
    tasks: Sequence[int],
    rounds: int,
    roots: Sequence[tuple[str, Path]],
) -> None:
    """The grid of (runs, tasks) pull runs of ``--call``, each cell ``rounds`` times (and
    for each tree, turn about); the fit of their CPU and the plain slope, per tree."""
    for n in tasks:
        if not (work / f"tasks-{n}.txt").exists():
            write_tasks(work / f"tasks-{n}.txt", n)
    grid = [(r, n, lab, root) for n in tasks for r in runs for lab, root in roots]
    cells: dict[str, list[tuple[int, int, float]]] = {lab: [] for lab, _root in roots}
    print_head()
    for k in range(rounds):
        for r, n, lab, root in grid if k % 2 == 0 else list(reversed(grid)):
            res = pull_runs(work, r, n, "call", root)
            print_runs([res], lab)
            cells[lab].append((r, n, res["cpu_per_task_ms"] * n / 1e3))
    for lab, got in cells.items():
        name = f"tree {lab}" if lab else "this tree"
        per_round = len(got) // rounds
        if rounds > 1:  # how much the fit moves from round to round
            each = [
                fit_growth(got[k * per_round : (k + 1) * per_round])[0][2] for k in range(rounds)
            ]
            print(f"{name}: c of each round alone: " + ", ".join(f"{1e6 * x:.2f}" for x in each))
        (a, b, c), r2 = fit_growth(got)
        print(
            f"{name}: fit over {len(got)} runs of the grid: CPU s = {a:.3f} x runs + "
            f"{1e6 * b:.2f} µs x tasks + {1e6 * c:.2f} µs x tasks x (runs - 1); R² {r2:.3f}"
        )
        n = max(tasks)
        lo, hi = min(runs), max(runs)
        per = {
            r: statistics.median(1e3 * cpu / n for rr, nn, cpu in got if rr == r and nn == n)
            for r in (lo, hi)
        }
        print(
            f"{name}: plain slope at {n:,} tasks, each run's start counted in: "
            f"{per[lo] * 1e3:.1f} µs a task at {lo} runs, {per[hi] * 1e3:.1f} at {hi}: "
            f"{(per[hi] - per[lo]) * 1e3 / (hi - lo):.2f} µs a task per added run"
        )


def released(ledger: Path) -> int:
    """Tasks the ledger's ``release`` rows gave back (claimed, never begun), counted from
    their task sets (``N``, ``A-B``, each with an ``.ATTEMPT`` when not the first)."""
    n = 0
    with open(ledger, "rb") as f:
        for row in f:
            if not row.startswith(b"release\t"):
                continue
            for part in row.split(b"\t")[3].split(b","):
                first, _, last = part.split(b".")[0].partition(b"-")
                n += int(last or first) - int(first) + 1
    return n


def print_head() -> None:
    head = (
        f"{'way':7s} {'runs':>4s} {'tasks':>8s} {'wall s':>7s} {'tasks/s':>8s} "
        f"{'CPU ms/task':>11s} {'claims':>7s} "
        f"{'claims/s':>8s} {'tasks/claim':>11s} {'hold p50':>9s} {'p99 ms':>7s} "
        f"{'CPU p50':>8s} {'p99 ms':>7s} "
        f"{'news KB':>7s} {'locked':>6s} {'RSS p50':>8s} {'max MB':>6s} {'gave back':>9s}  "
        "load before/after"
    )
    print(head)


def print_runs(rows: list[dict[str, Any]], label: str = "") -> None:
    for r in rows:
        ok = (
            ""
            if r["records"] == r["distinct"] == r["tasks"]
            else "  OUT LINES " + str(r["records"])
        )
        if not r["committed"] == r["committed_distinct"] == r["tasks"]:
            ok += f"  COMMITTED {r['committed']} ({r['committed_distinct']} distinct)"
        print(
            f"{r['way'] + label:7s} {r['runs']:4d} {r['tasks']:8,d} {r['wall']:7.1f} "
            f"{r['tasks_s']:8,.0f} {r['cpu_per_task_ms']:11.2f} {r['claims']:7,d} "
            f"{r['claims_s']:8.1f} "
            f"{r['per_claim']:11.1f} {r['hold_p50_ms']:9.2f} {r['hold_p99_ms']:7.1f} "
            f"{r['cpu_p50_ms']:8.2f} {r['cpu_p99_ms']:7.2f} "
            f"{r['news_kb_p50']:7.1f} {100 * r['locked_share']:5.0f}% {r['rss_p50']:8.0f} "
            f"{r['rss_max']:6.0f} {r['given_back']:9,d}  {r['load_before']} / "
            f"{r['load_after']}{ok}",
            flush=True,
        )


def claimers(work: Path, n: int, claims: int, prefill: int, root: Path) -> dict[str, Any]:
    """n claimer processes (see child_claim) on a ledger already holding ``prefill`` tasks
    done; their figures."""
    d = Path(tempfile.mkdtemp(prefix="claims-", dir=work))
    ledger, tasks = d / "out.txt.ledger", d / "tasks.txt"
    total = n * claims
    write_tasks(tasks, prefill + total)
    fill_ledger(ledger, tasks, prefill)
    env = child_env(root)
    procs = []
    for i in range(n):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-claim", str(d / f"h.{i}")]
        cmd += [str(ledger), str(tasks), str(claims)]
        procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    for p in procs:
        if p.stdout.readline().strip() != b"ready":  # type: ignore[union-attr]
            sys.exit(f"pull: a claimer failed (exit {p.wait()})")
    load_before = load()
    t0 = time.perf_counter()
    for p in procs:
        p.stdin.write(b"go\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]
    for p in procs:
        p.stdin.close()  # type: ignore[union-attr]
        if p.wait():
            sys.exit(f"pull: a claimer exited {p.returncode}")
    wall = time.perf_counter() - t0
    holds = read_holds([d / f"h.{i}" for i in range(n)])
    got = [h for h in holds if h[2] and h[3]]
    starts = claimed(ledger, root)
    shutil.rmtree(d)
    return {
        "claimers": n,
        "prefill": prefill,
        "claims": len(got),
        "claims_s": len(got) / wall,
        "hold_p50_ms": 1e3 * pct([h[1] for h in got], 0.5),
        "hold_p99_ms": 1e3 * pct([h[1] for h in got], 0.99),
        "cpu_p50_ms": 1e3 * pct([h[5] for h in got], 0.5),
        "cpu_p99_ms": 1e3 * pct([h[5] for h in got], 0.99),
        "locked_share": sum(h[1] for h in holds) / wall,
        "starts": starts - prefill,
        "wall": wall,
        "load_before": load_before,
        "load_after": load(),
    }


def claimed(ledger: Path, root: Path) -> int:
    """How many task claims the ledger holds, as ``root``'s zotsink reads them."""
    count = (
        "import sys; from zotsink import read_ledger; "
        "print(sum(e.event == 'claim' for e in read_ledger(sys.argv[1])))"
    )
    got = subprocess.run(
        [sys.executable, "-c", count, str(ledger)],
        env=child_env(root),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(got.stdout)


def fill_ledger(path: Path, tasks: Path, n: int) -> int:
    """A ledger of the first n tasks of ``tasks`` done, as pull runs before wrote it: a run
    row, then a claim by the cursor and an end row per :data:`FILL_BLOCK` tasks, each row
    stamped with the state after it (the cursor past the tasks claimed). Its rows."""
    import zlib

    from zotsink._ledger.format import (
        INITIAL,
        EndItem,
        end_items_text,
        header_line,
        line_crc,
        make_row,
        tasks_text,
    )
    from zotsink._run.alive import host_identity

    host, hostid = host_identity()
    run = "0b5e55ed"
    state = INITIAL
    t = time.time() - 3600
    rows = 1
    with open(tasks, "rb") as f, open(path, "wb") as out:
        out.write(header_line())
        out.write(make_row("run", t, run, [host, hostid, str(GONE_PID), "1", "", "", ""], state))
        for first in range(1, n + 1, FILL_BLOCK):
            last = min(n, first + FILL_BLOCK - 1)
            raw = b"".join(f.readline() for _ in range(first, last + 1))
            lines = raw.decode().splitlines()
            state = state._replace(
                next=last + 1, at=state.at + len(raw), span=len(raw), span_crc=zlib.crc32(raw)
            )
            claim = [tasks_text((num, 1) for num in range(first, last + 1))]
            out.write(make_row("claim", t, run, [*claim, f"{line_crc(lines):x}"], state))
            items = [
                EndItem(num, 1, "ok", "0", 1000, 1, 1, 0, True, None, None)
                for num in range(first, last + 1)
            ]
            out.write(make_row("end", t + 1, run, [":0", "", end_items_text(items), ""], state))
            rows += 2
    return rows


def sizes(work: Path, runs: int, fresh: int, totals: Sequence[int], root: Path) -> list[dict]:
    """Pull runs over the last ``fresh`` tasks of lists of each total, the ledger holding
    the rows of every task before them."""
    rows = []
    fresh = min([fresh, *totals])  # the same number of tasks left to run in each
    for total in totals:
        d = Path(tempfile.mkdtemp(prefix=f"size-{total}-", dir=work))
        write_tasks(d / "tasks.txt", total)
        filled = fill_ledger(d / "out.txt.ledger", d / "tasks.txt", total - fresh)
        (d / "triv.py").write_text(TRIVIAL)
        env = child_env(root)
        argv = ["run", "tasks.txt", "out.txt", "--pull", "--call", "triv.py:task"]
        procs = []
        t0 = time.perf_counter()
        load_before = load()
        for i in range(runs):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child-run"]
            cmd += [str(d / f"holds.{i}"), "--", *argv]
            log = open(d / f"log.{i}", "wb")  # noqa: SIM115
            procs.append(subprocess.Popen(cmd, cwd=d, env=env, stdout=log, stderr=log))
            log.close()
        rss = []
        for p in procs:
            _pid, status, ru = os.wait4(p.pid, 0)
            rss.append(ru.ru_maxrss / 1024)
            if os.waitstatus_to_exitcode(status):
                sys.exit(f"pull: a run exited {status}: {(d / 'log.0').read_text()[-2000:]}")
        wall = time.perf_counter() - t0
        holds = read_holds([d / f"holds.{i}" for i in range(runs)])
        got = [h for h in holds if h[2] and h[3]]
        records, distinct = counted(d / "out.txt", fresh)
        rows.append(
            {
                "total": total,
                "ledger_rows": filled,
                "ledger_mb": (d / "out.txt.ledger").stat().st_size / 1e6,
                "claims": len(got),
                "hold_p50_ms": 1e3 * pct([h[1] for h in got], 0.5),
                "hold_p99_ms": 1e3 * pct([h[1] for h in got], 0.99),
                "cpu_p50_ms": 1e3 * pct([h[5] for h in got], 0.5),
                "cpu_p99_ms": 1e3 * pct([h[5] for h in got], 0.99),
                "news_kb_p50": pct([h[4] for h in got], 0.5) / 1e3,
                "rss_max": max(rss),
                "wall": wall,
                "ok": records == distinct == fresh,
                "load_before": load_before,
                "load_after": load(),
            }
        )
        shutil.rmtree(d)
    return rows


# -- the test cluster --------------------------------------------------------------------


def sh(*argv: str) -> str:
    res = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if res.returncode:
        sys.exit(f"pull: {' '.join(argv[:3])} exited {res.returncode}: {res.stderr[-2000:]}")
    return res.stdout


def is_up(service: str) -> bool:
    res = subprocess.run(
        ["bash", str(CLUSTER / f"{service}.sh"), "status"], capture_output=True, check=False
    )
    return res.returncode == 0


def node_prefixes() -> list[list[str]]:
    """nsenter into each node of the test cluster: its network, hostname, mounts, pids."""
    found = []
    for ready in sorted((NODE_RUN / "nodes").glob("node*.ready")):
        init = (ready.parent / f"{ready.stem}.init").read_text().strip()
        found.append(["nsenter", f"--target={init}", "--net", "--uts", "--mount", "--pid", "--"])
    if not found:
        sys.exit("pull: no nodes of the test cluster are up")
    return found


@contextlib.contextmanager
def cluster() -> Any:
    """GlusterFS and the nodes up (what was down is taken down again at the end)."""
    if os.geteuid() != 0:
        sys.exit("pull: --gluster needs root (it brings up GlusterFS and the nodes)")
    brought = [s for s in ("gluster", "slurm") if not is_up(s)]
    try:
        sh("bash", str(CLUSTER / "gluster.sh"), "up")
        sh("bash", str(CLUSTER / "slurm.sh"), "up")
        yield
    finally:
        for service in reversed(brought):
            subprocess.run(["bash", str(CLUSTER / f"{service}.sh"), "down"], check=False)


# -- main -------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-run":
        child_run(sys.argv[2], sys.argv[4:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--child-claim":
        a = sys.argv[2:]
        child_claim(a[0], a[1], a[2], int(a[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=64, help="pull runs started together [64]")
    ap.add_argument("--tasks", type=int, default=100_000, help="tasks of --call runs [100000]")
    ap.add_argument(
        "--command-tasks", type=int, default=10_000, help="tasks of `-- echo` runs [10000]"
    )
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the runs part [1]")
    ap.add_argument("--claimers", type=int, default=64, help="claimer processes [64]")
    ap.add_argument("--claims", type=int, default=50, help="claims per claimer [50]")
    ap.add_argument("--size-runs", type=int, default=4, help="pull runs of the sizes part [4]")
    ap.add_argument("--fresh", type=int, default=4000, help="tasks left to run, sizes [4000]")
    ap.add_argument("--totals", default="1000,1000000", help="list lengths, sizes part")
    ap.add_argument("--only", help="parts to run: runs,claims,sizes,growth [runs,claims,sizes]")
    ap.add_argument("--growth-runs", default="4,8,16,32,64", help="run counts, growth part")
    ap.add_argument("--growth-tasks", default="25000,100000", help="list lengths, growth part")
    ap.add_argument("--root", help="another source tree to run turn about with this one")
    ap.add_argument("--gluster", action="store_true", help="runs over the cluster's nodes")
    ap.add_argument("--quick", action="store_true", help="8 runs/claimers, 5,000 tasks")
    ap.add_argument("--dir", help="where to work (default: a temporary directory)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.tasks, args.command_tasks = 8, 5000, 1000
        args.claimers, args.claims, args.fresh = 8, 20, 1000
        args.totals = "1000,100000"
        args.growth_runs, args.growth_tasks = "2,4,8", "2000,5000"
    parts = set((args.only or "runs,claims,sizes").split(","))
    totals = [int(x) for x in args.totals.split(",")]
    print(f"# {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"# {now()}, {os.uname().nodename}, {os.cpu_count()} CPUs, load {load()}")
    if args.gluster:
        # a stop (timeout, Ctrl-C) still takes down what was brought up
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        with cluster():
            base = GLUSTER_MOUNT / f"pullbench-{os.getpid()}"
            base.mkdir()
            try:
                print(f"# GlusterFS {GLUSTER_MOUNT}, runs spread over the nodes")
                bench(args, base, node_prefixes(), parts - {"claims", "sizes"}, totals)
            finally:
                shutil.rmtree(base, ignore_errors=True)
        return
    work = Path(tempfile.mkdtemp(prefix="zotsink-bench-pull-", dir=args.dir or "/var/tmp"))
    try:
        bench(args, work, [[]], parts, totals)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench(
    args: argparse.Namespace,
    work: Path,
    prefixes: list[list[str]],
    parts: set[str],
    totals: list[int],
) -> None:
    print(f"# in {work}")
    roots = [("", ROOT)] + ([("@", Path(args.root).resolve())] if args.root else [])
    if "runs" in parts:
        for n in {args.tasks, args.command_tasks}:
            write_tasks(work / f"tasks-{n}.txt", n)
        print(f"\n## runs: {args.runs} pull runs started together, one TASKS/OUT/ledger")
        results: dict[tuple[str, str], list[dict[str, Any]]] = {}
        print_head()
        for r in range(args.rounds):
            order = [(w, lab, root) for w in ("call", "command") for lab, root in roots]
            if r % 2:
                order.reverse()
            for way, label, root in order:
                n = args.tasks if way == "call" else args.command_tasks
                res = pull_runs(work, args.runs, n, way, root, prefixes)
                results.setdefault((way, label), []).append(res)
                print_runs([res], label)
        for label, _root in roots[1:]:
            for way in ("call", "command"):
                a = [x["wall"] for x in results[(way, "")]]
                b = [x["wall"] for x in results[(way, label)]]
                ratios = [x / y for x, y in zip(a, b)]
                print(f"{way}: wall this/{label} median {statistics.median(ratios):.2f}")
        print(json.dumps({f"{w}{lab}": v for (w, lab), v in results.items()}))
    if "claims" in parts:
        print(
            f"\n## claims: {args.claimers} claimers, one task per claim, {args.claims} claims each"
        )
        print(
            "tree  prefill  claims  claims/s  hold p50 ms  p99 ms  CPU p50 ms  p99 ms  locked  "
            "load before/after"
        )
        for label, root in roots:
            c = claimers(work, args.claimers, args.claims, 1000, root)
            print(
                f"{label or 'this':4s} {c['prefill']:8,d} {c['claims']:7,d} {c['claims_s']:9.1f} "
                f"{c['hold_p50_ms']:12.2f} {c['hold_p99_ms']:7.2f} "
                f"{c['cpu_p50_ms']:11.2f} {c['cpu_p99_ms']:7.2f} "
                f"{100 * c['locked_share']:5.0f}%  {c['load_before']} / {c['load_after']}",
                flush=True,
            )
    if "sizes" in parts:
        print(
            f"\n## sizes: {args.size_runs} pull runs over the last "
            f"{min([args.fresh, *totals]):,} tasks, the ledger holding every task before them"
        )
        print(
            "tasks      ledger rows   MB  claims  hold p50 ms  p99 ms  CPU p50 ms  p99 ms  "
            "news KB  RSS max MB  wall s"
        )
        got = sizes(work, args.size_runs, args.fresh, totals, ROOT)
        for s in got:
            print(
                f"{s['total']:9,d} {s['ledger_rows']:12,d} {s['ledger_mb']:5.0f} "
                f"{s['claims']:6d} {s['hold_p50_ms']:12.2f} {s['hold_p99_ms']:7.2f} "
                f"{s['cpu_p50_ms']:11.2f} {s['cpu_p99_ms']:7.2f} {s['news_kb_p50']:8.1f} "
                f"{s['rss_max']:10.0f} {s['wall']:7.1f}  load {s['load_before']} / "
                f"{s['load_after']}{'' if s['ok'] else '  COUNT WRONG'}",
                flush=True,
            )
        if len(got) >= 2:
            a, b = got[0], got[-1]
            print(
                f"at {b['total']:,} / at {a['total']:,}: hold p50 "
                f"{b['hold_p50_ms'] / a['hold_p50_ms']:.2f}, CPU under the lock p50 "
                f"{b['cpu_p50_ms'] / a['cpu_p50_ms']:.2f}"
            )
    if "growth" in parts:
        g_runs = [int(x) for x in args.growth_runs.split(",")]
        g_tasks = [int(x) for x in args.growth_tasks.split(",")]
        print(f"\n## growth: pull runs of --call, runs {g_runs} x tasks {g_tasks}")
        growth(work, g_runs, g_tasks, args.rounds, roots)
    print(f"\n# load after: {load()}")


if __name__ == "__main__":
    main()
