#!/usr/bin/env python3
"""The seed workload at its real scale, on the project's test cluster (root only).

N EuroSAT-like 64x64 PNG images (default 27,000), one ``filename min max mean`` record
each, processed by a Slurm array of N/100 elements (2 CPUs each) spread over the three
nodes, every node writing to the GlusterFS volume through its own client. Three ways, in
rounds that alternate their order, each timed from sbatch until the queue is empty
(``squeue`` polled every 0.2 s; ``sbatch --wait`` polls far more coarsely):

  habit     the seed's way: each image's record into its own tiny file on the shared
            volume, then ``zotsink collect`` of the directory into one table (timed apart)
  command   ``zotsink run --chunk 100 --jobs auto --kv -- python seed_step.py IMAGE``
  call      ``zotsink run --chunk 100 --jobs auto --call seed_step.py:image_stats``: the
            same step as a function in persistent workers (only when the installed
            zotsink has ``run --call``; otherwise the script says so and goes on)

The per-image step is scripts/cluster/seed_step.py (Pillow: open, greyscale, min/max/mean),
the same for every way. Every table is counted back (N rows). Then, for each ``run`` way,
one more array of ``--lock-images`` images runs under ``strace -f -e trace=flock,fcntl``
and the exclusive lock calls of all its elements together are counted per task (OUT, log
and ledger together; not timed). With ``--netem MS`` every round is repeated with that
delay on the nodes' bridge (``tc qdisc ... netem``), when the kernel has netem.

Brings GlusterFS and Slurm up with scripts/cluster/ when they are not up, and takes down
what it brought up. Do not run tests/cluster meanwhile: its fixtures take the cluster down
when they end.

    .venv/bin/python scripts/bench/seed.py                       # 27,000 images, 2 rounds
    .venv/bin/python scripts/bench/seed.py --images 2700 --rounds 1 --ways habit,command
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster"
STEP = CLUSTER / "seed_step.py"
CHUNK = 100
CPUS = 2  # per array element, as the seed's jobs asked
COLUMNS = "filename,min,max,mean"
WAYS = ("habit", "command", "call")
BRIDGE = "zsbr0"  # scripts/cluster/nodes.sh
POLL = 0.2


def sh(*argv: str, env: dict[str, str] | None = None, timeout: float = 7200) -> str:
    res = subprocess.run(
        list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if res.returncode:
        sys.exit(f"seed: {' '.join(argv[:3])} exited {res.returncode}: {res.stderr[-2000:]}")
    return res.stdout


def is_up(service: str) -> bool:
    res = subprocess.run(
        ["bash", str(CLUSTER / f"{service}.sh"), "status"], capture_output=True, check=False
    )
    return res.returncode == 0


def array(env: dict[str, str], n: int, job: str, workdir: Path) -> float:
    """Seconds from submitting an array of n/CHUNK elements running ``job`` until the queue
    holds none of them."""
    t0 = time.monotonic()
    out = sh(
        "sbatch",
        "--parsable",
        f"--array=1-{-(-n // CHUNK)}",
        f"--cpus-per-task={CPUS}",
        f"--chdir={workdir}",
        "--output=/dev/null",
        f"--wrap={job}",
        env=env,
    )
    jobid = out.strip().split(";")[0]
    while True:
        res = subprocess.run(
            ["squeue", "-h", "-o", "%i", "-j", jobid], env=env, capture_output=True, text=True
        )
        # squeue -j of a job that has left the queue may also exit 1 (invalid job id)
        if not res.stdout.strip():
            return time.monotonic() - t0
        time.sleep(POLL)


def rows_of(path: Path, n: int, committed: bool, timeout: float = 60) -> int:
    """Data rows of the table at ``path`` (through ``zotsink cat``: the committed view of a
    run), waited for until there are ``n``: another client's appends reach this host's
    mount within about a second."""
    deadline = time.monotonic() + timeout
    while True:
        if committed:
            text = sh(sys.executable, "-m", "zotsink", "cat", str(path))
        else:
            text = path.read_text()
        rows = len(text.splitlines()) - 1
        if rows >= n or time.monotonic() > deadline:
            return rows
        time.sleep(POLL)


def has_call() -> bool:
    helptext = sh(sys.executable, "-m", "zotsink", "run", "--help")
    return "--call" in helptext


def run_job(tasks: Path, out: Path, way: str, wrap: str = "") -> str:
    """The array element's command line of a ``zotsink run`` way."""
    zotsink = f"{sys.executable} -m zotsink"
    how = (
        f"--kv -- {sys.executable} {STEP} {{}}"
        if way == "command"
        else f"--call {STEP}:image_stats"
    )
    return (
        f"{wrap}{zotsink} run {tasks} {out} --chunk {CHUNK} --jobs auto -q"
        f" --columns {COLUMNS} {how}"
    )


