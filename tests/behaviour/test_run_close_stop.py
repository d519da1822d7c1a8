"""``zotsink close``, ``zotsink stop`` and what ``status`` says of the runs: live runs,
a closed list, a stop being obeyed, and ``--waiting`` for a cron line."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.behaviour.waiting import wait_for
from tests.ledgers import begins, ledger_rows

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def test_close_reopen_and_stop_from_the_command_line(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    r = zotsink("close", "tasks.txt")
    assert r.returncode == 2 and b"give OUT too" in r.stderr
    r = zotsink("stop", "tasks.txt", "out.tsv")
    assert r.returncode == 2 and b"no run has begun to stop" in r.stderr
    r = zotsink("close", "nope.txt", "out.tsv")
    assert r.returncode == 1 and b"task list nope.txt does not exist" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["tasks.txt"]  # nothing written by mistakes
    r = zotsink("close", "tasks.txt", "out.tsv")
    assert r.returncode == 0 and b"tasks.txt closed at 2 lines" in r.stderr, r.stderr
    r = zotsink("close", "tasks.txt", "out.tsv")
    assert r.returncode == 0 and b"was closed already at 2 lines" in r.stderr
    assert zotsink("add", "tasks.txt", "c").stdout == b"3\n"
    r = zotsink("close", "tasks.txt", "--ledger", "out.tsv.ledger")  # lines came: again
    assert r.returncode == 0 and b"closed at 3 lines" in r.stderr
    r = zotsink("close", "tasks.txt", "out.tsv", "--reopen")
    assert r.returncode == 0 and b"open again" in r.stderr
    r = zotsink("stop", "tasks.txt", "out.tsv")
    assert r.returncode == 0 and b"stop recorded in out.tsv.ledger" in r.stderr
    r = zotsink("stop", "tasks.txt", "out.tsv")  # again: harmless, one more row
    assert r.returncode == 0
    d = json.loads(zotsink("status", "tasks.txt", "out.tsv", "--json").stdout)
    assert d["total"] == 3 and d["counts"]["never"] == 3 and d["to_run"] == 3
    assert d["runs"]["closed"] is False and d["runs"]["stop_offset"] is not None
    assert d["runs"]["live"] == [] and d["runs"]["runs"] == 0
    events = [r["event"] for r in ledger_rows(tmp_path / "out.tsv.ledger", every=True)]
    assert events == ["close", "close", "open", "stop", "stop"]


def test_status_shows_a_live_run_and_the_stop_it_obeys(
    tmp_path: Path,
    zotsink: Run,
    zotsink_cmd: list[str],
    child_env: Callable[..., dict[str, str]],
    reap: Callable[[subprocess.Popen[Any]], subprocess.Popen[Any]],
) -> None:
    (tmp_path / "tasks.txt").write_text("1\n2\n3\n")
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    # task 3 says it started, then waits on the fifo: the run stays live meanwhile
    task = f'if [ "$0" = 3 ]; then touch {tmp_path}/started; cat {gate} >/dev/null; fi; echo $0'
    run = reap(
        subprocess.Popen(
            [*zotsink_cmd, "run", "tasks.txt", "out.tsv", "--jobs", "1", "--", "sh", "-c", task],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            env=child_env({"SLURM_ARRAY_TASK_ID": None, "SLURM_JOB_ID": None}),
        )
    )
    ledger = tmp_path / "out.tsv.ledger"

    def ready() -> bool:  # task 3 runs (its begin row written), tasks 1 and 2 ended
        if not (tmp_path / "started").exists():
            return False
        rows = ledger_rows(ledger)
        ended = sum(r["event"] == "end" and r["status"] == "ok" for r in rows) == 2
        return ended and any(b["tasknum"] == "3" for b in begins(ledger))

    wait_for(ready, run, "started task 3 after 1 and 2 ended")
    r = zotsink("status", "tasks.txt", "out.tsv", "--json")
    d = json.loads(r.stdout)
    [live] = d["runs"]["live"]
    assert live["pid"] == str(run.pid) and live["host"] == os.uname().nodename
    assert live["running"] == 1 and live["ok"] == 2 and not live["stopping"]
    assert d["runs"]["closed"] is False
    text = zotsink("status", "tasks.txt", "out.tsv").stderr.decode()
    assert "1 live run:" in text and f"pid {run.pid}: 2 done, 1 running" in text
    assert "task list open" not in text  # the run takes no lines added: it follows nothing
    assert zotsink("status", "tasks.txt", "out.tsv", "--waiting").returncode == 1  # 3 runs
    assert zotsink("stop", "tasks.txt", "out.tsv").returncode == 0
    assert zotsink("close", "tasks.txt", "out.tsv").returncode == 0
    d = json.loads(zotsink("status", "tasks.txt", "out.tsv", "--json").stdout)
    assert [r["stopping"] for r in d["runs"]["live"]] == [True] and d["runs"]["stopping"] == 1
    assert d["runs"]["closed"] is True and d["runs"]["closed_lines"] == 3
    text = zotsink("status", "tasks.txt", "out.tsv").stderr.decode()
    assert "stop at " in text and "1 run finishing its tasks" in text
    assert "task list closed at 3 lines" in text and ", stopping" in text
    with open(gate, "w"):
        pass  # task 3 ends
    assert run.wait(timeout=60) == 0
    d = json.loads(zotsink("status", "tasks.txt", "out.tsv", "--json").stdout)
    assert d["runs"]["live"] == [] and d["runs"]["runs"] == 1 and d["counts"]["ok"] == 3
    assert zotsink("status", "tasks.txt", "out.tsv").stderr.count(b"stop at") == 0  # history


def test_waiting_exits_0_while_tasks_wait_and_1_when_none(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("a\n")
    r = zotsink("status", "tasks.txt", "out.tsv", "--waiting")  # no run yet: it waits
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    assert zotsink("run", "tasks.txt", "out.tsv", "--", "echo").returncode == 0
    r = zotsink("status", "tasks.txt", "out.tsv", "--waiting")
    assert (r.returncode, r.stdout, r.stderr) == (1, b"", b"")
    assert zotsink("add", "tasks.txt", "b").stdout == b"2\n"
    assert zotsink("status", "tasks.txt", "out.tsv", "--waiting").returncode == 0
