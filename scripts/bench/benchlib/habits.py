"""The habits zotsink replaces: ``tinyfiles`` (one file per record) and ``startup``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import (
    CHILD_ENV,
    CODE,
    Ctx,
    _encoded,
    _rows,
    alternate,
    med,
    pair_ratios,
    unlink,
    zotsink_cmd,
)


def fig_tinyfiles(ctx: Ctx) -> dict[str, Any]:
    from zotsink import Sink, append_record

    n = ctx.size("tiny")
    rows = _rows(n)
    enc = _encoded(rows)
    tiny = ctx.d / "tiny"

    def habit(i: int) -> dict[str, float]:
        # Each record its own file (what each task of a job array does), then the merge
        # into one table and the clean-up that the habit leaves for later.
        shutil.rmtree(tiny, ignore_errors=True)
        tiny.mkdir()
        table = ctx.d / "tiny-table.tsv"
        unlink(table)
        t0 = time.perf_counter()
        for j, b in enumerate(enc):
            fd = os.open(tiny / f"task_{j}.tsv", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            os.write(fd, b)
            os.close(fd)
        t1 = time.perf_counter()
        with open(table, "wb") as out:
            for name in sorted(os.listdir(tiny)):
                with open(tiny / name, "rb") as f:
                    out.write(f.read())
        t2 = time.perf_counter()
        shutil.rmtree(tiny)
        t3 = time.perf_counter()
        unlink(table)
        return {"create": t1 - t0, "merge": t2 - t1, "remove": t3 - t2, "total": t3 - t0}

    def zs(i: int) -> dict[str, float]:
        p1, p2 = ctx.d / f"tiny-ar-{i}.tsv", ctx.d / f"tiny-sink-{i}.tsv"
        unlink(p1, p2)
        t0 = time.perf_counter()
        for r in rows:
            append_record(p1, r)
        t1 = time.perf_counter()
        with Sink(p2) as s:
            for r in rows:
                s.write(r)
        t2 = time.perf_counter()
        unlink(p1, p2)
        return {"append_record": t1 - t0, "sink": t2 - t1}

    z, h = alternate(ctx.runs("tinyfiles"), zs, habit)
    sink_ratio = pair_ratios([x["total"] for x in h], [x["sink"] for x in z])
    ar_ratio = pair_ratios([x["total"] for x in h], [x["append_record"] for x in z])
    return {
        "title": f"{n:,} records into one table: zotsink vs one tiny file per record",
        "records": n,
        "unit": "s",
        "zotsink": {
            "name": "Sink.write per record (one program, batched)",
            "seconds": med([x["sink"] for x in z]),
            "append_record_seconds": med([x["append_record"] for x in z]),
        },
        "baseline": {
            "name": "one tiny file per record, then merge and remove",
            "seconds": med([x["total"] for x in h]),
            "phases": {k: med([x[k] for x in h]) for k in ("create", "merge", "remove")},
        },
        "ratio": sink_ratio,  # how many times faster
        "append_record_ratio": ar_ratio,
        "create_only_ratio_append_record": pair_ratios(
            [x["create"] for x in h], [x["append_record"] for x in z]
        ),
        "target": "zotsink >= 10x faster",
        "met": sink_ratio["median"] >= 10.0,
    }


def fig_startup(ctx: Ctx) -> dict[str, Any]:
    import click

    # The user's first run writes the byte code; time the runs after it, as users see them.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            str(CODE / "zotsink"),
            str(Path(click.__file__).parent),
        ],
        check=True,
        env=CHILD_ENV,
        stdout=subprocess.DEVNULL,
    )
    out = ctx.d / "startup.out"
    py = sys.executable
    perl = (
        'open(my $f, ">>", $ARGV[0]) or die $!; flock($f, 2) or die $!; '
        'print $f "r\\n"; close($f) or die $!'
    )
    cmds: dict[str, list[str]] = {
        "echo r | zotsink out": [*zotsink_cmd(), str(out)],
        "python -c pass": [py, "-c", "pass"],
        "python -c 'import zotsink'": [py, "-c", "import zotsink"],
        "python -c 'import click'": [py, "-c", "import click"],
        "flock(1): flock out sh -c 'echo r >> out'": [
            "flock",
            str(out),
            "sh",
            "-c",
            'echo r >> "$0"',
            str(out),
        ],
        "perl flock writer": ["perl", "-e", perl, str(out)],
    }
    have = {k: v for k, v in cmds.items() if shutil.which(v[0]) or os.path.exists(v[0])}
    times: dict[str, list[float]] = {k: [] for k in have}
    for i in range(ctx.size("spawns") * ctx.runs("startup")):
        order = list(have) if i % 2 == 0 else list(reversed(have))
        for k in order:
            t0 = time.perf_counter()
            subprocess.run(have[k], input=b"r\n", env=CHILD_ENV, check=True)
            times[k].append(time.perf_counter() - t0)
    with open(out, "rb") as f:
        n_lines = sum(1 for _ in f)
    unlink(out)
    zs = times["echo r | zotsink out"]
    # An absolute figure means little on a shared machine: the target is relative to
    # `python -c 'import click'`, run alternately with zotsink in the same loop.
    click_only = times["python -c 'import click'"]
    ratio = pair_ratios(zs, click_only)
    return {
        "title": "one-record CLI run, per process",
        "unit": "ms",
        "zotsink": {"name": "echo r | zotsink out", "ms": med([t * 1e3 for t in zs])},
        "baseline": {
            "name": "python -c 'import click'",
            "ms": med([t * 1e3 for t in click_only]),
        },
        "baselines": {k: med([t * 1e3 for t in v]) for k, v in times.items()},
        "ratio": ratio,
        "lines_written": n_lines,
        "target": "zotsink / python -c 'import click' <= 1.25",
        "met": ratio["median"] <= 1.25,
    }
