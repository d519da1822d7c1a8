#!/usr/bin/env python3
"""Benchmark ``zotsink collect`` against ``find | cat`` and Miller, and measure its memory.

Speed (default): makes N seed-style tiny files (``filename:<path> min:57 max:253
mean:82.02685546875``, no final newline, class subfolders) with make_zot_dir.py, warms the
page cache, then runs, alternately and R times each:

    zotsink collect DIR -o OUT.tsv
    find DIR -type f -exec cat {} + > OUT.cat
    find DIR -type f -exec mlr --idkvp --ifs space --ips colon --otsv cat {} + > OUT.mlr

and prints wall-time medians, min-max, CPU (user+sys) medians and the ratios of collect to
the others. Miller comes from the Debian package ``miller`` (``scripts/test`` installs it when
run as root); without ``mlr`` on PATH its row is skipped.

Memory (``--memory N``): makes N files (two writer processes), runs one collect as a child
process and reports its peak RSS from ``wait4``'s resource usage. ``--member MIB``: the same
for a .tar.gz holding one MIB MiB member (skipped unread over ``--max-file-size``).

    scripts/bench/collect.py                      # 27,000 files, 5 runs each
    scripts/bench/collect.py --json               # the same as JSON
    scripts/bench/collect.py --memory 1000000     # peak RSS of collecting a million files
    scripts/bench/collect.py --member 2048        # peak RSS with a 2 GiB archive member
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # scripts/
sys.path.insert(0, HERE)

import make_zot_dir  # noqa: E402  (a sibling script, not a package)

ZOTSINK = [sys.executable, "-m", "zotsink"]
MLR = ["mlr", "--idkvp", "--ifs", "space", "--ips", "colon", "--otsv", "cat"]


def _run(
    argv: list[str], stdout: str | None = None, env: dict[str, str] | None = None
) -> tuple[float, float, float]:
    """Run ``argv`` to completion: (wall s, user+sys CPU s, peak RSS MB) of the child."""
    with tempfile.TemporaryFile() as err, open(stdout or os.devnull, "wb") as out:
        t0 = time.perf_counter()
        # cwd /: `python -m` would put the working directory first on the path, and a
        # checkout there would be measured instead of the tree asked for
        p = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd="/")
        _pid, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode(errors="replace")
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} ... failed ({p.returncode}): {text.strip()}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def _commands(
    d: str, work: str, have_mlr: bool, root: str | None
) -> dict[str, tuple[list[str], str | None]]:
    find = ["find", d, "-type", "f", "-exec"]
    collect = [*ZOTSINK, "collect", d, "-o", os.path.join(work, "out.tsv"), "-q", "--no-progress"]
    cmds: dict[str, tuple[list[str], str | None]] = {
        "zotsink collect": (collect, None),
        "find -exec cat": ([*find, "cat", "{}", "+"], os.path.join(work, "out.cat")),
    }
    if root:  # the same command on another zotsink tree (env PYTHONPATH, set by speed())
        cmds["collect (--root)"] = (collect, None)
    if have_mlr:
        cmds["mlr (find -exec)"] = ([*find, *MLR, "{}", "+"], os.path.join(work, "out.mlr"))
    return cmds


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def _byte_compile(root: str | None = None) -> None:
    """Compile zotsink as scripts/env.sh does: the CLI's start-up is part of what is timed."""
    import zotsink

    pkg = os.path.join(root, "zotsink") if root else os.path.dirname(zotsink.__file__)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}
    argv = [sys.executable, "-m", "compileall", "-q", pkg]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)


def speed(args: argparse.Namespace, work: str) -> dict[str, Any]:
    _byte_compile()
    root = os.path.abspath(args.root) if args.root else None
    envs: dict[str, dict[str, str]] = {}
    if root:
        _byte_compile(root)
        envs["collect (--root)"] = {**os.environ, "PYTHONPATH": root}
    d = os.path.abspath(args.dir) if args.dir else os.path.join(work, "zot")
    if not args.dir:
        make_zot_dir.make(d, args.files, "seed")
    have_mlr = shutil.which("mlr") is not None
    cmds = _commands(d, work, have_mlr, root)
    out_tsv = os.path.join(work, "out.tsv")

    def fresh() -> None:
        if os.path.exists(out_tsv):
            os.remove(out_tsv)  # collect into a new OUT every time, as the others do

    for name, (argv, stdout) in cmds.items():  # warm the page cache and the byte-code
        fresh()
        _run(argv, stdout, envs.get(name))
    walls: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    load0 = os.getloadavg()[0]
    for _ in range(args.runs):
        for name, (argv, stdout) in cmds.items():  # alternate: load changes hit all alike
            if stdout is None:
                fresh()
            w, c, _rss = _run(argv, stdout, envs.get(name))
            walls[name].append(w)
            cpus[name].append(c)
    with open(out_tsv, "rb") as f:
        rows = sum(1 for _ in f) - 1
    res: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "files": args.files if not args.dir else None,
        "dir": args.dir,
        "rows": rows,
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "load": [round(load0, 1), round(os.getloadavg()[0], 1)],
        "miller": _version(["mlr", "--version"]) if have_mlr else None,
        "wall": {k: _stats(v) for k, v in walls.items()},
        "cpu": {k: _stats(v) for k, v in cpus.items()},
    }
    zc = res["wall"]["zotsink collect"]["median"]
    res["ratio_cat"] = zc / res["wall"]["find -exec cat"]["median"]
    if have_mlr:
        res["ratio_mlr"] = zc / res["wall"]["mlr (find -exec)"]["median"]
    if root:
        res["root"] = root
        res["ratio_root"] = zc / res["wall"]["collect (--root)"]["median"]
    return res


