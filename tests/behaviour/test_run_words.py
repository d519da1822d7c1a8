"""What ``zotsink run`` tells its user: a summary line, a command that cannot start named
(and the run stopped early), an array index past the task list refused, and no noise from
its own pipes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.ledgers import ledger_rows

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def test_an_all_ok_run_ends_with_one_line(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("echo a\necho b\n")
    r = zotsink("run", "tasks.txt", "out.txt", "--shell")
    assert r.returncode == 0
    assert r.stderr == b"zotsink: 2 tasks: 2 ok; 2 records into out.txt\n"
    r = zotsink("run", "tasks.txt", "out.txt", "--shell")
    assert r.stderr == b"zotsink: 2 tasks: 2 already ok; 0 records into out.txt\n"
    assert zotsink("run", "tasks.txt", "out.txt", "--shell", "-q").stderr == b""


def test_a_command_that_cannot_start_is_named_and_the_run_stops_early(
    tmp_path: Path, zotsink: Run
) -> None:
    (tmp_path / "tasks.txt").write_text("".join(f"img{i}.png\n" for i in range(10)))
    r = zotsink("run", "tasks.txt", "out.txt", "--", "pyhton3", "proc.py")
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert (
        "zotsink: error: the first 3 tasks could not start (cannot start 'pyhton3': No such "
        "file or directory); nothing more was started: fix the command and run again"
    ) in err
    ends = [row for row in ledger_rows(tmp_path / "out.txt.ledger") if row["event"] == "end"]
    assert [row["tasknum"] for row in ends] == ["1", "2", "3"]  # not all ten, one by one
    assert all(row["note"] == "cannot start 'pyhton3': No such file or directory" for row in ends)
    log = (tmp_path / "out.txt.log").read_text()
    assert "1.1\tzotsink: cannot start 'pyhton3': No such file or directory\n" in log


def test_an_index_past_the_task_list_is_refused(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("".join(f"echo {i}\n" for i in range(300)))
    r = zotsink("run", "tasks.txt", "out.txt", "--shell", "--index", "23", "--chunk", "20")
    assert r.returncode == 2
    assert r.stderr.decode() == (
        "zotsink: error: array index 23 runs tasks 441-460, but tasks.txt has 300 lines: "
        "check the array range, --chunk 20 and --base 1 (`zotsink missing TASKS --ledger "
        "LEDGER --array` gives the spec to submit)\n"
    )
    assert not (tmp_path / "out.txt.ledger").exists()
    # the last chunk, short as it is, runs
    r = zotsink("run", "tasks.txt", "out.txt", "--shell", "--index", "15", "--chunk", "20")
    assert r.returncode == 0, r.stderr.decode()
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 20


def test_run_closes_each_task_s_pipes_once(tmp_path: Path, child_env) -> None:
    # Python's dev mode reports a file closed twice (the second close could be another
    # file's descriptor) and a file left open
    (tmp_path / "tasks.txt").write_text("echo a\necho b >&2\nexit 3\n")
    r = subprocess.run(
        [sys.executable, "-X", "dev", "-m", "zotsink", "run", "tasks.txt", "out.txt", "--shell"],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        timeout=60,
    )
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "Exception ignored" not in err and "unclosed file" not in err, err
