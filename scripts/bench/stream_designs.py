#!/usr/bin/env python3
"""Small stand-alone consumers that bound what the stream engine's design can reach.

    .venv/bin/python scripts/bench/stream_designs.py --lines 10000000 --runs 7 --dir /dev/shm

Each design is a consumer of about 30 lines with the engine's pipe handling (enlarged pipe,
one reused buffer, whole-line batches of about 1 MiB, flock + stat + write + unlock per
batch) and nothing else: no signals, spills, rejects or header. They answer one question
each: with the work that ``--stamp`` or ``--columns`` must do per byte, how fast can ONE
process go if the write of one batch overlaps the work on the next (a second thread)?

    plain        no work: the floor for the other rows
    stamp        one copy + ``replace`` per batch, then the write (what the engine does)
    stamp-thread the same, with the write in a second thread (two batches in flight)
    tsv          one ``translate`` per batch checks every line's field count, then write
    tsv-thread   the same, with the write in a second thread

Every row runs alternately with its baseline (A B, B A, ...) in the same invocation and
prints throughput and the per-pair ratio (median, min-max): the stamp rows against
``plain`` (the engine's goal compares ``--stamp`` with plain streaming), the tsv rows
against ``cat >> out``. Nothing is
asserted: the script prints numbers.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stream import make_input, pipeline

COMMON = r"""
import ctypes, fcntl, os, sys
# As the engine's pad_heap(): keep freed batches in the heap (no page faults per batch).
libc = ctypes.CDLL(None)
libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: batches of a few MiB come from the heap
libc.mallopt(-2, 16 << 20)  # M_TOP_PAD: and the top of the heap is not given back
try:
    fcntl.fcntl(0, 1031, 1 << 20)  # F_SETPIPE_SZ
except OSError:
    pass
path = sys.argv[1]
out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def put(data):
    fcntl.flock(out, fcntl.LOCK_EX)
    os.stat(path)
    os.write(out, data)
    fcntl.flock(out, fcntl.LOCK_UN)
emit, done = put, lambda: None
if THREAD:
    import queue, threading
    jobs, back = queue.SimpleQueue(), queue.SimpleQueue()
    def work():
        while (job := jobs.get()) is not None:
            put(job)
            back.put(None)
    t = threading.Thread(target=work)
    t.start()
    busy = [0]
    def emit(data):
        if busy[0] == 2:
            back.get()
            busy[0] -= 1
        jobs.put(data)
        busy[0] += 1
    def done():
        jobs.put(None)
        t.join()
STAMP = b"\n2026-11-23T05:10:11.123456Z\tnodename01\t\t\t"
ONLY = bytes(b for b in range(256) if b not in (9, 10))
buf = bytearray(4 << 20)
view = memoryview(buf)
start = end = 0
while True:
    if len(buf) - end < 1 << 16:
        buf[: end - start] = buf[start:end]
        end -= start
        start = 0
    n = os.readv(0, [view[end:]])
    if not n:
        break
    end += n
    cut = buf.rfind(b"\n", start, end) + 1
    if cut <= start:
        continue
    WORK
    start = cut
done()
"""

WORK = {
    "plain": "put(view[start:cut])",
    "stamp": (
        "stamped = (b'\\n' + view[start:cut]).replace(b'\\n', STAMP)\n"
        "    emit(memoryview(stamped)[1 : -len(STAMP) + 1])"
    ),
    "tsv": (
        "piece = bytes(view[start:cut]); marks = piece.translate(None, ONLY)\n"
        "    assert marks == b'\\t\\t\\n' * (len(marks) // 3), 'a wrong field count'\n"
        "    emit(piece)"
    ),
}


def consumer(design: str) -> list[str]:
    base, _, thread = design.partition("-")
    code = COMMON.replace("THREAD", str(bool(thread))).replace("WORK", WORK[base])
    return [sys.executable, "-c", code]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lines", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = ap.parse_args()
    print(f"# {' '.join([os.path.basename(sys.argv[0]), *sys.argv[1:]])}")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} on {platform.node()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = Path(tmp)
        src = make_input(d, args.lines, "tsv")
        out = d / "out.txt"
        env = dict(os.environ)
        # goal 2 compares --stamp with plain streaming; goal 1 (tsv) with `cat >> out`
        sides = {"stamp": ("plain", ["plain"]), "tsv": ("cat", None)}
        for design in ("stamp", "stamp-thread", "tsv", "tsv-thread"):
            label, base = sides[design.partition("-")[0]]
            times: tuple[list[float], list[float]] = ([], [])
            for i in range(args.runs):
                for k in (0, 1) if i % 2 == 0 else (1, 0):
                    cmd = consumer(design) if k == 0 else base and consumer(base[0])
                    times[k].append(pipeline(src, cmd, out, env)[0])
            ratios = [b / a for a, b in zip(*times)]
            a, b = (args.lines / statistics.median(t) / 1e6 for t in times)
            print(
                f"{design:13s} {a:6.2f} M lines/s   {label:5s} {b:6.2f} M lines/s   ratio "
                f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
