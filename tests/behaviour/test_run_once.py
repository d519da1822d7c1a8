"""``zotsink run`` as a transaction per task: whatever retries, resubmissions, crashes and
runs at once happened, the readers of OUT see each task's records exactly once.

Every attempt's records reach OUT in one piece when it ends, and its ``end`` row names
that piece; an ``ok`` row claims it. Tasks say what they did in files of their own (the
test's, not zotsink's), so that the tests can count how often each really ran.
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

import zotsink as zs
from tests.ledgers import ledger_rows

Run = Callable[..., subprocess.CompletedProcess[bytes]]

# Prints three records, notes each start in ran/<task>.<pid>; task lines "fail" fail on
# their first attempt after printing; argv[1] is a pause, so that tasks overlap.
TASK = r"""
import os, sys, time

pause, item = float(sys.argv[1]), sys.argv[2]
os.makedirs("ran", exist_ok=True)
open(f"ran/{item}.{os.getpid()}", "w").close()
for i in range(3):
    print(f"{item}\t{i}", flush=True)
    time.sleep(pause / 3)
if item.startswith("fail") and os.environ["ZOTSINK_ATTEMPT"] == "1":
    sys.exit(3)
"""


def expected(items: list[str]) -> list[str]:
    return sorted(f"{item}\t{i}" for item in items for i in range(3))


def committed(d: Path, out: str = "out.tsv") -> list[str]:
    r = subprocess.run(
        [*ZOTSINK, "cat", out], cwd=d, capture_output=True, env=_env(), check=True, timeout=60
    )
    return sorted(r.stdout.decode().splitlines())


ZOTSINK = [sys.executable, "-m", "zotsink"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}


def ok_rows(d: Path) -> Counter[str]:
    rows = ledger_rows(d / "out.tsv.ledger")
    return Counter(r["tasknum"] for r in rows if r["event"] == "end" and r["status"] == "ok")


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "task.py").write_text(TASK)
    return tmp_path


def test_a_retried_task_s_records_are_read_once(job: Path, zotsink: Run) -> None:
    items = ["a", "fail1", "b", "fail2"]
    (job / "tasks.txt").write_text("\n".join(items) + "\n")
    r = zotsink(
        "run", "tasks.txt", "out.tsv", "--retries", "1", "--", sys.executable, "task.py", "0"
    )
    assert r.returncode == 0, r.stderr.decode()
    # OUT keeps every attempt's lines; the readers see each task's ok attempt once
    every = (job / "out.tsv").read_text().splitlines()
    assert len(every) == 3 * 6
    assert committed(job) == expected(items)
    r = zotsink("cat", "out.tsv", "--all")
    assert sorted(r.stdout.decode().splitlines()) == sorted(every)
    rows = zs.read_records(job / "out.tsv")
    assert sorted("\t".join(row) for row in rows) == expected(items)  # type: ignore[arg-type]
    assert ok_rows(job) == Counter({"1": 1, "2": 1, "3": 1, "4": 1})


def test_a_key_value_table_keeps_its_header_in_the_committed_view(job: Path, zotsink: Run) -> None:
    (job / "kv.py").write_text(
        "import os, sys\n"
        "print(f'item:{sys.argv[1]} n:1', flush=True)\n"
        "sys.exit(3 if sys.argv[1] == 'x' and os.environ['ZOTSINK_ATTEMPT'] == '1' else 0)\n"
    )
    (job / "tasks.txt").write_text("w\nx\ny\n")
    r = zotsink(
        "run", "tasks.txt", "out.tsv", "--kv", "--retries", "1", "--", sys.executable, "kv.py"
    )
    assert r.returncode == 0, r.stderr.decode()
    header, *rows = zotsink("cat", "out.tsv").stdout.splitlines(keepends=True)
    assert header == b"item\tn\n"  # in the order the tasks ended: x's retry may end last
    assert sorted(rows) == [b"w\t1\n", b"x\t1\n", b"y\t1\n"]
    every = zotsink("cat", "out.tsv", "--all").stdout.splitlines(keepends=True)
    assert every[0] == b"item\tn\n"
    assert sorted(every[1:]) == [b"w\t1\n", b"x\t1\n", b"x\t1\n", b"y\t1\n"]
    rows = [{"item": i, "n": "1"} for i in "wxy"]
    by_item = sorted(zs.read_records(job / "out.tsv", header=True), key=lambda r: r["item"])
    assert by_item == rows
    assert zotsink("cat", "out.tsv", "-o", "out.jsonl").returncode == 0
    got = [json.loads(x) for x in (job / "out.jsonl").read_text().splitlines()]
    assert sorted(got, key=lambda r: r["item"]) == [{"item": i, "n": 1} for i in "wxy"]


def test_two_runs_started_together_never_run_the_same_task(job: Path) -> None:
    items = [f"t{i}" for i in range(16)]
    (job / "tasks.txt").write_text("\n".join(items) + "\n")
    cmd = [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--jobs", "2", "--"]
    cmd += [sys.executable, "task.py", "0.3"]
    procs = [subprocess.Popen(cmd, cwd=job, env=_env(), stderr=subprocess.PIPE) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    runs = Counter(p.name.split(".")[0] for p in (job / "ran").iterdir())
    assert runs == Counter({item: 1 for item in items})  # each task ran once, in one run
    rows = ledger_rows(job / "out.tsv.ledger")
    starts = Counter(r["tasknum"] for r in rows if r["event"] == "start")
    assert set(starts.values()) == {1}  # one attempt each: attempt numbers unique
    assert {r["pid"] for r in rows if r["event"] == "start"} == {str(p.pid) for p in procs}
    assert ok_rows(job) == Counter({str(n): 1 for n in range(1, 17)})
    assert committed(job) == expected(items)


def test_sigkill_at_random_moments_then_a_resubmission_gives_each_task_once(job: Path) -> None:
    items = [f"t{i}" for i in range(24)]
    (job / "tasks.txt").write_text("\n".join(items) + "\n")
    cmd = [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--jobs", "3", "--"]
    cmd += [sys.executable, "task.py", "0.05"]
    out = job / "out.tsv"
    rng = random.Random(20261124)
    for round_ in range(6):
        p = subprocess.Popen(cmd, cwd=job, env=_env(), stderr=subprocess.DEVNULL)
        if round_ % 2 == 0:
            # kill right after OUT grew: between OUT's append and the ledger's end row
            size = out.stat().st_size if out.exists() else 0
            end = time.monotonic() + 30
            while time.monotonic() < end and p.poll() is None:
                if out.exists() and out.stat().st_size > size:
                    break
                time.sleep(0.001)
        else:
            time.sleep(rng.uniform(0.05, 0.4))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    # the resubmission finishes what is left
    r = subprocess.run(cmd, cwd=job, env=_env(), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    assert committed(job) == expected(items)
    assert ok_rows(job) == Counter({str(n): 1 for n in range(1, 25)})
    # crashed attempts' lines stay in OUT, where --all shows them
    every = (
        subprocess.run(
            [*ZOTSINK, "cat", "out.tsv", "--all"], cwd=job, capture_output=True, env=_env()
        )
        .stdout.decode()
        .splitlines()
    )
    assert set(every) >= set(expected(items))


def test_usr2_with_grace_then_a_resubmission_gives_each_task_once(job: Path) -> None:
    items = [f"t{i}" for i in range(6)]
    (job / "tasks.txt").write_text("\n".join(items) + "\n")
    cmd = [*ZOTSINK, "run", "tasks.txt", "out.tsv", "--jobs", "3", "--grace", "0.2", "--"]
    cmd += [sys.executable, "task.py", "3"]
    p = subprocess.Popen(cmd, cwd=job, env=_env(), stderr=subprocess.PIPE)
    ran = job / "ran"
    end = time.monotonic() + 60
    while not ran.exists() or len(list(ran.iterdir())) < 3:
        assert time.monotonic() < end and p.poll() is None, "the tasks did not start"
        time.sleep(0.01)
    p.send_signal(signal.SIGUSR2)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGUSR2, err.decode()
    interrupted = [r for r in ledger_rows(job / "out.tsv.ledger") if r["status"] == "interrupted"]
    assert len(interrupted) == 3
    assert committed(job) == []  # an interrupted attempt claims nothing
    r = subprocess.run(cmd, cwd=job, env=_env(), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert committed(job) == expected(items)
    assert ok_rows(job) == Counter({str(n): 1 for n in range(1, 7)})
