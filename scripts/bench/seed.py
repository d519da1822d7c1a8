#!/usr/bin/env python3
"""The seed workload at its real scale, on the project's test cluster (root only).

N EuroSAT-like 64x64 PNG images (default 27,000), one ``filename min max mean`` record
each, on the three nodes of the Slurm cluster, every node writing to the GlusterFS volume
through its own client. Six ways, in rounds that alternate their order, each timed from
its first sbatch until the queue is empty (``squeue`` polled every 0.2 s; ``sbatch --wait``
polls far more coarsely); the chunked ways are arrays of N/100 elements of 2 CPUs each:

  habit     the seed's way: each image's record into its own tiny file on the shared
            volume, one image after the other, then ``zotsink collect`` of the directory
            into one table (timed apart, counted in the total)
  habit-p   the same with ``xargs -P "$SLURM_CPUS_PER_TASK"``: as many images at a time
            per element as ``run --jobs auto`` runs
  command   ``zotsink run --chunk 100 --jobs auto --kv -- python seed_step.py IMAGE``
  call      ``zotsink run --chunk 100 --jobs auto --call seed_step.py:image_stats``: the
            same step as a function in persistent workers
  pull      ``zotsink run --pull --jobs auto --call ...`` through scripts/jobs/
            zotsink-pull.sbatch as it ships: 2 elements of 2 CPUs on each node, each
            taking the next tasks of the whole list
  loop      ONE Python process on one node, no zotsink: scripts/cluster/seed_loop.py calls
            the same function on every image and writes one table (the floor a user would
            compare with)
  slices    the floor of any parallel way on this cluster: pull's elements (2 of 2 CPUs
            on each node), each running seed_loop.py twice at once over a fixed twelfth of
            the list, a table each; no zotsink, no coordination, nothing to resubmit

(``call`` and ``pull`` only when the installed zotsink has ``run --call``.) The per-image
step is scripts/cluster/seed_step.py (Pillow: open, greyscale, min/max/mean), the same for
every way. Every table is counted back (N rows).

Beside each time: the CPU per image of the way, summed over its elements' whole process
trees (each element runs under scripts/cluster/seed_rusage.py, which takes the tree's
rusage with ``os.wait4``; this cluster's Slurm keeps no accounting, so no ``sacct``) plus
the habit's collect, and apart the CPU the GlusterFS processes (daemon, brick, clients)
spent meanwhile. A second line says where the time went: when the elements started and
ended after the first sbatch, and for the ``run`` ways, from the run's ledger, each
element's start until its first claim, its tasks, and its last commit until it exited.

Then, for ``command`` and ``call``, one more array of ``--lock-images`` images runs under
``strace -f -e trace=flock,fcntl`` and the exclusive lock calls of all its elements
together are counted per task (OUT, log and ledger together; not timed). With ``--netem
MS`` every round is repeated with that delay on the nodes' bridge (``tc qdisc ... netem``),
when the kernel has netem.

Brings GlusterFS and Slurm up with scripts/cluster/ when they are not up, and takes down
what it brought up. Do not run tests/cluster meanwhile: its fixtures take the cluster down
when they end.

    .venv/bin/python scripts/bench/seed.py                       # 27,000 images, 2 rounds
    .venv/bin/python scripts/bench/seed.py --images 5400 --rounds 1 --ways habit,call,pull
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster"
STEP = CLUSTER / "seed_step.py"
LOOP = CLUSTER / "seed_loop.py"
RUSAGE = CLUSTER / "seed_rusage.py"
PULL = ROOT / "scripts" / "jobs" / "zotsink-pull.sbatch"
CHUNK = 100
CPUS = 2  # per array element, as the seed's jobs asked
NODES = 3  # scripts/cluster/slurm.sh's default
PULL_PER_NODE = 2
COLUMNS = "filename,min,max,mean"
WAYS = ("habit", "habit-p", "command", "call", "pull", "loop", "slices")
# (base, way): the speed-ups printed after the rounds, base's time over way's
RATIOS = (
    ("habit", "habit-p"),
    ("habit", "command"),
    ("habit-p", "command"),
    ("habit", "call"),
    ("habit", "pull"),
    ("habit-p", "pull"),
    ("call", "pull"),
    ("loop", "pull"),
    ("loop", "call"),
    ("loop", "slices"),
    ("slices", "pull"),
)
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


def submit(
    env: dict[str, str], elements: list[tuple[list[str], list[str], dict[str, str]]], cpu: Path
) -> tuple[float, float]:
    """(seconds, wall-clock time of the first sbatch) of one way: from submitting its jobs
    (each ``(sbatch options, element command, more environment)``) until the queue holds
    none of them. Every element runs in ``cpu`` (a local directory) under seed_rusage.py,
    which leaves its wall-clock start and end and the CPU of its process tree there."""
    cpu.mkdir(parents=True)
    wall0 = time.time()
    t0 = time.monotonic()
    jobids = []
    for opts, command, more in elements:
        wrapped = [sys.executable, "-I", "-S", str(RUSAGE), str(cpu), "--", *command]
        out = sh(
            "sbatch",
            "--parsable",
            f"--chdir={cpu}",
            "--output=/dev/null",
            *opts,
            f"--wrap=exec {shlex.join(wrapped)}",
            env={**env, **more},
        )
        jobids.append(out.strip().split(";")[0])
    while True:
        res = subprocess.run(
            ["squeue", "-h", "-o", "%i", "-j", ",".join(jobids)],
            env=env,
            capture_output=True,
            text=True,
        )
        # squeue -j of a job that has left the queue may also exit 1 (invalid job id)
        if not res.stdout.strip():
            return time.monotonic() - t0, wall0
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


def run_argv(tasks: Path, out: Path, way: str) -> list[str]:
    """The array element's command of a chunked ``zotsink run`` way."""
    how = (
        ["--kv", "--", sys.executable, str(STEP), "{}"]
        if way == "command"
        else ["--call", f"{STEP}:image_stats"]
    )
    return [
        *(sys.executable, "-m", "zotsink", "run", str(tasks), str(out)),
        *("--chunk", str(CHUNK), "--jobs", "auto", "-q", "--columns", COLUMNS),
        *how,
    ]


