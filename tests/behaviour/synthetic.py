"""A large run's task list and ledger, written directly in the columns of a format 1 ledger
(what zotsink 0.1 wrote, which this release reads as it is): what
``zotsink run`` would leave after an array of many elements, made in seconds.

``write_run(directory)`` simulates ``elements`` array elements of one job (spread over
``hosts`` hosts), each running its chunk of the task list ``jobs`` at a time: every task a
start row when its slot takes it and an end row when it ends, its seconds its own time.
Some tasks fail (exit 1) or are killed. The last element dies in the middle of its chunk:
its tasks in flight keep their start rows and no end (their run's last row is the last one
it wrote), and element 1 runs them again, and the rest of the dead element's chunk, after
its own: the dead element's attempts in flight are ``lost``. The log holds each failed
attempt's stderr, a traceback that ends one of a few ways (several failure groups).
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from zotsink._ledger.v1 import COLUMNS as LEDGER_COLUMNS

#: The run's first moment: 2026-11-24 10:00:00 UTC.
T0 = 1795514400.0
JOB = "5000"
#: How failed tasks end: each a group of its own.
FAILURES = ("ValueError: no pixels in", "OSError: cannot read", "KeyError: no size for")


class Synthetic(NamedTuple):
    tasks: Path
    ledger: Path
    elements: list[str]  # JOB[INDEX]
    jobs: int
    lost: dict[int, float]  # a lost attempt's task -> the time of its run's last row
    log: Path
    first_start: float
    last_end: float


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_run(
    directory: Path,
    *,
    tasks: int = 100_000,
    elements: int = 64,
    jobs: int = 2,
    hosts: int = 8,
    seed: int = 7,
) -> Synthetic:
    rng = random.Random(seed)
    task_path = directory / "tasks.txt"
    task_path.write_text("".join(f"item{n:07d}\n" for n in range(1, tasks + 1)))
    chunk = -(-tasks // elements)
    rows: list[tuple[float, int, str]] = []  # (time, order, row text)
    # the slots of each element: (free from, its index), elements starting one by one
    queues: dict[int, list[int]] = {
        e: list(range((e - 1) * chunk + 1, min(e * chunk, tasks) + 1))
        for e in range(1, elements + 1)
    }
    dead = elements
    lost: dict[int, float] = {}
    attempts: dict[int, int] = {}
    log: list[str] = []

    def element_run(e: int, numbers: list[int], begin: float) -> tuple[list, float]:
        host = f"node{(e - 1) % hosts + 1:02d}"
        pid = str(20000 + e)
        slots = [begin + 0.001 * k for k in range(jobs)]
        out = []
        for n in numbers:
            k = min(range(jobs), key=slots.__getitem__)
            start = slots[k] + 0.002
            secs = round(rng.lognormvariate(0.0, 0.5) * 1.5, 3)
            end = start + secs
            slots[k] = end
            attempts[n] = attempts.get(n, 0) + 1
            roll = rng.random()
            status, code, sig = ("ok", "0", "")
            if roll < 0.01:
                status, code, sig = ("failed", "1", "")
            elif roll < 0.012:
                status, code, sig = ("killed", "", "9")
            common = [str(n), f"item{n:07d}", str(attempts[n]), JOB, str(e), host, pid]
            if status == "failed":
                head = f"{n}.{attempts[n]}\t"
                log.append(head + "Traceback (most recent call last):\n")
                log.append(head + '  File "measure.py", line 7, in measure\n')
                log.append(head + "    image = load(path)\n")
                log.append(head + f"{FAILURES[n % len(FAILURES)]}: item{n:07d}\n")
            out.append((start, ["start", stamp(start), *common] + [""] * 7))
            out.append(
                (
                    end,
                    ["end", stamp(end), *common, status, code, sig, f"{secs:.3f}", "1", "20", ""],
                )
            )
        return out, max(slots)

    made: dict[int, list] = {}
    ends: dict[int, float] = {}
    for e in range(1, elements + 1):
        made[e], ends[e] = element_run(e, queues[e], T0 + 0.5 * (e - 1))
    # the dead element: every row after the moment it died is gone
    rows_dead = sorted(made[dead], key=lambda r: r[0])
    death = rows_dead[len(rows_dead) * 2 // 3][0] + 0.0005  # the moment it died
    kept = [r for r in rows_dead if r[0] <= death]
    ended = {int(r[1][2]) for r in kept if r[1][0] == "end"}
    in_flight = [int(r[1][2]) for r in kept if r[1][0] == "start" and int(r[1][2]) not in ended]
    last_row = max(r[0] for r in kept)
    for n in in_flight:
        lost[n] = last_row
    made[dead] = kept
    again = in_flight + [n for n in queues[dead] if n not in ended and n not in in_flight]
    more, _ = element_run(1, again, max(ends[1], death) + 0.01)
    made[1] += more
    for e, element_rows in made.items():
        for t, fields in element_rows:
            rows.append((t, e, "\t".join(fields) + "\n"))
    rows.sort(key=lambda r: (r[0], r[1]))
    last_end = max(t for t, _, text in rows if text.startswith("end"))
    first_start = rows[0][0]
    ledger = directory / "out.tsv.ledger"
    with open(ledger, "w") as f:
        f.write("\t".join(LEDGER_COLUMNS) + "\n")
        f.writelines(text for _, _, text in rows)
    log_path = directory / "out.tsv.log"
    log_path.write_text("".join(log))
    return Synthetic(
        tasks=task_path,
        ledger=ledger,
        elements=[f"{JOB}[{e}]" for e in range(1, elements + 1)],
        jobs=jobs,
        lost=lost,
        log=log_path,
        first_start=first_start,
        last_end=last_end,
    )
