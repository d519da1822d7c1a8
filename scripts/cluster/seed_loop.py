#!/usr/bin/env python3
"""The seed's work as one plain Python process would do it, with no zotsink at all.

    seed_loop.py TASKS OUT

Calls seed_step.image_stats on every image TASKS names, one after the other, and writes the
records as one TSV table OUT (header ``filename min max mean``). What a user who wrote a
good loop instead of a job array would compare with: one interpreter, Pillow imported
once, one file opened once. No ledger, no lock: a crash halfway leaves a partial table and
no record of what was done, and nothing runs on a second node.
"""

from __future__ import annotations

import sys

from seed_step import COLUMNS, image_stats  # beside this script, first on the path


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: seed_loop.py TASKS OUT", file=sys.stderr)
        return 2
    with open(argv[1]) as tasks, open(argv[2], "w") as out:
        out.write("\t".join(COLUMNS) + "\n")
        for line in tasks:
            if line.strip():
                record = image_stats(line)
                out.write("\t".join(record[c] for c in COLUMNS) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
