#!/usr/bin/env python3
"""The seed workload at its real scale, on the project's test cluster (root only).

N EuroSAT-like 64x64 images (default 27,000), one ``filename:... min:... max:... mean:...``
record each, processed by a Slurm array of N/100 elements spread over the three nodes, two
ways, one after the other, each timed from sbatch to a finished table:

  zotsink   ``zotsink run --chunk 100 --jobs auto``: one table, one ledger, one log
  habit     the seed's way: each image's record into its own tiny file on the shared
            volume, then ``zotsink collect`` of the directory into one table

Brings GlusterFS and Slurm up with scripts/cluster/ and takes them down again. Prints the
wall times, the ratio and the file counts left beside each table.

    .venv/bin/python scripts/bench/seed.py              # 27,000 images
    .venv/bin/python scripts/bench/seed.py --images 2700
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster"
CHUNK = 100


def sh(*argv: str, env: dict[str, str] | None = None, timeout: float = 7200) -> str:
    res = subprocess.run(
        list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if res.returncode:
        sys.exit(f"bench: {' '.join(argv[:3])} exited {res.returncode}: {res.stderr[-2000:]}")
    return res.stdout


def array(env: dict[str, str], n: int, job: str, workdir: Path) -> float:
    t0 = time.monotonic()
    sh(
        "sbatch", "--wait", "--parsable", f"--array=1-{n // CHUNK}", f"--chdir={workdir}",
        "--output=/dev/null", f"--wrap={job}", env=env,
    )  # fmt: skip
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=27000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: needs root (it brings up GlusterFS and Slurm)")
    zotsink = f"{sys.executable} -m zotsink"
    proc = f"{sys.executable} {CLUSTER / 'seed_process.py'}"
    mounts = sh(str(CLUSTER / "gluster.sh"), "up").split()
    try:
        conf = re.search(r"^SLURM_CONF=(.+)$", sh(str(CLUSTER / "slurm.sh"), "up"), re.M)
        assert conf, "slurm.sh up printed no SLURM_CONF"
        env = dict(os.environ, SLURM_CONF=conf[1].strip())
        work = Path(sh("mktemp", "-d", "/var/tmp/zotsink-seed.XXXXXX").strip())
        try:
            sh(sys.executable, str(CLUSTER / "seed_images.py"), str(work / "images"),
               str(args.images))  # fmt: skip
            tasks = work / "images" / "tasks.txt"
            shared = Path(mounts[0]) / f"seed-{os.getpid()}"
            (shared / "run").mkdir(parents=True)
            (shared / "habit" / "files").mkdir(parents=True)
            load = os.getloadavg()[0]
            print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                  f"{args.images} images, load {load:.2f}")  # fmt: skip
            out = shared / "run" / "stats.tsv"
            t_run = array(
                env, args.images,
                f"{zotsink} run {tasks} {out} --chunk {CHUNK} --jobs auto --kv"
                f" --columns filename,min,max,mean -- {proc} {{}}",
                work,
            )  # fmt: skip
            # The seed's habit: one tiny file per image, then one merge.
            habit = (
                f"start=$(( (SLURM_ARRAY_TASK_ID - 1) * {CHUNK} + 1 )); "
                f"sed -n \"${{start}},$(( start + {CHUNK - 1} ))p\" {tasks} | "
                f"while read -r img; do {proc} \"$img\""
                f" > {shared}/habit/files/$(basename \"$img\").txt; done"
            )  # fmt: skip
            t_files = array(env, args.images, habit, work)
            t0 = time.monotonic()
            sh(*zotsink.split(), "collect", str(shared / "habit" / "files"), "-o",
               str(shared / "habit" / "stats.tsv"), "-q")  # fmt: skip
            t_collect = time.monotonic() - t0
            rows = [len(p.read_text().splitlines()) - 1 for p in
                    (out, shared / "habit" / "stats.tsv")]  # fmt: skip
            files = [len(list((shared / "run").iterdir())),
                     len(list((shared / "habit" / "files").iterdir()))]  # fmt: skip
            print(f"zotsink run   {t_run:8.1f} s   rows {rows[0]}   files beside it {files[0]}")
            print(f"tiny files    {t_files:8.1f} s + collect {t_collect:.1f} s = "
                  f"{t_files + t_collect:.1f} s   rows {rows[1]}   files {files[1]}")  # fmt: skip
            print(f"ratio (habit / zotsink run): {(t_files + t_collect) / t_run:.2f}; "
                  f"load at the end {os.getloadavg()[0]:.2f}")  # fmt: skip
            shutil.rmtree(shared, ignore_errors=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            sh(str(CLUSTER / "slurm.sh"), "down")
    finally:
        sh(str(CLUSTER / "gluster.sh"), "down")


if __name__ == "__main__":
    main()
