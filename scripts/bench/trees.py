#!/usr/bin/env python3
"""Two zotsink trees measured turn about: is a change faster, slower, or within the spread?

    .venv/bin/python scripts/bench/trees.py --before ../old-checkout          # stream, record
    .venv/bin/python scripts/bench/trees.py --before DIR --rounds 5 stream sink

Each round runs ``bench.py FIGURES --root TREE`` for both trees, the order swapped every
round (A B, B A, ...), so a load that comes and goes falls on both. ``bench.py`` itself
alternates zotsink with the figure's baseline (``cat``, an inline loop), so each tree's
ratio to its baseline is measured in the same minute as that baseline. The table gives,
per figure, both trees' ratios and rates and their quotient (after / before) for every
round, the median of the quotients, and the load average before and after each run. It
prints numbers and never asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
THIS_TREE = HERE.parent.parent

#: Per figure: the figure's own ratio to its baseline, and its rate, as bench.py's JSON has them.
FIGURES = {
    "stream": ("ratio", ("zotsink", "records_per_s")),
    "record": ("inline_ratio", ("zotsink", "records_per_s")),
    "sink": ("ratio", ("zotsink", "records_per_s")),
    "stamp": ("ratio", ("zotsink", "records_per_s")),
}


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def one_run(tree: Path, figures: list[str], runs: int, quick: bool) -> dict[str, dict[str, float]]:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [sys.executable, str(HERE / "bench.py"), *figures, "--root", str(tree)]
        cmd += ["--json", f.name, "--retries", "0"]
        if runs:
            cmd += ["--runs", str(runs)]
        if quick:
            cmd.append("--quick")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(f.name) as j:
            data = json.load(j)
    out = {}
    for name in figures:
        r = data["figures"][name]
        ratio_key, (side, rate_key) = FIGURES[name]
        out[name] = {"ratio": r[ratio_key]["median"], "rate": r[side][rate_key]["median"]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("figures", nargs="*", default=["stream", "record"], help=", ".join(FIGURES))
    ap.add_argument("--before", type=Path, required=True, help="the tree to compare against")
    ap.add_argument("--after", type=Path, default=THIS_TREE, help="default: this tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=0, help="runs per side in bench.py")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: proves the harness runs")
    args = ap.parse_args()
    bad = [f for f in args.figures if f not in FIGURES]
    if bad:
        ap.error(f"unknown figure {bad[0]!r}: choose from {', '.join(FIGURES)}")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  before={trees['before']}  after={trees['after']}")
    print(f"# {' '.join([Path(sys.executable).name, *sys.argv])}")
    quotients: dict[str, list[float]] = {f: [] for f in args.figures}
    for rnd in range(args.rounds):
        order = ["before", "after"] if rnd % 2 == 0 else ["after", "before"]
        got: dict[str, dict[str, dict[str, float]]] = {}
        loads = []
        for side in order:
            before = load1()
            got[side] = one_run(trees[side], args.figures, args.runs, args.quick)
            loads.append(f"{side} {before}/{load1()}")
        for name in args.figures:
            b, a = got["before"][name], got["after"][name]
            q = a["ratio"] / b["ratio"]
            quotients[name].append(q)
            print(
                f"round {rnd + 1} {name:<7} before {b['ratio']:.3f} ({b['rate']:,.0f}/s)  "
                f"after {a['ratio']:.3f} ({a['rate']:,.0f}/s)  after/before {q:.3f}  "
                f"load {'; '.join(loads)}"
            )
        sys.stdout.flush()
    for name, qs in quotients.items():
        print(
            f"{name:<7} after/before: median {statistics.median(qs):.3f} "
            f"[{min(qs):.3f}-{max(qs):.3f}] over {len(qs)} rounds"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