def habit_job(tasks: Path, files: Path, parallel: bool) -> str:
    """The seed's array element: its 100 images, a tiny file each; one after the other, or
    (``parallel``) ``$SLURM_CPUS_PER_TASK`` at a time through ``xargs -P``, as many as
    ``run --jobs auto`` runs."""
    lines = (
        f"start=$(( (SLURM_ARRAY_TASK_ID - 1) * {CHUNK} + 1 )); "
        f'sed -n "${{start}},$(( start + {CHUNK - 1} ))p" {tasks} | '
    )
    if parallel:
        return lines + (
            f"xargs -d '\\n' -P \"$SLURM_CPUS_PER_TASK\" -I{{}} sh -c "
            f'\'{sys.executable} {STEP} "$1" > {files}/$(basename "$1").txt\' sh {{}}'
        )
    return lines + (
        f'while read -r img; do {sys.executable} {STEP} "$img"'
        f' > {files}/$(basename "$img").txt; done'
    )


def elements_of(
    way: str, tasks: Path, n: int, shared: Path
) -> list[tuple[list[str], list[str], dict[str, str]]]:
    """The jobs one way submits: (sbatch options, element command, more environment)."""
    chunked = [f"--array=1-{-(-n // CHUNK)}", f"--cpus-per-task={CPUS}"]
    out = shared / "stats.tsv"
    if way in ("habit", "habit-p"):
        job = habit_job(tasks, shared / "files", parallel=way == "habit-p")
        return [(chunked, ["/bin/sh", "-c", job], {})]
    if way in ("command", "call"):
        return [(chunked, run_argv(tasks, out, way), {})]
    if way == "loop":
        return [
            (
                ["--nodelist=node1", "--cpus-per-task=1"],
                [sys.executable, str(LOOP), str(tasks), str(out)],
                {},
            )
        ]
    if way == "slices":
        return slices_of(tasks, shared)
    # pull: the job template as it ships, PULL_PER_NODE elements on each node
    settings = {
        "TASKS": str(tasks),
        "RESULTS": str(out),
        "CALL": f"{STEP}:image_stats",
        "FIELDS": COLUMNS,
        "STAMP": "",
        "ZOTSINK": f"{sys.executable} -m zotsink",
        "ZOTSINK_ARGS": "-q",
    }
    return [
        (
            [f"--array=1-{PULL_PER_NODE}", f"--cpus-per-task={CPUS}", f"--nodelist=node{i}"],
            ["/bin/bash", str(PULL)],
            settings,
        )
        for i in range(1, NODES + 1)
    ]


def slices_of(tasks: Path, shared: Path) -> list[tuple[list[str], list[str], dict[str, str]]]:
    """The ``slices`` way's jobs: pull's elements, each looping over fixed slices of the
    list in CPUS processes at once (slice files beside the list, tables on the volume)."""
    lines = tasks.read_text().splitlines(keepends=True)
    parts = NODES * PULL_PER_NODE * CPUS
    for k in range(parts):
        (tasks.parent / f"slice-{k}.txt").write_text("".join(lines[k::parts]))
    jobs = []
    for node in range(NODES):
        first = node * PULL_PER_NODE * CPUS  # the element's slices: first + (index-1)*CPUS + j
        loops = " ".join(
            f"{shlex.quote(sys.executable)} {shlex.quote(str(LOOP))}"
            f" {tasks.parent}/slice-$((k + {j})).txt {shared}/stats-$((k + {j})).tsv &"
            for j in range(CPUS)
        )
        job = f"k=$(( {first} + (SLURM_ARRAY_TASK_ID - 1) * {CPUS} )); {loops} wait"
        opts = [
            f"--array=1-{PULL_PER_NODE}",
            f"--cpus-per-task={CPUS}",
            f"--nodelist=node{node + 1}",
        ]
        jobs.append((opts, ["/bin/sh", "-c", job], {}))
    return jobs


