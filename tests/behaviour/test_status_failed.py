"""``zotsink status ... --failed``: each failed task's latest attempt and the last lines of
its stderr, read from the log as every side file is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

Run = Callable[..., subprocess.CompletedProcess[bytes]]

#: Task "bad" prints 7 lines on stderr, each naming its attempt, and fails; "boom" is
#: killed by SIGKILL; the others succeed (and print one stderr line).
TASK = (
    'case "$0" in '
    'bad) for i in 1 2 3 4 5 6 7; do echo "bad $ZOTSINK_ATTEMPT.$i" >&2; done; exit 3;; '
    'boom) echo "going" >&2; kill -9 $$;; '
    'esac; echo "fine $0" >&2; echo "$0"'
)


def run_tasks(tmp_path: Path, zotsink: Run) -> Path:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("a\nbad\nc\nboom\n")
    r = zotsink("run", tasks, "out.tsv", "--retries", "1", "--jobs", "2", "--", "sh", "-c", TASK)
    assert r.returncode == 1
    return tasks


def test_failed_lists_the_latest_attempt_and_its_last_stderr_lines(
    tmp_path: Path, zotsink: Run
) -> None:
    tasks = run_tasks(tmp_path, zotsink)
    r = zotsink("status", tasks, "out.tsv", "--failed")
    assert r.returncode == 1
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("task 2 failed (attempt 2, exit 3, ") and lines[0].endswith("): bad")
    # the second attempt's last five lines: nothing of the first attempt, nor of task 1
    assert lines[1:6] == [f"    bad 2.{i}" for i in range(3, 8)]
    assert lines[6].startswith("task 4 killed (attempt 2, signal SIGKILL, ")
    assert lines[7:] == ["    going"]
    # the same as JSON, with the number of lines asked for
    r = zotsink("status", tasks, "out.tsv", "--failed", "--last", "2", "--json")
    d = json.loads(r.stdout)
    got = [(t["tasknum"], t["status"], t["attempt"], t["exit"], t["signal"], t["stderr"])
           for t in d["failed"]]  # fmt: skip
    assert got == [
        (2, "failed", 2, "3", "", ["bad 2.6", "bad 2.7"]),
        (4, "killed", 2, "", "SIGKILL", ["going"]),
    ]


def test_an_older_log_without_attempts_is_read(tmp_path: Path, zotsink: Run) -> None:
    tasks = run_tasks(tmp_path, zotsink)
    log = tmp_path / "out.tsv.log"
    # the layout an older release wrote: TASKNUM<TAB>line
    log.write_bytes(b"2\tbad old 1\n1\tfine a\n2\t3\tbad old 2\n")
    r = zotsink("status", tasks, "--ledger", "out.tsv.ledger", "--failed")
    assert r.stdout.decode().splitlines()[1:3] == ["    bad old 1", "    3\tbad old 2"]


def test_a_missing_log_is_a_note_and_a_fifo_is_refused(tmp_path: Path, zotsink: Run) -> None:
    tasks = run_tasks(tmp_path, zotsink)
    (tmp_path / "out.tsv.log").rename(tmp_path / "elsewhere.log")
    r = zotsink("status", tasks, "out.tsv", "--failed")
    assert r.returncode == 1
    assert b"note: no log at out.tsv.log: the tasks' stderr is not shown (give --log PATH)" in (
        r.stderr
    )
    listed = r.stdout.decode().splitlines()
    assert len(listed) == 2 and all(x.startswith("task ") for x in listed)  # no stderr
    r = zotsink("status", tasks, "out.tsv", "--failed", "--log", "elsewhere.log")
    assert b"    bad 2.7" in r.stdout
    os.mkfifo(tmp_path / "out.tsv.log")  # nobody writes to it: a read would hang
    r = zotsink("status", tasks, "out.tsv", "--failed")
    assert r.returncode == 1, r.stderr
    assert b"out.tsv.log is a FIFO" in r.stderr and b"Traceback" not in r.stderr


# Starts argv and prints its exit code and peak RSS (KiB): a launcher of its own, so that
# the child is not charged with the pytest worker's memory (see test_collect_hardening).
_LAUNCH = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
    "_pid, status, ru = os.wait4(p.pid, 0)\n"
    "print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)\n"
)


def test_a_big_log_is_streamed(tmp_path: Path, zotsink: Run) -> None:
    tasks = run_tasks(tmp_path, zotsink)
    line = b"2.2\t" + b"x" * 200 + b"\n"
    with open(tmp_path / "out.tsv.log", "ab") as f:
        for _ in range(8):
            f.write(line * 50_000)
    assert (tmp_path / "out.tsv.log").stat().st_size > 80_000_000
    out = subprocess.run(
        [sys.executable, "-c", _LAUNCH, sys.executable, "-m", "zotsink", "status", tasks,
         "out.tsv", "--failed"],
        cwd=tmp_path, capture_output=True, check=True, timeout=300,
    )  # fmt: skip
    code, rss_kib = out.stdout.split()
    assert int(code) == 1, out.stderr
    assert int(rss_kib) < 60 * 1024, rss_kib  # the log is not held: its last lines are


#: Every task fails alike: the file it opens is not there (run from the wrong directory).
WRONG_PATH = """
import json