def habit_job(tasks: Path, files: Path) -> str:
    """The seed's array element: its 100 images one after the other, a tiny file each."""
    return (
        f"start=$(( (SLURM_ARRAY_TASK_ID - 1) * {CHUNK} + 1 )); "
        f'sed -n "${{start}},$(( start + {CHUNK - 1} ))p" {tasks} | '
        f'while read -r img; do {sys.executable} {STEP} "$img"'
        f' > {files}/$(basename "$img").txt; done'
    )


def one_way(
    way: str, env: dict[str, str], tasks: Path, n: int, shared: Path, work: Path
) -> tuple[float, float]:
    """(seconds of the array, seconds of collect) of one way; checks the N rows."""
    shared.mkdir(parents=True)
    if way == "habit":
        files = shared / "files"
        files.mkdir()
        t = array(env, n, habit_job(tasks, files), work)
        t0 = time.monotonic()
        table = shared / "stats.tsv"
        sh(sys.executable, "-m", "zotsink", "collect", str(files), "-o", str(table), "-q")
        t_collect = time.monotonic() - t0
        rows = rows_of(table, n, committed=False)
    else:
        t = array(env, n, run_job(tasks, shared / "stats.tsv", way), work)
        t_collect = 0.0
        rows = rows_of(shared / "stats.tsv", n, committed=True)
    if rows != n:
        sys.exit(f"seed: {way}: {rows} rows for {n} images in {shared}")
    return t, t_collect


def count_locks(
    way: str, env: dict[str, str], tasks: Path, n: int, shared: Path, work: Path
) -> tuple[float, float]:
    """(exclusive flock/fcntl locks taken, exclusive lock calls made) per task of one ``run``
    way, all elements together: a lock that is busy is tried again, a call each time."""
    shared.mkdir(parents=True)
    traces = work / f"trace-{way}"
    traces.mkdir()
    wrap = f"strace -f -qq -e trace=flock,fcntl -o {traces}/$SLURM_ARRAY_TASK_ID "
    array(env, n, run_job(tasks, shared / "stats.tsv", way, wrap), work)
    if rows_of(shared / "stats.tsv", n, committed=True) != n:
        sys.exit(f"seed: {way} under strace: not {n} rows in {shared}")
    taken = calls = 0
    for trace in traces.iterdir():
        for line in trace.read_text().splitlines():
            if "LOCK_EX" in line or ("F_WRLCK" in line and "F_GETLK" not in line):
                calls += 1
                taken += line.rstrip().endswith("= 0")
    return taken / n, calls / n


