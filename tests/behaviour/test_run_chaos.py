"""Chaos, seeded: what ``zotsink run`` promises holds when its troubles come together.

``--call`` functions that fork (the child returns or exits), print from threads that outlive
the call and return NumPy values; OUT rotated and cut by hand between runs; a run SIGKILLed
while its command tasks live on; resubmissions. Afterwards ``zotsink cat`` holds exactly
each task's record once, ``verify`` named each damage the moment after it, and no task ran
twice at once: every task holds a witness lock (an flock of its own file) while it runs, and
a second holder notes a file in ``double/``. Real processes; waits are on files, never sleeps.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.behaviour.waiting import wait_for
from tests.ledgers import ledger_rows

ZOTSINK = [sys.executable, "-m", "zotsink"]

# The --call function. Per line: holds the line's witness lock, sometimes forks a child
# that returns or exits (it must never answer), sometimes starts a thread that prints
# after the call returned, and returns NumPy values whose plain text is known.
FUNC = r"""
import fcntl, os, sys, threading
import numpy as np

def late(line):
    # the witness is free once the call returned (its own open holds it until then)
    fd = os.open(f"witness/{line}", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.close(fd)
    print("late from", line, flush=True)


def f(line):
    for d in ("witness", "ran", "double"):
        os.makedirs(d, exist_ok=True)
    fd = os.open(f"witness/{line}", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        open(f"double/{line}.{os.getpid()}", "w").close()
        raise
    open(f"ran/{line}.{os.getpid()}", "w").close()
    try:
        if "fork" in line and os.fork() == 0:
            if "exit" in line:
                sys.exit(0)
            return {"item": np.str_("child of " + line), "n": np.int64(-1), "half": 0.0}
        if "thread" in line:
            threading.Thread(target=late, args=(line,)).start()
        print("in the call", line)
        return {"item": np.str_(line), "n": np.int64(len(line)), "half": np.float64(len(line) / 2)}
    finally:
        os.close(fd)
"""

# The command task: the same witness; the lines in slow.txt wait for the file "release".
WITNESS = r"""
import fcntl, os, sys, time
line = sys.argv[1]
for d in ("witness", "ran", "double", "held"):
    os.makedirs(d, exist_ok=True)
fd = os.open(f"witness/{line}", os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    open(f"double/{line}.{os.getpid()}", "w").close()
    sys.exit(9)
open(f"ran/{line}.{os.getpid()}", "w").close()
if line in open("slow.txt").read().split():
    open(f"held/{line}", "w").close()
    while not os.path.exists("release"):
        time.sleep(0.01)
print(f"{line}\t{len(line)}\t{len(line) / 2}", flush=True)
"""
COLUMNS = ("--columns", "item,n,half")
CALL = ("--call", "f.py:f")
COMMAND = ("--", sys.executable, "witness.py")


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}


def zs(d: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ZOTSINK, *args], cwd=d, capture_output=True, env=env(), text=True, timeout=120
    )


def start(d: Path, *args: str) -> subprocess.Popen[str]:
    pipe = subprocess.PIPE
    return subprocess.Popen(
        [*ZOTSINK, *args], cwd=d, env=env(), stdout=pipe, stderr=pipe, text=True
    )


def expected(lines: list[str]) -> list[str]:
    return sorted(f"{ln}\t{len(ln)}\t{len(ln) / 2}" for ln in lines)


def committed(d: Path) -> list[str]:
    if not (d / "out.tsv").exists():
        return []
    r = zs(d, "cat", "out.tsv")
    assert r.returncode == 0, r.stderr
    return sorted(r.stdout.splitlines()[1:])


def ledger(d: Path) -> list[dict[str, str]]:
    return ledger_rows(d / "out.tsv.ledger")


def ok_keys(d: Path) -> Counter[str]:
    return Counter(r["key"] for r in ledger(d) if r["event"] == "end" and r["status"] == "ok")


def ran(d: Path) -> Counter[str]:
    if not (d / "ran").exists():
        return Counter()
    return Counter(p.name.rsplit(".", 1)[0] for p in (d / "ran").iterdir())


def no_double(d: Path) -> None:
    assert not (d / "double").exists() or not list((d / "double").iterdir())


def untrusted(d: Path) -> tuple[int, list[int], str]:
    r = zs(d, "verify", "out.tsv", "--json")
    report = json.loads(r.stdout) if r.stdout.strip() else {}
    nums = sorted(int(u["tasknum"]) for u in report.get("untrusted", []))
    return r.returncode, nums, r.stderr


def final_view(d: Path, lines: list[str], torn: tuple[int, bytes] | None = None) -> None:
    """The committed view holds each task's record once, as ``cat`` and ``cat -o`` give it;
    ``verify`` finds nothing but a ``torn`` line a cut by hand left (its number, its bytes)."""
    assert committed(d) == expected(lines)
    r = zs(d, "cat", "out.tsv", "-o", "x.jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(ln) for ln in (d / "x.jsonl").read_text().splitlines()]
    assert sorted(f"{r['item']}\t{r['n']}\t{r['half']}" for r in rows) == expected(lines)
    assert set(ok_keys(d)) == set(lines)  # every task has an ok row, none other does
    r = zs(d, "status", "tasks.txt", "out.tsv")
    assert r.returncode == 0 and f"{len(lines)} ok" in r.stderr, r.stderr
    code, nums, err = untrusted(d)
    assert nums == [], err
    if torn is not None and torn[1].count(b"\t") != 2:  # not a record of the header's shape
        assert code == 1 and "1 problem" in err and f"out.tsv:{torn[0]}: fields" in err, err
    else:
        assert code == 0, err
    no_double(d)


def until(cond: Callable[[], bool], what: str, limit: float = 120) -> None:
    """Poll ``cond`` (an event: a file, a process's end) until it holds."""
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"never {what}")
        time.sleep(0.005)


def make_lines(rng: random.Random, n: int) -> list[str]:
    lines = []
    for i in range(1, n + 1):
        traits = [t for t in ("fork", "exit", "thread", "slow") if rng.random() < 0.3]
        lines.append("-".join([f"t{i}", *traits]))
    return lines


def call_chaos(d: Path, rng: random.Random, lines: list[str]) -> None:
    """--call runs, OUT rotated then cut, resubmissions."""
    (d / "f.py").write_text(FUNC)
    first = lines[: len(lines) // 2]
    (d / "tasks.txt").write_text("".join(f"{ln}\n" for ln in first))
    r = zs(d, "run", "tasks.txt", "out.tsv", *CALL, *COLUMNS, "--jobs", "2")
    assert r.returncode == 0, r.stderr + (d / "out.tsv.log").read_text()
    assert committed(d) == expected(first)
    # rotated by hand: the rotated file is read with the ledger's help; OUT holds nothing
    os.rename(d / "out.tsv", d / "out.tsv.1")
    r = zs(d, "cat", "out.tsv.1", "--ledger", "out.tsv.ledger")
    assert r.returncode == 0 and sorted(r.stdout.splitlines()[1:]) == expected(first), r.stderr
    r = zs(d, "verify", "out.tsv")
    assert r.returncode == 1 and "out.tsv does not exist" in r.stderr, r.stderr
    # the whole list: the rotated tasks run again into the file OUT names now
    (d / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    r = zs(d, "run", "tasks.txt", "out.tsv", *CALL, *COLUMNS, "--jobs", "2")
    assert r.returncode == 0, r.stderr
    assert committed(d) == expected(lines)
    assert ran(d) == Counter({ln: 2 for ln in first} | {ln: 1 for ln in lines[len(first) :]})
    # cut by hand at a seeded place: verify names exactly the tasks whose records' block
    # (an end row's records together, under one CRC) crossed it
    out = d / "out.tsv"
    data = out.read_bytes()
    header = data.index(b"\n") + 1
    size = rng.randrange(header, len(data))
    os.truncate(out, size)
    kept = data[:size]
    torn = None if kept.endswith(b"\n") else (kept.count(b"\n") + 1, kept.rsplit(b"\n", 1)[1])
    num = {r["key"]: int(r["tasknum"]) for r in ledger(d) if r["event"] == "end"}
    cut = sorted(
        int(r["tasknum"])
        for r in ledger(d)
        if r["event"] == "end"
        and r["status"] == "ok"
        and r["out_ino"] == str(out.stat().st_ino)
        and sum(map(int, r["out_block"].split(":"))) > size
    )
    assert cut, (size, len(data))
    code, nums, err = untrusted(d)
    assert code == 1 and nums == cut, (nums, cut, err)
    r = zs(d, "cat", "out.tsv")
    assert r.returncode == 0 and f"{len(cut)} task(s)" in r.stderr, r.stderr
    assert sorted(r.stdout.splitlines()[1:]) == expected([ln for ln in lines if num[ln] not in cut])
    r = zs(d, "status", "tasks.txt", "out.tsv")
    assert r.returncode == 1 and f"{len(cut)} lost" in r.stderr, r.stderr
    before = ran(d)
    r = zs(d, "run", "tasks.txt", "out.tsv", *CALL, *COLUMNS, "--jobs", "2")
    assert r.returncode == 0, r.stderr
    again = ran(d) - before
    assert sorted(num[k] for k in again) == cut and set(again.values()) == {1}
    final_view(d, lines, torn)


def command_chaos(d: Path, lines: list[str]) -> None:
    """A command-task run SIGKILLed while its tasks live; resubmissions wait or leave them."""
    (d / "witness.py").write_text(WITNESS)
    (d / "tasks.txt").write_text("".join(f"{ln}\n" for ln in lines))
    slow = [ln for ln in lines if "slow" in ln][:2]
    assert slow
    (d / "slow.txt").write_text("".join(f"{ln}\n" for ln in slow))
    doomed = start(d, "run", "tasks.txt", "out.tsv", *COLUMNS, "--jobs", "3", *COMMAND)
    try:
        wait_for(lambda: all((d / "held" / s).exists() for s in slow), doomed, "held the slow")
        doomed.send_signal(signal.SIGKILL)
    finally:
        doomed.kill()
        doomed.wait()
    orphans = [int(p.name.rsplit(".", 1)[1]) for p in (d / "ran").iterdir()]
    # the orphans carry the killed run's mark: while they live, a resubmission runs every
    # task that run did not claim, waits for those it did, and never starts the orphans'
    claimed = {r["key"] for r in ledger(d) if r["event"] == "start"}
    assert set(slow) <= claimed
    rest = set(expected([ln for ln in lines if ln not in claimed]))
    again = start(d, "run", "tasks.txt", "out.tsv", *COLUMNS, "--jobs", "2", *COMMAND)
    try:
        until(lambda: again.poll() is not None or set(committed(d)) >= rest, "ran the rest")
    except BaseException:
        (d / "release").touch()
        raise
    assert all(ran(d)[s] == 1 for s in slow)
    no_double(d)
    (d / "release").touch()  # the orphans end; their records have nowhere to go
    until(lambda: not any(os.path.exists(f"/proc/{p}") for p in orphans), "orphans ended")
    _out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    if committed(d) != expected(lines):  # it left the killed run's tasks: run them now
        r = zs(d, "run", "tasks.txt", "out.tsv", *COLUMNS, *COMMAND)
        assert r.returncode == 0, r.stderr
    # a task the killed run had started may have ended after it and run again; none more
    assert set(ran(d)) == set(lines) and max(ran(d).values()) <= 2
    final_view(d, lines)


@pytest.mark.parametrize("seed", [11, 23, 37])
def test_chaos_leaves_each_task_once_and_never_runs_one_twice_at_once(
    tmp_path: Path, seed: int
) -> None:
    pytest.importorskip("numpy", reason="the --call function returns NumPy values")
    rng = random.Random(seed)
    lines = make_lines(rng, 30)
    if not any("slow" in ln for ln in lines):
        lines[-1] += "-slow"
    (tmp_path / "call").mkdir()
    (tmp_path / "cmd").mkdir()
    call_chaos(tmp_path / "call", rng, lines)
    command_chaos(tmp_path / "cmd", lines)


def test_status_and_missing_count_a_rotated_away_out_s_tasks_lost(tmp_path: Path) -> None:
    # docs/run.md "Identity rules": when OUT was renamed, status and missing --ledger count
    # its tasks lost, as the next run (which runs them again) does, also while no file of
    # OUT's name exists yet (rotated, not yet recreated).
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    r = zs(tmp_path, "run", "tasks.txt", "out.tsv", "--columns", "x", "--", "echo")
    assert r.returncode == 0, r.stderr
    os.rename(tmp_path / "out.tsv", tmp_path / "out.tsv.1")
    r = zs(tmp_path, "missing", "tasks.txt", "--ledger", "out.tsv.ledger")
    missing = r.stdout
    r = zs(tmp_path, "status", "tasks.txt", "out.tsv")
    assert (r.returncode, missing) == (1, "a\nb\n") and "2 lost" in r.stderr, (missing, r.stderr)


def test_a_ledger_of_its_own_name_is_checked_against_the_out_its_runs_recorded(
    tmp_path: Path,
) -> None:
    """With --ledger NAME, nothing in the ledger's name says which file is OUT: the runs
    record it (relative to the ledger). A rotated OUT's tasks are lost; OUT and ledger moved
    together into another directory are still ok."""
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    r = zs(tmp_path, "run", "tasks.txt", "out.tsv", "--ledger", "book.txt", "--", "echo")
    assert r.returncode == 0, r.stderr
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("out.tsv", "book.txt", "tasks.txt"):
        os.link(tmp_path / name, moved / name)
    r = zs(moved, "missing", "tasks.txt", "--ledger", "book.txt")
    assert (r.returncode, r.stdout) == (0, ""), r.stderr
    r = zs(moved, "status", "tasks.txt", "--ledger", "book.txt")
    assert r.returncode == 0 and "3 ok" in r.stderr, r.stderr
    os.rename(tmp_path / "out.tsv", tmp_path / "out.tsv.1")
    r = zs(tmp_path, "missing", "tasks.txt", "--ledger", "book.txt")
    assert (r.returncode, r.stdout) == (0, "a\nb\nc\n"), r.stderr
    r = zs(tmp_path, "run", "tasks.txt", "out.tsv", "--ledger", "book.txt", "--", "echo")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.tsv").read_text() == "a\nb\nc\n"
    r = zs(tmp_path, "missing", "tasks.txt", "--ledger", "book.txt")
    assert (r.returncode, r.stdout) == (0, ""), r.stderr
