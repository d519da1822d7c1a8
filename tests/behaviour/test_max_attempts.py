"""``run --max-attempts N``: a task that failed N times, over any number of runs, is
``given-up``: never claimed again, shown by ``status``, left out by ``missing`` and by
``scripts/jobs/resubmit-run.sh``, which then converges."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.ledgers import Book, ledger_rows
from zotsink._ledger.read import Snapshot
from zotsink._ledger.view import LedgerView
from zotsink._run.ledger import Ledger
from zotsink._run.queue import Candidate
from zotsink._run.tasks import Task

Run = Callable[..., subprocess.CompletedProcess[bytes]]
JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
#: Fails for the task line "bad", prints the line otherwise.
FAIL_BAD = ["sh", "-c", 'if [ "$0" = bad ]; then echo "bad input $0" >&2; exit 3; fi; echo "$0"']


def starts(path: Path, key: str) -> int:
    return sum(r["event"] == "start" and r["key"] == key for r in ledger_rows(path))


def test_a_task_that_always_fails_is_given_up_across_runs(tmp_path: Path, zotsink: Run) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("a\nbad\nc\n")
    ledger = tmp_path / "out.tsv.ledger"
    r = zotsink("run", tasks, "out.tsv", "--index", "1", "--chunk", "3", "--max-attempts", "3",
                "--", *FAIL_BAD)  # fmt: skip
    assert r.returncode == 1
    assert starts(ledger, "bad") == 1
    # a resubmission that does not repeat the option: the recorded limit holds; --retries
    # would give 5 more, the limit stops at the third failure
    r = zotsink("run", tasks, "out.tsv", "--index", "1", "--chunk", "3", "--retries", "5",
                "--", *FAIL_BAD)  # fmt: skip
    assert r.returncode == 1
    assert starts(ledger, "bad") == 3
    assert "3 tasks: 1 failed, 2 already ok" in r.stderr.decode()
    # the next resubmission starts nothing, says why, and is still not a success
    r = zotsink("run", tasks, "out.tsv", "--index", "1", "--chunk", "3", "--", *FAIL_BAD)
    assert r.returncode == 1
    assert starts(ledger, "bad") == 3
    assert "3 tasks: 2 already ok, 1 given up after 3 failed attempts" in r.stderr.decode()
    s = zotsink("status", tasks, "out.tsv", "--json")
    assert s.returncode == 1
    d = json.loads(s.stdout)
    assert d["counts"]["given-up"] == 1 and d["given_up"] == "2" and d["resubmit"] == ""
    assert "2 ok, 1 given-up" in s.stderr.decode()
    m = zotsink("missing", tasks, "--ledger", ledger)
    assert (m.returncode, m.stdout) == (0, b"")
    assert "left out 1 given-up task(s), failed too often (--max-attempts 3): 2" in (
        m.stderr.decode()
    )
    m = zotsink("missing", tasks, "--ledger", ledger, "--state", "given-up")
    assert m.stdout == b"bad\n"
    # a higher limit, given again, gives the task its chances back
    r = zotsink("run", tasks, "out.tsv", "--index", "1", "--chunk", "3", "--max-attempts", "4",
                "--", *FAIL_BAD)  # fmt: skip
    assert starts(ledger, "bad") == 4


def _view(path: Path, max_attempts: int) -> LedgerView:
    view = LedgerView({1: "a"})
    with Snapshot(path) as snap:
        view.feed(snap.rows())
    view.settle(None, max_attempts=max_attempts)
    return view


def test_interrupted_attempts_do_not_count(tmp_path: Path) -> None:
    path = tmp_path / "l"
    book = Book(path)
    for attempt, status in enumerate(("failed", "interrupted", "timeout", "interrupted"), 1):
        book.claim(1, attempt, "a").begin(1, attempt).end(1, attempt, status=status, code="1")
    book.write()
    assert _view(path, 2).state(1) == "interrupted"
    book.claim(1, 5, "a").begin(1, 5).end(1, 5, status="killed", code="SIGKILL")
    book.write()
    view = _view(path, 3)
    assert (view.state(1), view.failures[1]) == ("given-up", 3)


def test_given_up_is_decided_under_the_lock(tmp_path: Path) -> None:
    """A run that looked before another run's third failure does not start the task: its
    claim by name finds the task claimed since (its attempt moved) and drops it."""
    path = tmp_path / "l"
    (tmp_path / "tasks.txt").write_text("a\n")
    late = Ledger(path, tasks=str(tmp_path / "tasks.txt"), env={})
    late.open()
    other = Book(path)
    for attempt in (1, 2, 3):
        other.claim(1, attempt, "a").begin(1, attempt).end(1, attempt, "failed", "1")
    other.write()
    got = late.claim(1, [Candidate(Task(1, "a"), 1)], cursor=False, closed_lines=None)
    assert got.tasks == [] and [c.task for c in got.dropped] == [Task(1, "a")]
    assert _view(path, 3).state(1) == "given-up"
    late.close()


def test_resubmit_run_converges(tmp_path: Path, child_env: Callable[..., dict[str, str]]) -> None:
    (tmp_path / "tasks.txt").write_text("a\nbad\nc\nd\n")
    zotsink = [sys.executable, "-m", "zotsink"]
    for index in ("1", "2"):
        env = child_env({"SLURM_ARRAY_JOB_ID": "4711", "SLURM_ARRAY_TASK_ID": index})
        r = subprocess.run(
            [
                *zotsink,
                "run",
                "tasks.txt",
                "results.tsv",
                "--chunk",
                "2",
                "--max-attempts",
                "1",
                "--",
                *FAIL_BAD,
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=60,
        )
        assert r.returncode == (1 if index == "1" else 0), r.stderr
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "squeue"):
        # squeue: job 4711 has ended; sbatch: records that it was called
        body = 'echo "$0 $*" >> calls\n' + ("exit 0\n" if name == "squeue" else "")
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    env = child_env(
        {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "ZOTSINK": shlex.join(zotsink),
            "MAX_ARRAY": "1001",
            "SLURM_ARRAY_JOB_ID": None,
            "SLURM_ARRAY_TASK_ID": None,
        }
    )
    r = subprocess.run(
        ["bash", JOBS / "resubmit-run.sh"], cwd=tmp_path, env=env, capture_output=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    err = r.stderr.decode()
    assert "given up, not resubmitted (they failed --max-attempts times): tasks 2;" in err
    assert "nothing to resubmit: every other task of tasks.txt is ok" in err
    assert not any("sbatch" in line for line in (tmp_path / "calls").read_text().splitlines())
