#!/usr/bin/env python3
"""How far one lock scales: N one-record writers that start together over the test
cluster's nodes, against N tiny-file creates on the same volume (root; the nodes of
scripts/cluster/slurm.sh and the file system's clients in them must be up).

    .venv/bin/python scripts/bench/scaling.py [--fs moosefs|gluster|ceph] [--writers 16,64,256]
        [--rounds 3] [--delay-ms 0] [--json]

For each N, a launcher in each node (its namespaces, its own client of the file system)
forks N / nodes writers, which wait on one barrier released for all nodes at once. Each
writer appends ONE record to one shared OUT with zotsink's writer (lock, O_APPEND write,
fsync, unlock) and reports how long it waited for the lock and how long the append took
in all; the baseline writer creates one tiny file of its own instead (O_CREAT|O_EXCL,
write, fsync, close) in one shared directory. With ``--batch B`` each zotsink writer
appends B records in its one lock hold instead (group commit). Reported per N: records
(or files) per second from the first start to the last finish, and the median and 99th
percentile of the lock wait and of the whole append. Every record is counted back.

``--delay-ms`` adds that delay to every packet of the file system's network with
``tc qdisc ... netem`` (MooseFS: its own network namespace's loopback; GlusterFS's and
CephFS's clients use this host's loopback, which is not ours to slow down). It prints
numbers and never asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster"
NODE_RUN = Path(os.environ.get("ZOTSINK_SLURM_STATE", "/var/tmp/zotsink-cluster/slurm")) / "run"
MOUNT = {"moosefs": "/mnt/zotsink-m1", "gluster": "/mnt/zotsink-g1", "ceph": "/mnt/zotsink-c1"}

# One launcher per node: argv MODE TARGET N TAG. Forks N writers that wait on a pipe,
# prints "ready", releases them when a line arrives on stdin, prints one JSON line each.
LAUNCHER = r"""
import json, os, sys, time
mode, target, tag = sys.argv[1], sys.argv[2], sys.argv[4]
n, batch = int(sys.argv[3]), int(sys.argv[5])
if mode == "zotsink":
    from zotsink._core.writer import Writer
gate_r, gate_w = os.pipe()
out_r, out_w = os.pipe()
kids = []
for i in range(n):
    pid = os.fork()
    if pid == 0:
        os.close(gate_w)
        os.close(out_r)
        os.read(gate_r, 1)  # EOF: every writer of every node starts now
        t0 = time.time()
        wait = 0.0
        if mode == "zotsink":
            w = Writer(target)
            recs = b"".join(b"%s\t%d\t%d\n" % (tag.encode(), i, k) for k in range(batch))
            w.append(recs, timeout=3600)
            wait = w.lock_wait
            w.close()
        else:
            fd = os.open(os.path.join(target, "%s-%d" % (tag, i)),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, b"%s\t%d\n" % (tag.encode(), i))
            os.fsync(fd)
            os.close(fd)
        line = json.dumps([t0, time.time(), wait]) + "\n"
        os.write(out_w, line.encode())
        os._exit(0)
    kids.append(pid)
os.close(gate_r)
os.close(out_w)
print("ready", flush=True)
sys.stdin.readline()
os.close(gate_w)
with os.fdopen(out_r) as f:
    data = f.read()
for pid in kids:
    os.waitpid(pid, 0)