def fs_cpu() -> float:
    """CPU seconds so far of the GlusterFS processes (daemon, bricks, every node's client):
    the node namespaces' processes are this host's too."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        if comm.startswith("gluster"):
            fields = stat[stat.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Measure:
    """One way's round."""

    seconds: float  # sbatch until the queue is empty, collect not counted
    collect: float  # the habit's collect; 0 for the others
    cpu: float  # CPU seconds of every element's process tree, and of collect
    fs_cpu: float  # CPU seconds of the GlusterFS processes meanwhile
    phases: str  # where the time went, said in one line


def phases_of(cpu_dir: Path, ledger: Path | None, wall0: float, seconds: float) -> str:
    """Where one way's time went: when its elements started and ended after the first
    sbatch, and, for a ``run`` way, from its ledger, each element's start until its first
    claim (interpreter, imports, the first read of the ledger, the claim), its tasks (first
    claim to last commit) and its tail (last commit to exit); means over elements."""
    spans = {}
    for f in cpu_dir.iterdir():
        start, end, _, _ = (float(x) for x in f.read_text().split())
        spans[f.name] = (start - wall0, end - wall0)
    starts = sorted(s for s, _ in spans.values())
    ends = sorted(e for _, e in spans.values())
    text = (
        f"{len(spans)} elements start {starts[0]:.2f}..{starts[-1]:.2f} s,"
        f" run {mean(e - s for s, e in spans.values()):.2f} s each,"
        f" last ends {ends[-1]:.2f}, queue empty seen {seconds:.2f}"
    )
    if ledger is None:
        return text
    from zotsink import read_ledger

    first: dict[str, float] = {}
    last: dict[str, float] = {}
    busy: dict[str, float] = {}  # the ledger's times: a task's claim to its commit
    claimed: dict[tuple[int, int], float] = {}
    tasks = 0
    ran: dict[int, int] = {}  # ok ends per task: more than one is a task run twice
    for e in read_ledger(ledger):
        if e.event not in ("claim", "end"):
            continue
        # the ledger names a job CLUSTER:JOB where Slurm names its cluster
        key = f"{e.job.rpartition(':')[2]}_{e.array_task}"
        t = e.time - wall0
        if e.event == "claim":
            first[key] = min(first.get(key, t), t)
            claimed[e.tasknum, e.attempt] = e.time
        else:
            last[key] = max(last.get(key, t), t)
            busy[key] = busy.get(key, 0.0) + e.time - claimed.get((e.tasknum, e.attempt), e.time)
            tasks += 1
            if e.status == "ok":
                ran[e.tasknum] = ran.get(e.tasknum, 0) + 1
    keys = [k for k in spans if k in first and k in last]
    if not keys:
        return text + "; no ledger rows of these elements"
    to_claim = mean(first[k] - spans[k][0] for k in keys)
    work = mean(last[k] - first[k] for k in keys)
    tail = mean(spans[k][1] - last[k] for k in keys)
    return (
        text + f"; per element: start to first claim {to_claim:.2f} s,"
        f" tasks {work:.2f} s, last commit to exit {tail:.2f} s;"
        f" a task's start to its commit {sum(busy.values()) / tasks:.3f} s (mean);"
        f" {sum(1 for v in ran.values() if v > 1)} tasks ran more than once"
    )


def one_way(
    way: str, env: dict[str, str], tasks: Path, n: int, shared: Path, work: Path, keep: Path | None
) -> Measure:
    """One way's round; checks the N rows."""
    shared.mkdir(parents=True)
    cpu_dir = work / f"cpu-{shared.name}"
    if way.startswith("habit"):
        (shared / "files").mkdir()
    fs0 = fs_cpu()
    t, wall0 = submit(env, elements_of(way, tasks, n, shared), cpu_dir)
    cpu = sum(sum(float(x) for x in f.read_text().split()[2:]) for f in cpu_dir.iterdir())
    table = shared / "stats.tsv"
    t_collect = 0.0
    ledger = None
    if way.startswith("habit"):
        c0 = children_cpu()
        t0 = time.monotonic()
        sh(
            sys.executable,
            "-m",
            "zotsink",
            "collect",
            str(shared / "files"),
            "-o",
            str(table),
            "-q",
        )
        t_collect = time.monotonic() - t0
        cpu += children_cpu() - c0
        rows = rows_of(table, n, committed=False)
    elif way == "loop":
        rows = rows_of(table, n, committed=False)
    elif way == "slices":
        tables = sorted(shared.glob("stats-*.tsv"))
        rows = sum(rows_of(t, 0, committed=False) for t in tables)
    else:
        ledger = shared / "stats.tsv.ledger"
        rows = rows_of(table, n, committed=True)
    fs = fs_cpu() - fs0
    if keep is not None:
        kept = keep / shared.name
        shutil.copytree(cpu_dir, kept / "elements")
        if ledger is not None:
            shutil.copy(ledger, kept / "stats.tsv.ledger")
    if rows != n:
        sys.exit(f"seed: {way}: {rows} rows for {n} images in {shared}")
    return Measure(t, t_collect, cpu, fs, phases_of(cpu_dir, ledger, wall0, t))


