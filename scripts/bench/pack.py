#!/usr/bin/env python3
"""Benchmark ``pack``: N members from W writers into one shared tar, against the habit it
replaces: N tiny files written by the same W writers, then ``tar cf`` of them.

    python scripts/bench/pack.py [--members 27000] [--writers 8] [--rounds 5] [--dir DIR]

Members are 4-20 KiB of random bytes (the same sizes and bytes on both sides). Each round
runs both ways, alternating which goes first; the figures are wall seconds from starting
the writers until the archive is complete, per round, then medians and the ratio
(tiny files + tar / pack: above 1 means pack is faster). Both sides' results are checked:
N members in the archive, N files in the tar.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))


def _payloads(ident: int, count: int, seed: int) -> list[tuple[str, bytes]]:
    rnd = random.Random(seed * 1000 + ident)
    return [
        (f"w{ident}_{n:05d}.bin", rnd.randbytes(rnd.randint(4 * 1024, 20 * 1024)))
        for n in range(count)
    ]


def worker(kind: str, target: str, ident: int, count: int, seed: int) -> None:
    items = _payloads(ident, count, seed)
    if kind == "pack":
        from zotsink._pack.append import append_member

        for name, data in items:
            append_member(target, name, data)
    else:
        for name, data in items:
            with open(os.path.join(target, name), "wb") as f:
                f.write(data)


def _spawn(kind: str, target: Path, writers: int, total: int, seed: int) -> None:
    per = [total // writers + (1 if i < total % writers else 0) for i in range(writers)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", kind, str(target), str(i), str(n), str(seed)]
        )
        for i, n in enumerate(per)
    ]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"a {kind} writer failed with exit code {p.returncode}")


def run_pack(work: Path, writers: int, total: int, seed: int) -> float:
    archive = work / "pack.tar"
    t0 = time.perf_counter()
    _spawn("pack", archive, writers, total, seed)
    took = time.perf_counter() - t0
    from zotsink._pack.members import list_members

    got = len(list_members(archive))
    if got != total:
        raise SystemExit(f"pack: {got} members in the archive, not {total}")
    return took


def run_files(work: Path, writers: int, total: int, seed: int) -> float:
    tiny = work / "tiny"
    tiny.mkdir()
    t0 = time.perf_counter()
    _spawn("files", tiny, writers, total, seed)
    subprocess.run(["tar", "cf", str(work / "files.tar"), "-C", str(tiny), "."], check=True)
    took = time.perf_counter() - t0
    listing = subprocess.run(
        ["tar", "tf", str(work / "files.tar")], capture_output=True, check=True
    ).stdout
    got = sum(1 for line in listing.splitlines() if line.endswith(b".bin"))
    if got != total:
        raise SystemExit(f"tiny files: {got} files in the tar, not {total}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=27_000)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to work (default: a temporary dir)")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        kind, target, ident, count, seed = args.worker
        worker(kind, target, int(ident), int(count), int(seed))
        return
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"date:    {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}")
    print(f"load:    {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min)")
    print(f"{args.members} members of 4-20 KiB from {args.writers} writers, {args.rounds} rounds")
    print(f"{'round':>5} {'pack s':>9} {'files+tar s':>12} {'ratio':>7}")
    packs: list[float] = []
    files: list[float] = []
    for r in range(args.rounds):
        results = {}
        order = ("pack", "files") if r % 2 == 0 else ("files", "pack")
        for kind in order:
            work = Path(tempfile.mkdtemp(prefix=f"zotsink-bench-{kind}-", dir=args.dir))
            try:
                fn = run_pack if kind == "pack" else run_files
                results[kind] = fn(work, args.writers, args.members, seed=r)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        packs.append(results["pack"])
        files.append(results["files"])
        ratio = results["files"] / results["pack"]
        print(f"{r + 1:>5} {results['pack']:>9.2f} {results['files']:>12.2f} {ratio:>7.2f}")
    mp, mf = statistics.median(packs), statistics.median(files)
    print(f"{'median':>5} {mp:>9.2f} {mf:>12.2f} {mf / mp:>7.2f}")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