def measure(line):
    with open("images/" + line) as f:
        return json.load(f)
"""


def test_three_thousand_alike_failures_are_one_group_with_its_traceback_whole(
    tmp_path: Path, zotsink: Run
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"img{n:04d}.json\n" for n in range(1, 3001)))
    (tmp_path / "measure.py").write_text(WRONG_PATH)
    r = zotsink("run", tasks, "out.tsv", "--jobs", "2", "--call", "measure.py:measure",
                "--halt-after", "0", timeout=300)  # fmt: skip
    assert r.returncode == 1, r.stderr
    r = zotsink("status", tasks, "out.tsv", "--failed")
    assert r.returncode == 1
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("3000 tasks failed alike: 1-3000; the first, task 1 failed "), lines
    assert lines[0].endswith("): img0001.json")
    # the traceback's last frame and the exception whole, under its first line; a few lines
    tail = [x[4:] for x in lines[1:]]
    assert tail[0] == "Traceback (most recent call last):"
    frame = next(i for i, x in enumerate(tail) if x.startswith('  File "') and "measure.py" in x)
    assert tail[frame + 1].strip() == 'with open("images/" + line) as f:'
    assert tail[-1] == (
        "FileNotFoundError: [Errno 2] No such file or directory: 'images/img0001.json'"
    )
    assert len(lines) <= 10, lines
    assert b"--all shows each" in r.stderr
    # --all: each task, each with its own tail
    r = zotsink("status", tasks, "out.tsv", "--failed", "--all")
    heads = [x for x in r.stdout.decode().splitlines() if x.startswith("task ")]
    assert len(heads) == 3000 and heads[-1].endswith("): img3000.json")
    # JSON: the group, and every task as before
    d = json.loads(zotsink("status", tasks, "out.tsv", "--failed", "--json").stdout)
    assert [(g["state"], g["count"], g["example"]) for g in d["failure_groups"]] == [
        ("failed", 3000, 1)
    ]
    assert len(d["failed"]) == 3000


def test_failures_that_differ_are_groups_of_their_own(tmp_path: Path, zotsink: Run) -> None:
    tasks = run_tasks(tmp_path, zotsink)
    r = zotsink("status", tasks, "out.tsv", "--failed")
    lines = r.stdout.decode().splitlines()
    # two groups of one: each shown as a task, as before
    assert [x.split(" (")[0] for x in lines if not x.startswith("    ")] == [
        "task 2 failed", "task 4 killed",
    ]  # fmt: skip
    assert b"--all" not in r.stderr


def test_a_long_spec_of_a_group_is_cut_counted_and_pointed_to(tmp_path: Path, zotsink: Run) -> None:
    """1,000 alike failures among 2,000 tasks, every other one: their spec alone would be
    4,893 characters; the group's line shows its head, counts the rest and names the
    command that prints it whole."""
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"{n}\n" for n in range(1, 2001)))
    r = zotsink("run", tasks, "out.tsv", "--jobs", "2", "--halt-after", "0", "--", "sh", "-c",
                'echo "odd $(( $0 % 2 ))" >&2; exit $(( $0 % 2 ))', timeout=300)  # fmt: skip
    assert r.returncode == 1, r.stderr
    r = zotsink("status", tasks, "out.tsv", "--failed")
    assert r.returncode == 1
    head = ",".join(str(n) for n in range(1, 82, 2))  # the first 41 of them: 119 characters
    line = r.stdout.decode().splitlines()[0]
    assert line.startswith(
        f"1000 tasks failed alike: {head},... (959 more); the first, task 1 failed (attempt 1, "
        "exit 1, "
    )  # then its seconds
    assert line.endswith(" s): 1")
    full = f"`zotsink missing {tasks} --ledger out.tsv.ledger --state failed --array --chunk 1`"
    assert r.stderr.decode().splitlines()[1] == (
        "zotsink: task numbers past the first 120 characters of a spec are counted, not shown; "
        f"in full: {full}"
    )
    spec = zotsink(*full.strip("`").split()[1:]).stdout.decode()
    assert spec == ",".join(str(n) for n in range(1, 2000, 2)) + "\n"
    # a short spec is whole, and no pointer
    (tmp_path / "few.txt").write_text("1\n2\n3\n")
    r = zotsink("run", "few.txt", "few.tsv", "--", "sh", "-c", "exit $(( $0 % 2 ))")
    r = zotsink("status", "few.txt", "few.tsv", "--failed")
    assert r.stdout.decode().startswith("2 tasks failed alike: 1,3; the first, task 1 failed")
    assert b"in full" not in r.stderr