def set_netem(ms: float) -> str | None:
    """Add ``ms`` of delay on the nodes' bridge; None, or why it cannot be done."""
    # a kernel built with netem as a module needs it loaded; modprobe itself may be absent
    with contextlib.suppress(OSError):
        subprocess.run(["modprobe", "sch_netem"], capture_output=True, check=False)
    try:
        res = subprocess.run(
            ["tc", "qdisc", "replace", "dev", BRIDGE, "root", "netem", "delay", f"{ms}ms"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as e:
        return f"tc: {e}"
    if res.returncode == 0:
        return None
    return f"kernel {os.uname().release}: {res.stderr.strip()}"


def clear_netem() -> None:
    with contextlib.suppress(OSError):
        subprocess.run(["tc", "qdisc", "del", "dev", BRIDGE, "root"], capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=27000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ways", default=",".join(WAYS), help="any of habit,command,call")
    ap.add_argument(
        "--lock-images", type=int, default=2700, help="images of the strace'd runs (0: none)"
    )
    ap.add_argument("--netem", type=float, metavar="MS", help="also with this delay")
    args = ap.parse_args()
    ways = [w for w in args.ways.split(",") if w]
    if not set(ways) <= set(WAYS) or args.images < 1 or args.rounds < 0:
        ap.error(f"--ways takes {','.join(WAYS)}; --images at least 1, --rounds at least 0")
    if os.geteuid() != 0:
        sys.exit("seed: needs root (it brings up GlusterFS and Slurm)")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
        f"{shlex.join([Path(sys.executable).name, *sys.argv])}",
        flush=True,
    )
    if "call" in ways and not has_call():
        print("# way call: not available (this zotsink's `run` has no --call)", flush=True)
        ways.remove("call")
    brought = [s for s in ("gluster", "slurm") if not is_up(s)]
    mounts = sh("bash", str(CLUSTER / "gluster.sh"), "up").split()
    try:
        conf = re.search(r"^SLURM_CONF=(.+)$", sh("bash", str(CLUSTER / "slurm.sh"), "up"), re.M)
        assert conf, "slurm.sh up printed no SLURM_CONF"
        env = dict(os.environ, SLURM_CONF=conf[1].strip())
        env = {k: v for k, v in env.items() if not k.startswith("ZOTSINK_")}
        work = Path(sh("mktemp", "-d", "/var/tmp/zotsink-seed.XXXXXX").strip())
        shared = Path(mounts[0]) / f"seed-{os.getpid()}"
        try:
            bench(args, ways, env, work, shared)
        finally:
            clear_netem()
            shutil.rmtree(shared, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        for service in reversed(brought):
            sh("bash", str(CLUSTER / f"{service}.sh"), "down")


def bench(
    args: argparse.Namespace, ways: list[str], env: dict[str, str], work: Path, shared: Path
) -> None:
    n = args.images
    sh(sys.executable, str(CLUSTER / "seed_images.py"), str(work / "images"), str(n))
    tasks = work / "images" / "tasks.txt"
    delays = [0.0]
    if args.netem:
        why = set_netem(args.netem)
        clear_netem()
        if why is None:
            delays.append(args.netem)
        else:
            print(
                f"# netem {args.netem} ms: not available here ({why}); no delayed rounds",
                flush=True,
            )
    times: dict[tuple[float, str], list[float]] = {}
    for delay in delays:
        if delay:
            set_netem(delay)
        for rnd in range(args.rounds):
            order = ways if rnd % 2 == 0 else ways[::-1]
            for way in order:
                load = os.getloadavg()
                t, t_collect = one_way(way, env, tasks, n, shared / f"{delay}-{rnd}-{way}", work)
                total = t + t_collect
                times.setdefault((delay, way), []).append(total)
                detail = f" ({t:.1f} + collect {t_collect:.1f})" if way == "habit" else ""
                print(
                    f"delay {delay:g} ms  round {rnd + 1}  {way:<8} {total:8.1f} s{detail}"
                    f"   {n} rows   load {load[0]:.2f} {load[1]:.2f}",
                    flush=True,
                )
        clear_netem()
        if "habit" in ways and args.rounds:
            for way in ways:
                if way == "habit":
                    continue
                pairs = zip(times[(delay, "habit")], times[(delay, way)])
                ratios = " ".join(f"{h / r:.2f}" for h, r in pairs)
                print(f"delay {delay:g} ms  habit / {way} per round: {ratios}")
    if args.lock_images:
        m = min(args.lock_images, n)
        lock_tasks = work / "lock-tasks.txt"
        lock_tasks.write_text("".join(tasks.read_text().splitlines(keepends=True)[:m]))
        for way in ways:
            if way == "habit":
                continue
            taken, calls = count_locks(way, env, lock_tasks, m, shared / f"locks-{way}", work)
            print(
                f"locks  {way:<8} {taken:.2f} exclusive locks taken per task, {calls:.2f}"
                f" lock calls ({m} images, {-(-m // CHUNK)} elements)",
                flush=True,
            )
    print(f"# load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