sys.stdout.write(data)
"""


def nodes() -> list[tuple[str, int]]:
    found = []
    for ready in sorted((NODE_RUN / "nodes").glob("node*.ready")):
        init = (ready.parent / f"{ready.stem}.init").read_text().strip()
        found.append((ready.stem, int(init)))
    if not found:
        raise SystemExit("no running nodes: bring them up first (scripts/cluster/slurm.sh up)")
    return found


def one_run(mode: str, target: str, n: int, where: list[tuple[str, int]], batch: int) -> dict:
    tag = uuid.uuid4().hex[:8]
    share = [n // len(where) + (1 if k < n % len(where) else 0) for k in range(len(where))]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for (name, init), m in zip(where, share):
        if m == 0:
            continue
        cmd = ["nsenter", f"--target={init}", "--net", "--uts", "--mount", "--pid", "--"]
        cmd += [sys.executable, "-c", LAUNCHER, mode, target, str(m), f"{tag}-{name}", str(batch)]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        procs.append(p)
    for p in procs:
        if p.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
            raise SystemExit(f"a launcher failed (exit {p.wait()})")
    for p in procs:
        p.stdin.write("go\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]
    got = []
    for p in procs:
        out, _ = p.communicate(timeout=3600)
        got += [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    if len(got) != n:
        raise SystemExit(f"{mode}: {len(got)} of {n} writers reported")
    first, last = min(g[0] for g in got), max(g[1] for g in got)
    took = sorted(g[1] - g[0] for g in got)
    waits = sorted(g[2] for g in got)
    return {
        "per_s": n * (batch if mode == "zotsink" else 1) / (last - first),
        "p50_ms": 1000 * statistics.median(took),
        "p99_ms": 1000 * took[min(n - 1, int(0.99 * n))],
        "wait_p50_ms": 1000 * statistics.median(waits),
        "wait_p99_ms": 1000 * waits[min(n - 1, int(0.99 * n))],
        "tag": tag,
    }


def set_delay(fs: str, ms: float) -> None:
    if fs != "moosefs":
        raise SystemExit(
            "--delay-ms needs --fs moosefs (GlusterFS and CephFS use this host's loopback)"
        )
    action = ["qdisc", "replace", "dev", "lo", "root", "netem", "delay", f"{ms}ms"]
    if ms == 0:
        action = ["qdisc", "del", "dev", "lo", "root"]
    res = subprocess.run(
        ["bash", str(CLUSTER / "moosefs.sh"), "exec", "tc", *action],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0 and ms != 0:
        raise SystemExit(f"tc netem delay {ms} ms failed: {res.stderr.strip()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fs", choices=sorted(MOUNT), default="moosefs")
    ap.add_argument("--writers", default="16,64,256")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument(
        "--batch",
        type=int,
        default=1,
        help="records per zotsink writer, appended in one lock hold (group commit, as "
        "`zotsink run` and append_records do); the tiny-file writers still write one file",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    where = nodes()
    base = Path(MOUNT[args.fs]) / f"scaling-{uuid.uuid4().hex[:8]}"
    base.mkdir()
    if args.delay_ms:
        set_delay(args.fs, args.delay_ms)
    results = []
    try:
        for n in (int(x) for x in args.writers.split(",")):
            for r in range(args.rounds):
                out = base / f"out-{n}-{r}.tsv"
                files = base / f"files-{n}-{r}"
                files.mkdir()
                # turn about, so that neither always runs on a cooler machine
                order = ("zotsink", "files") if r % 2 == 0 else ("files", "zotsink")
                row = {"writers": n, "round": r, "load1": os.getloadavg()[0]}
                for mode in order:
                    target = str(out if mode == "zotsink" else files)
                    row[mode] = one_run(mode, target, n, where, args.batch)
                lines = out.read_text().splitlines()
                tag = row["zotsink"]["tag"]
                row["records_counted"] = sum(ln.startswith(tag + "-") for ln in lines)
                row["files_counted"] = len(os.listdir(files))
                results.append(row)
                z, f = row["zotsink"], row["files"]
                if not args.json:
                    print(
                        f"N={n:5d} round {r}: zotsink {z['per_s']:8.1f} rec/s "
                        f"(lock wait p50 {z['wait_p50_ms']:7.1f} ms, p99 {z['wait_p99_ms']:7.1f}; "
                        f"append p99 {z['p99_ms']:7.1f} ms) | tiny files {f['per_s']:8.1f}/s "
                        f"(p99 {f['p99_ms']:7.1f} ms) | counted {row['records_counted']}/"
                        f"{row['files_counted']} | load {row['load1']:.2f}",
                        flush=True,
                    )
    finally:
        if args.delay_ms:
            set_delay(args.fs, 0)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
