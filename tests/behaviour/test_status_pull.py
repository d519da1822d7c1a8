"""What ``zotsink status`` says of a ``--pull`` or ``--follow`` ledger: the live runs, idle
ones too, whether to submit more elements, to fix first, or to let the live runs take the
tasks left; and every count in the right number.

A live run is either a real ``zotsink run`` process, or this test's own process writing
rows as a run does (its pid and start time on the rows: alive while the test runs), where
what status must say depends on no timing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.behaviour.waiting import wait_for
from tests.ledgers import Book, ledger_rows
from zotsink import task_status
from zotsink._run.settings import run_settings

Run = Callable[..., subprocess.CompletedProcess[bytes]]
HOST = os.uname().nodename


def lines(r: subprocess.CompletedProcess[bytes]) -> list[str]:
    return r.stderr.decode().splitlines()


def ledger_of_this_process(
    path: Path, pull: str, ok: list[str], running: tuple[int, str] | None = None
) -> None:
    """A ledger whose one run is this process, recorded as ``--pull`` (``pull`` "yes"),
    ``--follow`` ("follow") or chunked (""), that ended the tasks ``ok`` (lines 1, 2, ...)
    ok: a live run, with the task ``running`` (number, line) running, else none."""
    settings = run_settings(
        "tasks.txt", ["echo"], shell=False, array=not pull, chunk=1, base=1, format="tsv",
        columns=None, kv=None, stamp=(), max_attempts=None,
    )  # fmt: skip
    me = Book(path, settings={**settings, "pull": pull} if pull else settings)
    for n, line in enumerate(ok, 1):
        me.claim(n, line=line).begin(n).end(n, seconds=0.1)
    if running is not None:
        me.claim(running[0], line=running[1]).begin(running[0])
    me.write()


IDLE = re.compile(r"idle (\d+\.\d s|\d+ s|\d+ min \d+ s)")


def test_a_follow_run_waiting_for_lines_is_listed_live_with_its_idle_time(
    tmp_path: Path,
    zotsink: Run,
    zotsink_cmd: list[str],
    child_env: Callable[..., dict[str, str]],
    reap: Callable[[subprocess.Popen[Any]], subprocess.Popen[Any]],
) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    run = reap(
        subprocess.Popen(
            [*zotsink_cmd, "run", "tasks.txt", "out.tsv", "--follow", "--idle", "600", "--",
             "echo"],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            env=child_env({"SLURM_ARRAY_TASK_ID": None, "SLURM_JOB_ID": None}),
        )
    )  # fmt: skip
    ledger = tmp_path / "out.tsv.ledger"

    def both_ended() -> bool:
        rows = ledger_rows(ledger, tmp_path / "tasks.txt")
        return sum(r["event"] == "end" and r["status"] == "ok" for r in rows) == 2

    wait_for(both_ended, run, "ended both tasks")
    d = json.loads(zotsink("status", "tasks.txt", "out.tsv", "--json").stdout)
    [live] = d["runs"]["live"]
    assert (live["pid"], live["ok"], live["running"]) == (str(run.pid), 2, 0)
    assert isinstance(live["idle"], float) and live["idle"] >= 0
    assert d["follow"] is True and d["takers"] == 1 and d["submit"] == 0
    said = lines(zotsink("status", "tasks.txt", "out.tsv"))
    assert said[0] == "zotsink: 2 tasks: 2 ok"
    assert said[2:4] == [
        "zotsink: task list open: runs that follow it wait for new lines",
        "zotsink: 1 live run:",
    ]
    assert said[4].startswith(f"zotsink:   {HOST} pid {run.pid}: 2 done, idle ")
    assert IDLE.search(said[4]), said[4]
    assert zotsink("close", "tasks.txt", "out.tsv").returncode == 0
    assert run.wait(timeout=60) == 0  # closed and done: the run ends
    said = lines(zotsink("status", "tasks.txt", "out.tsv"))
    assert said[2].startswith("zotsink: task list closed at 2 lines (")
    assert not [x for x in said if "live run" in x]


def test_tasks_that_live_runs_will_take_are_not_to_submit(tmp_path: Path, zotsink: Run) -> None:
    """After `zotsink add`, the live follow run takes the new lines: no element to submit."""
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    ledger_of_this_process(tmp_path / "out.tsv.ledger", "follow", ["a", "b"])
    assert zotsink("add", "tasks.txt", "c", "d", "e", "f").stdout == b"3-6\n"
    report = task_status(tmp_path / "tasks.txt", tmp_path / "out.tsv.ledger")
    assert (report.to_run, report.takers, report.submit, report.follow) == (4, 1, 0, True)
    [live] = report.runs.live if report.runs is not None else []
    assert live.pid == str(os.getpid()) and live.idle is not None and live.running == 0
    said = lines(zotsink("status", "tasks.txt", "out.tsv"))
    assert said[0] == "zotsink: 6 tasks: 2 ok, 4 never"
    assert said[-1] == "zotsink: to run: 4 tasks left; 1 live run takes them"
    assert not [x for x in said if "submit" in x]


def test_a_plain_pull_ledger_says_nothing_of_an_open_list(tmp_path: Path, zotsink: Run) -> None:
    """A --pull run reads the list once: nothing follows it, so its being open is no news."""
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    ledger_of_this_process(tmp_path / "out.tsv.ledger", "yes", ["a", "b"])
    said = lines(zotsink("status", "tasks.txt", "out.tsv"))
    assert said[0] == "zotsink: 3 tasks: 2 ok, 1 never"
    assert not [x for x in said if "task list" in x]
    assert "zotsink: 1 live run:" in said
    assert said[-1] == "zotsink: to run: 1 task left; 1 live run takes them"


def test_a_chunked_run_takes_no_other_chunk(tmp_path: Path, zotsink: Run) -> None:
    """Live chunked runs run their own chunks: the tasks of others wait for a resubmission."""
    (tmp_path / "tasks.txt").write_text("a\nb\nc\nd\n")
    ledger_of_this_process(tmp_path / "out.tsv.ledger", "", ["a", "b"], running=(3, "c"))
    report = task_status(tmp_path / "tasks.txt", tmp_path / "out.tsv.ledger")
    assert (report.to_run, report.takers, report.submit, report.pull) == (1, 0, 0, False)
    said = lines(zotsink("status", "tasks.txt", "out.tsv"))
    assert said[0] == "zotsink: 4 tasks: 2 ok, 1 running, 1 never"
    assert said[2] == "zotsink: 1 live run:"
    assert said[3].startswith(f"zotsink:   {HOST} pid {os.getpid()}: 2 done, 1 running, ")
    assert said[-1] == (
        "zotsink: to run again: array indices 4 (--chunk 1 --base 1); resubmit them when "
        "nothing runs"
    )


def test_after_every_run_halted_on_a_broken_function_status_says_fix_first(
    tmp_path: Path, zotsink: Run
) -> None:
    (tmp_path / "f.py").write_text("def f(line):\n    raise ValueError('broken')\n")
    (tmp_path / "tasks.txt").write_text("".join(f"t{n}\n" for n in range(1, 21)))
    for _element in range(2):  # the second tries one task first, and halts too
        r = zotsink("run", "tasks.txt", "out.tsv", "--pull", "--call", "f.py:f")
        assert r.returncode == 1 and b"halted" in r.stderr, r.stderr
    said = lines(zotsink("status", "tasks.txt", "out.tsv"))
    # (how many failed depends on how many each run claimed ahead: none ended ok)
    assert said[-1] == (
        "zotsink: to run again: 20 tasks left; fix first: the last 5 tasks to end ended alike "
        "(failed, exit 1); `zotsink status --failed` shows why"
    )
    d = json.loads(zotsink("status", "tasks.txt", "out.tsv", "--json").stdout)
    assert d["failing_alike"] == {"tasks": 5, "status": "failed", "exit": "1", "signal": ""}
    assert d["submit"] == 0


def test_a_list_whose_every_task_failed_alike_says_fix_first(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    r = zotsink("run", "tasks.txt", "out.tsv", "--pull", "--", "sh", "-c", "exit 3")
    assert r.returncode == 1, r.stderr
    said = lines(zotsink("status", "tasks.txt", "out.tsv"))
    assert said[-1] == (
        "zotsink: to run again: 3 tasks left; fix first: all 3 tasks ended alike (failed, "
        "exit 3); `zotsink status --failed` shows why"
    )
    (tmp_path / "one.txt").write_text("a\n")
    r = zotsink("run", "one.txt", "one.tsv", "--pull", "--", "sh", "-c", "exit 3")
    assert r.returncode == 1, r.stderr
    said = lines(zotsink("status", "one.txt", "one.tsv"))
    assert said[-1] == (
        "zotsink: to run again: 1 task left; fix first: the only task ended (failed, exit 3); "
        "`zotsink status --failed` shows why"
    )


def test_status_words_count_in_the_right_number(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    r = zotsink("run", "tasks.txt", "out.tsv", "--pull", "--", "sh", "-c",
                '[ "$0" = a ] || exit 4')  # fmt: skip
    assert r.returncode == 1, r.stderr
    said = lines(zotsink("status", "tasks.txt", "out.tsv"))
    assert said[-1] == (
        "zotsink: to run again: 1 task left; submit up to 1 more element of the --pull job "
        "(any element takes any task)"
    )
    r = zotsink("run", "tasks.txt", "up.tsv", "--max-attempts", "1", "--", "sh", "-c",
                '[ "$0" = a ] || exit 4')  # fmt: skip
    assert r.returncode == 1, r.stderr
    said = lines(zotsink("status", "tasks.txt", "up.tsv"))
    assert said[-1] == (
        "zotsink: given up (failed 1 time): 2; a run with a higher --max-attempts gives them "
        "another chance"
    )
    (tmp_path / "one.txt").write_text("a\n")
    assert zotsink("close", "one.txt", "one.tsv").returncode == 0
    said = lines(zotsink("status", "one.txt", "one.tsv"))
    assert said[1].startswith("zotsink: task list closed at 1 line (")