def _version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def memory(args: argparse.Namespace, work: str) -> dict[str, Any]:
    d = os.path.abspath(args.dir) if args.dir else os.path.join(work, "zot")
    t0 = time.perf_counter()
    if not args.dir:
        subprocess.run(
            [sys.executable, os.path.join(HERE, "make_zot_dir.py"), d, "-n", str(args.memory),
             "--jobs", "2"],
            check=True,
        )  # fmt: skip
    made = time.perf_counter() - t0
    out = os.path.join(work, "out.tsv")
    wall, cpu, rss = _run(
        [*ZOTSINK, "collect", d, "-o", out, "-q", "--no-progress", *args.collect_args]
    )
    with open(out, "rb") as f:
        rows = sum(1 for _ in f) - 1
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "files": args.memory if not args.dir else None,
        "dir": args.dir,
        "rows": rows,
        "generate_s": round(made, 1),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "files_per_s": round(rows / wall) if wall else None,
        "peak_rss_mb": round(rss, 1),
        "collect_args": args.collect_args,
    }


def member(args: argparse.Namespace, work: str) -> dict[str, Any]:
    """Peak RSS of collecting a .tar.gz that holds one big member (zeros) beside two tiny
    ones: the big one must be skipped unread (--max-file-size) with memory flat."""
    import io
    import tarfile

    size = args.member << 20
    arch = os.path.join(work, "big.tar.gz")
    t0 = time.perf_counter()
    with tarfile.open(arch, "w:gz", compresslevel=1) as t:
        for name, data in (("a.txt", b"x:1"), ("c.txt", b"x:3")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        ti = tarfile.TarInfo("b.txt")
        ti.size = size
        t.addfile(ti, _Zeros(size))  # type: ignore[arg-type]
    made = time.perf_counter() - t0
    out = os.path.join(work, "out.tsv")
    wall, cpu, rss = _run([*ZOTSINK, "collect", arch, "-o", out, "-q", *args.collect_args])
    with open(out, "rb") as f:
        rows = sum(1 for _ in f) - 1
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "member_mib": args.member,
        "archive_mb": round(os.path.getsize(arch) / 1e6, 1),
        "rows": rows,
        "generate_s": round(made, 1),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(rss, 1),
        "load": round(os.getloadavg()[0], 1),
        "collect_args": args.collect_args,
    }


class _Zeros:
    """A file-like object of ``n`` zero bytes, for tarfile.addfile (nothing held in memory)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def read(self, k: int = -1) -> bytes:
        k = self.left if k < 0 else min(k, self.left)
        self.left -= k
        return bytes(k)


def _print_speed(r: dict[str, Any]) -> None:
    print(
        f"{r['date']}: {r['rows']} rows from {r['files'] or r['dir']} files, {r['runs']} "
        f"alternating runs each, {r['cpus']} CPUs, load average {r['load'][0]} -> {r['load'][1]}"
    )
    if r["miller"] is None:
        print("Miller (`mlr`, Debian package miller) is not installed: its row is skipped")
    print(f"{'command':20s} {'wall median':>12s} {'wall min-max':>16s} {'CPU median':>11s}")
    for k, w in r["wall"].items():
        c = r["cpu"][k]
        print(f"{k:20s} {w['median']:11.3f}s {w['min']:7.3f}-{w['max']:.3f}s {c['median']:10.3f}s")
    print(f"collect / find -exec cat: {r['ratio_cat']:.2f}x (target <= 1.2x)")
    if "ratio_mlr" in r:
        print(f"collect / Miller:         {r['ratio_mlr']:.2f}x (target < 1x)")
    if "ratio_root" in r:
        print(f"collect / collect of {r['root']}: {r['ratio_root']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=27000, help="seed-style files (27000)")
    p.add_argument("--runs", type=int, default=5, help="timed runs of each command (5)")
    p.add_argument("--dir", help="use this existing directory instead of making one")
    p.add_argument("--memory", type=int, metavar="N", help="measure peak RSS on N files")
    p.add_argument(
        "--member", type=int, metavar="MIB", help="peak RSS of a .tar.gz with a MIB MiB member"
    )
    p.add_argument("--tmp", help="where to make the files (default $TMPDIR)")
    p.add_argument("--root", help="also time the zotsink tree in this directory, alternately")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("collect_args", nargs="*", help="extra collect options for --memory (after --)")
    args = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="zotsink-bench-", dir=args.tmp)
    try:
        if args.member:
            res = member(args, work)
        else:
            res = memory(args, work) if args.memory else speed(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=2))
    elif args.member:
        print(
            f"{res['date']}: a {res['archive_mb']} MB .tar.gz holding a {res['member_mib']} MiB "
            f"member and 2 tiny ones: {res['rows']} rows in {res['wall_s']} s (CPU "
            f"{res['cpu_s']} s), peak RSS {res['peak_rss_mb']} MB, load {res['load']}"
        )
    elif args.memory:
        print(
            f"{res['date']}: collected {res['rows']} rows from {res['files'] or res['dir']} "
            f"files in {res['wall_s']} s ({res['files_per_s']} files/s, CPU {res['cpu_s']} s); "
            f"peak RSS {res['peak_rss_mb']} MB"
            + (f" (files made in {res['generate_s']} s)" if not res["dir"] else "")
        )
    else:
        _print_speed(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
