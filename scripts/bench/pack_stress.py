#!/usr/bin/env python3
"""pack appends from several clients of one network filesystem: false damages per 10,000.

    .venv/bin/python scripts/bench/pack_stress.py DIR [DIR...] [--writers 2] [--archives 40]
        [--per-archive 2] [--seed 1] [--json]

Each DIR is the same directory seen through another client mount (a "node"), such as
/mnt/zotsink-g1/stress and /mnt/zotsink-g2/stress on the GlusterFS test volume. ``--writers``
processes per DIR walk the same ``--archives`` small tars in the same order, each appending
``--per-archive`` members of 200-3,000 bytes to each, with pauses of up to 50 ms: many small
archives appended to by every client at once, the load under which a client reads an
archive from content it cached before another client appended.

Reports the appends, those refused as "damaged" (the archive was whole: a false damage),
other errors, and then checks through the first DIR that every archive verifies clean and
indexes exactly the members whose append succeeded (nothing lost, nothing extra). Exit 0
when all holds, 1 otherwise. It prints numbers and never asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from zotsink._pack.index import read_index  # noqa: E402
from zotsink._pack.verify import verify_archive  # noqa: E402

# One writer: argv DIR ID ARCHIVES PER SEED; prints one JSON line of what it saw.
WRITER = r"""
import json, os, random, sys, time, warnings
from zotsink import append_member
from zotsink.errors import ZotsinkError
warnings.simplefilter("ignore")  # a rebuilt index is noted, not a failure here
d, wid, archives, per, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
rnd = random.Random(f"{seed}-{wid}")
acked, damaged, other, said = [], 0, 0, []
for a in range(archives):
    path = os.path.join(d, f"a{a:04d}.tar")
    for i in range(per):
        name = f"w{wid}/m{i}"
        try:
            append_member(path, name, rnd.randbytes(rnd.randint(200, 3000)))
            acked.append([os.path.basename(path), name])
        except ZotsinkError as e:
            if "is damaged at" in str(e):
                damaged += 1
            else:
                other += 1
            said.append(str(e)[:400])
        time.sleep(rnd.random() * 0.05)
print(json.dumps({"acked": acked, "damaged": damaged, "other": other, "said": said[:3]}))
"""


def _check(archive: Path, want: set[str]) -> tuple[int, set[str]]:
    """verify's problems and the indexed names, as this client sees them once it has caught
    up with the other clients' last appends (it may read what it cached for a moment)."""
    deadline = time.monotonic() + 10
    while True:
        report = verify_archive(archive)
        names = {r.name for r in read_index(f"{archive}.idx")[0]}
        if (not report.problems and names == want) or time.monotonic() > deadline:
            return len(report.problems), names
        time.sleep(0.2)


def stress(dirs: list[Path], writers: int, archives: int, per: int, seed: int) -> dict:
    """Run the writers; their totals and the check of every archive through ``dirs[0]``."""
    dirs[0].mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 30
    while not all(d.is_dir() for d in dirs):  # the other clients learn of the directory
        if time.monotonic() > deadline:
            raise SystemExit(f"{[str(d) for d in dirs]}: not one directory seen by every client")
        time.sleep(0.1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(d), f"{n}{k}", str(archives), str(per), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for n, d in enumerate(dirs)
        for k in range(writers)
    ]
    got = []
    for p in procs:
        out, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise SystemExit(f"a writer failed (exit {p.returncode}): {err.decode()[-2000:]}")
        got.append(json.loads(out))
    took = time.monotonic() - t0

    acked: dict[str, set[str]] = {}
    for g in got:
        for archive, name in g["acked"]:
            acked.setdefault(archive, set()).add(name)
    lost = extra = problems = 0
    for a in range(archives):
        archive = dirs[0] / f"a{a:04d}.tar"
        if not archive.exists():
            lost += len(acked.get(archive.name, ()))
            continue
        want = acked.get(archive.name, set())
        found, names = _check(archive, want)
        problems += found
        lost += len(want - names)
        extra += len(names - want)
    appends = len(dirs) * writers * archives * per
    damaged = sum(g["damaged"] for g in got)
    return {
        "appends": appends,
        "acked": sum(len(v) for v in acked.values()),
        "damaged": damaged,
        "damaged_per_10000": round(damaged * 10000 / appends, 1),
        "other": sum(g["other"] for g in got),
        "lost": lost,
        "extra": extra,
        "verify_problems": problems,
        "seconds": round(took, 1),
        "load1": os.getloadavg()[0],
        "said": [s for g in got for s in g["said"]][:5],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="one directory, through each client")
    ap.add_argument("--writers", type=int, default=2, help="writer processes per DIR")
    ap.add_argument("--archives", type=int, default=40)
    ap.add_argument("--per-archive", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = ap.parse_args()
    r = stress(args.dirs, args.writers, args.archives, args.per_archive, args.seed)
    if args.json:
        print(json.dumps(r))
    else:
        print(
            f"{r['appends']} appends over {len(args.dirs)} clients in {r['seconds']} s "
            f"(load {r['load1']:.2f}): {r['damaged']} refused as damaged "
            f"({r['damaged_per_10000']} per 10,000), {r['other']} other errors, "
            f"{r['lost']} acknowledged members missing, {r['extra']} unexpected, "
            f"{r['verify_problems']} verify problems"
        )
        for s in r["said"]:
            print("  " + s)
    ok = r["damaged"] == r["other"] == r["lost"] == r["extra"] == r["verify_problems"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
