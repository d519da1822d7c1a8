#!/usr/bin/env python3
"""zotsink where users live: the figures on the GlusterFS test volume (root only).

Brings the volume up with scripts/cluster/gluster.sh (write-behind on, separate FUSE client
mounts), then, alternating with its baseline in the same invocation:

  record   one writer, ``append_record`` per record, against a bare Python loop doing
           open + flock + O_APPEND write + fsync + unlock + close per record
  writers  4 writers (2 per client mount) of N records each, aggregate records/s, the
           same two ways; every record is then counted back through a third mount
  stream   ``cat big | zotsink out`` against ``cat big >> out`` on the volume

    .venv/bin/python scripts/bench/gluster.py [--records 2000] [--rounds 3] [--lines 200000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GLUSTER = ROOT / "scripts" / "cluster" / "gluster.sh"

# One writer process: argv MODE OUT N TAG; prints its records/s.
WRITER = r"""
import fcntl, os, sys, time
mode, out, n, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
recs = [b"%s\t%06d\t%s\n" % (tag.encode(), i, b"x" * 40) for i in range(n)]
if mode == "zotsink":
    from zotsink import append_record
    t = time.perf_counter()
    for r in recs:
        append_record(out, r)
else:
    t = time.perf_counter()
    for r in recs:
        fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, r)
        os.fsync(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
print(n / (time.perf_counter() - t))
"""


def writers(mode: str, mounts: list[Path], per_mount: int, n: int, tag: str) -> float:
    """Aggregate records/s of ``per_mount`` writers on each of ``mounts``."""
    out = [m / f"bench-{tag}.txt" for m in mounts]
    # OUT exists before the writers start: GlusterFS can answer EEXIST to two clients'
    # O_CREAT at once, which the bare loop (unlike zotsink) does not retry.
    out[0].touch()
    for _ in range(100):
        if all(o.exists() for o in out):
            break
        time.sleep(0.1)
    t = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, mode, str(o), str(n), f"{tag}{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for o in out
        for i in range(per_mount)
    ]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            sys.exit(f"bench: a {mode} writer exited {p.returncode}:\n{err.decode()[-2000:]}")
    took = time.perf_counter() - t
    return len(procs) * n / took


def count(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lines", type=int, default=200000)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: needs root (it brings up the GlusterFS volume)")
    up = subprocess.run([str(GLUSTER), "up"], capture_output=True, text=True, check=True)
    mounts = [Path(p) for p in up.stdout.split()]
    try:
        base = [m / f"gbench-{os.getpid()}" for m in mounts]
        base[0].mkdir()
        for _ in range(100):
            if all(b.is_dir() for b in base):
                break
            time.sleep(0.1)
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, GlusterFS, "
              f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
        ratios: dict[str, list[float]] = {"record": [], "writers": [], "stream": []}
        figures: dict[str, list[float]] = {k: [] for k in ("z1", "b1", "z4", "b4", "zs", "bs")}
        big = base[0] / "big.txt"
        with open(big, "wb") as f:
            f.write(b"".join(b"%08d %s\n" % (i, b"y" * 78) for i in range(a.lines)))
        for r in range(a.rounds):
            pair = []
            for mode in ("zotsink", "bare") if r % 2 == 0 else ("bare", "zotsink"):
                rate = writers(mode, base[:1], 1, a.records, f"r{r}{mode[0]}")
                figures["z1" if mode == "zotsink" else "b1"].append(rate)
                pair.append((mode, rate))
            d = dict(pair)
            ratios["record"].append(d["zotsink"] / d["bare"])
            pair = []
            for mode in ("zotsink", "bare") if r % 2 == 0 else ("bare", "zotsink"):
                tag = f"w{r}{mode[0]}"
                rate = writers(mode, base[:2], 2, a.records, tag)
                got = count(base[2] / f"bench-{tag}.txt")
                assert got == 4 * a.records, (mode, got)
                figures["z4" if mode == "zotsink" else "b4"].append(rate)
                pair.append((mode, rate))
            d = dict(pair)
            ratios["writers"].append(d["zotsink"] / d["bare"])
            times = {}
            for mode in ("zotsink", "cat") if r % 2 == 0 else ("cat", "zotsink"):
                out = base[1] / f"s{r}{mode}.txt"
                cmd = f"cat {big} | {sys.executable} -m zotsink {out}" if mode == "zotsink" \
                    else f"cat {big} >> {out}"  # fmt: skip
                t = time.perf_counter()
                subprocess.run(["sh", "-c", cmd], check=True)
                times[mode] = time.perf_counter() - t
                figures["zs" if mode == "zotsink" else "bs"].append(a.lines / times[mode])
            ratios["stream"].append(times["cat"] / times["zotsink"])
        med = statistics.median
        print(f"append_record, 1 writer      {med(figures['z1']):10,.0f} rec/s  "
              f"bare loop {med(figures['b1']):10,.0f}  ratio {med(ratios['record']):.2f} "
              f"(target >= 0.8)")  # fmt: skip
        print(f"4 writers, 2 per mount       {med(figures['z4']):10,.0f} rec/s  "
              f"bare loop {med(figures['b4']):10,.0f}  ratio {med(ratios['writers']):.2f} "
              f"(target >= 0.8); every record counted back through a third mount")  # fmt: skip
        print(
            f"streaming {a.lines} lines     {med(figures['zs']):10,.0f} lines/s "
            f"cat >> out {med(figures['bs']):10,.0f}  ratio {med(ratios['stream']):.2f}"
        )
        print(f"# load at the end {os.getloadavg()[0]:.2f}")
        subprocess.run(["rm", "-rf", str(base[0])], check=False)
    finally:
        subprocess.run([str(GLUSTER), "down"], capture_output=True, check=False)


if __name__ == "__main__":
    main()