def count_locks(
    way: str, env: dict[str, str], tasks: Path, n: int, shared: Path, work: Path
) -> tuple[float, float]:
    """(exclusive flock/fcntl locks taken, exclusive lock calls made) per task of one ``run``
    way, all elements together: a lock that is busy is tried again, a call each time."""
    shared.mkdir(parents=True)
    traces = work / f"trace-{way}"
    traces.mkdir()
    # one trace file per process of the element's tree (-ff), all under the element's name
    strace = ["strace", "-f", "-qq", "-e", "trace=flock,fcntl", "-o", f"{traces}/trace"]
    opts = [f"--array=1-{-(-n // CHUNK)}", f"--cpus-per-task={CPUS}"]
    command = [*strace, *run_argv(tasks, shared / "stats.tsv", way)]
    # the trace's name needs the element's index: let a shell put it in
    job = shlex.join(command).replace(f"{traces}/trace", f"{traces}/$SLURM_ARRAY_TASK_ID")
    submit(env, [(opts, ["/bin/sh", "-c", job], {})], work / f"cpu-locks-{way}")
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
    ap.add_argument("--ways", default=",".join(WAYS), help=f"any of {','.join(WAYS)}")
    ap.add_argument(
        "--lock-images", type=int, default=2700, help="images of the strace'd runs (0: none)"
    )
    ap.add_argument("--netem", type=float, metavar="MS", help="also with this delay")
    ap.add_argument(
        "--images-dir",
        type=Path,
        metavar="DIR",
        help="use the images seed_images.py made in DIR (its tasks.txt) instead of making them",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep each way's element times and its run's ledger in DIR/DELAY-ROUND-WAY",
    )
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
    if {"call", "pull"} & set(ways) and not has_call():
        print("# ways call, pull: not available (this zotsink's `run` has no --call)", flush=True)
        ways = [w for w in ways if w not in ("call", "pull")]
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
    images = work / "images"
    if args.images_dir is None:
        sh(sys.executable, str(CLUSTER / "seed_images.py"), str(images), str(n))
    else:  # made before by seed_images.py (the same images: image i is seeded by i)
        made = args.images_dir.resolve() / "tasks.txt"
        lines = made.read_text().splitlines(keepends=True)
        if len(lines) < n:
            sys.exit(f"seed: {made} names {len(lines)} images, fewer than --images {n}")
        images.mkdir()
        (images / "tasks.txt").write_text("".join(lines[:n]))
    tasks = images / "tasks.txt"
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
                m = one_way(way, env, tasks, n, shared / f"{delay}-{rnd}-{way}", work, args.keep)
                total = m.seconds + m.collect
                times.setdefault((delay, way), []).append(total)
                detail = f" ({m.seconds:.1f} + collect {m.collect:.1f})" if m.collect else ""
                print(
                    f"delay {delay:g} ms  round {rnd + 1}  {way:<8} {total:8.1f} s{detail}"
                    f"   {n} rows   cpu {1000 * m.cpu / n:.2f} ms/image"
                    f" (+ GlusterFS {1000 * m.fs_cpu / n:.2f})"
                    f"   load {load[0]:.2f} {load[1]:.2f}",
                    flush=True,
                )
                print(f"    {m.phases}", flush=True)
        clear_netem()
        for base, way in RATIOS:
            if (delay, base) in times and (delay, way) in times:
                pairs = zip(times[(delay, base)], times[(delay, way)])
                ratios = " ".join(f"{b / w:.2f}" for b, w in pairs)
                print(f"delay {delay:g} ms  {base} / {way} per round: {ratios}")
    if args.lock_images:
        m = min(args.lock_images, n)
        lock_tasks = work / "lock-tasks.txt"
        lock_tasks.write_text("".join(tasks.read_text().splitlines(keepends=True)[:m]))
        for way in ways:
            if way not in ("command", "call"):
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
