"""``zotsink run`` end to end, with real task processes: selection, whole output, failures.

Each test reads the three files a run leaves (OUT, OUT.log, OUT.ledger) and checks exact
counts; the ledger is read through tests/ledgers.py (zotsink's own row view).
"""

from __future__ import annotations

import collections
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def write_tasks(path: Path, n: int, extra: str = "") -> Path:
    path.write_text("".join(f"item{i}\n" for i in range(1, n + 1)) + extra)
    return path


def test_index_and_chunk_run_exactly_their_lines(tmp_path: Path, zotsink: Run) -> None:
    tasks = write_tasks(tmp_path / "tasks.txt", 100)
    r = zotsink("run", tasks, "out.tsv", "--index", "3", "--chunk", "10", "--", "echo")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.tsv").read_text() == "".join(f"item{i}\n" for i in range(21, 31))
    rows = ledger_rows(tmp_path / "out.tsv.ledger")
    assert sorted(int(r["tasknum"]) for r in rows if r["event"] == "start") == list(range(21, 31))
    ends = [r for r in rows if r["event"] == "end"]
    assert {(int(r["tasknum"]), r["key"], r["status"], r["records"]) for r in ends} == {
        (i, f"item{i}", "ok", "1") for i in range(21, 31)
    }


def test_no_index_runs_every_task_once_and_skips_blank_and_comment_lines(
    tmp_path: Path, zotsink: Run
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("a\n\n# not a task\nb c\n   \n#x\nd")  # no final newline on d
    env = {"SLURM_ARRAY_TASK_ID": None, "SGE_TASK_ID": None, "PBS_ARRAY_INDEX": None}
    r = zotsink("run", tasks, "out.txt", "--jobs", "2", "--", "echo", "[{}]", env=env)
    assert r.returncode == 0, r.stderr
    assert sorted((tmp_path / "out.txt").read_text().splitlines()) == ["[a]", "[b c]", "[d]"]
    rows = ledger_rows(tmp_path / "out.txt.ledger")
    assert sorted(int(r["tasknum"]) for r in rows if r["event"] == "end") == [1, 4, 7]


def test_scheduler_index_and_base_zero(tmp_path: Path, zotsink: Run) -> None:
    tasks = write_tasks(tmp_path / "tasks.txt", 10)
    r = zotsink(
        "run",
        tasks,
        "out.txt",
        "--chunk",
        "3",
        "--base",
        "0",
        "--",
        "echo",
        env={"SLURM_ARRAY_TASK_ID": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_text() == "item4\nitem5\nitem6\n"
    r = zotsink("run", tasks, "pbs.txt", "--chunk", "4", "--", "echo", env={"PBS_ARRAYID": "3"})
    assert (tmp_path / "pbs.txt").read_text() == "item9\nitem10\n"  # the last chunk is short


def test_eight_runs_keep_out_log_and_ledger_whole(
    tmp_path: Path, zotsink_cmd: list[str], child_env: Callable[..., dict[str, str]]
) -> None:
    # 8 runs x 8 tasks, 4 at a time each; every task prints 1000 lines and 100 to stderr.
    tasks = write_tasks(tmp_path / "tasks.txt", 64)
    script = 'seq -f "$1 out %g" 1000; seq -f "$1 err %g" 100 >&2'
    procs = [
        subprocess.Popen(
            [
                *zotsink_cmd,
                "run",
                str(tasks),
                "out.txt",
                "--index",
                str(i),
                "--chunk",
                "8",
                "--jobs",
                "4",
                "--batch-bytes",
                "4096",
                "--",
                "sh",
                "-c",
                script,
                "sh",
            ],
            cwd=tmp_path,
            env=child_env(),
            stderr=subprocess.PIPE,
        )
        for i in range(1, 9)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    out = (tmp_path / "out.txt").read_bytes()
    assert out.endswith(b"\n")
    lines = out.decode().splitlines()
    assert len(lines) == len(set(lines)) == 64 * 1000
    assert set(lines) == {f"item{t} out {k}" for t in range(1, 65) for k in range(1, 1001)}
    log = (tmp_path / "out.txt.log").read_text().splitlines()
    assert len(log) == len(set(log)) == 64 * 100
    assert set(log) == {f"{t}.1\titem{t} err {k}" for t in range(1, 65) for k in range(1, 101)}
    rows = ledger_rows(tmp_path / "out.txt.ledger")
    events = collections.Counter((r["event"], int(r["tasknum"])) for r in rows)
    # and the run's settings, recorded once: the runs after the first found them on record
    assert events == {("run", 0): 1, **{(e, t): 1 for e in ("start", "end") for t in range(1, 65)}}
    per_task = collections.Counter(line.split(" ")[0] for line in lines)
    for r in rows:
        if r["event"] == "end":
            assert r["status"] == "ok"
            assert int(r["records"]) == per_task[r["key"]] == 1000


FAILER = """
import os, sys
item = sys.argv[1]
print(f"{item}\\tdone")
if os.path.exists(item + ".fail"):
    print(f"{item} went wrong", file=sys.stderr)
    sys.exit(3)
"""


def test_failed_task_is_recorded_and_only_it_runs_again(tmp_path: Path, zotsink: Run) -> None:
    tasks = write_tasks(tmp_path / "tasks.txt", 6)
    (tmp_path / "proc.py").write_text(FAILER)
    (tmp_path / "item4.fail").touch()
    cmd = ("run", tasks, "out.tsv", "--jobs", "2", "--", "python3", "proc.py")
    r = zotsink(*cmd)
    assert r.returncode == 1
    assert b"tasks not ok: 4" in r.stderr
    rows = ledger_rows(tmp_path / "out.tsv.ledger")
    end4 = [r for r in rows if r["event"] == "end" and r["tasknum"] == "4"]
    assert [(e["status"], e["exit"]) for e in end4] == [("failed", "3")]
    assert "4.1\titem4 went wrong" in (tmp_path / "out.tsv.log").read_text().splitlines()

    st = zotsink("status", tasks, "out.tsv")
    assert st.returncode == 1
    assert b"6 tasks: 5 ok, 1 failed" in st.stderr

    (tmp_path / "item4.fail").unlink()
    r = zotsink(*cmd)
    assert r.returncode == 0, r.stderr
    new = ledger_rows(tmp_path / "out.tsv.ledger")[len(rows) :]
    assert [(x["event"], x["tasknum"], x["attempt"]) for x in new] == [
        ("start", "4", "2"),
        ("end", "4", "2"),
    ]
    assert zotsink("status", tasks, "out.tsv").returncode == 0
    lines = (tmp_path / "out.tsv").read_text().splitlines()
    assert collections.Counter(lines)["item4\tdone"] == 2  # printed by both attempts
    assert len(lines) == 7


def test_attempt_stamp_tells_the_lines_of_each_attempt_apart(tmp_path: Path, zotsink: Run) -> None:
    """A task run again prints its lines again: ``--stamp attempt`` says which start each
    line came from, and the ledger's ok ``end`` row says which attempt to keep."""
    tasks = write_tasks(tmp_path / "tasks.txt", 3)
    (tmp_path / "proc.py").write_text(FAILER)
    (tmp_path / "item2.fail").touch()
    cmd = ("run", tasks, "out.tsv", "--stamp", "tasknum,attempt", "--columns", "item,what")
    cmd += ("--", "python3", "proc.py")
    assert zotsink(*cmd).returncode == 1
    (tmp_path / "item2.fail").unlink()
    r = zotsink(*cmd)
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in (tmp_path / "out.tsv").read_text().splitlines()]
    assert rows[0] == ["tasknum", "attempt", "item", "what"]
    assert sorted(map(tuple, rows[1:])) == [
        ("1", "1", "item1", "done"),
        ("2", "1", "item2", "done"),
        ("2", "2", "item2", "done"),
        ("3", "1", "item3", "done"),
    ]
    ends = [e for e in ledger_rows(tmp_path / "out.tsv.ledger") if e["event"] == "end"]
    ok = {(e["tasknum"], e["attempt"]) for e in ends if e["status"] == "ok"}
    assert ok == {("1", "1"), ("2", "2"), ("3", "1")}
    kept = [row for row in rows[1:] if (row[0], row[1]) in ok]
    assert sorted(row[2] for row in kept) == ["item1", "item2", "item3"]


def test_retries_timeout_and_missing_command(tmp_path: Path, zotsink: Run) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("exit 5\nsleep 30\nno-such-command-here\necho fine\n")
    r = zotsink("run", tasks, "out.txt", "--shell", "--retries", "1", "--task-timeout", "1")
    assert r.returncode == 1
    ends = [r for r in ledger_rows(tmp_path / "out.txt.ledger") if r["event"] == "end"]
    got = sorted((int(e["tasknum"]), e["attempt"], e["status"], e["exit"]) for e in ends)
    assert got == [
        (1, "1", "failed", "5"),
        (1, "2", "failed", "5"),
        (2, "1", "timeout", ""),
        (2, "2", "timeout", ""),
        (3, "1", "failed", "127"),
        (3, "2", "failed", "127"),
        (4, "1", "ok", "0"),
    ]
    assert (tmp_path / "out.txt").read_text() == "fine\n"


def test_final_line_without_newline_is_kept_and_noted(tmp_path: Path, zotsink: Run) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("one\n")
    r = zotsink("run", tasks, "out.txt", "--", "printf", "a\\nb%s")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_text() == "a\nbone\n"
    (end,) = [r for r in ledger_rows(tmp_path / "out.txt.ledger") if r["event"] == "end"]
    assert end["records"] == "2"
    assert "no newline" in end["note"]


def test_refused_lines_go_to_rejects_with_the_task_number(tmp_path: Path, zotsink: Run) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("x\n")
    r = zotsink("run", tasks, "out.tsv", "--columns", "a,b", "--", "printf", "1\\t2\\n3\\n%s")
    assert r.returncode == 1
    assert (tmp_path / "out.tsv").read_text() == "a\tb\n1\t2\n"
    rejects = (tmp_path / "out.tsv.rejects").read_text().splitlines()
    assert rejects == [
        "task 1 line 2: 1 fields where the header has 2\t3",
        "task 1 line 3: 1 fields where the header has 2\tx",
    ]


@pytest.mark.parametrize("bad", [["--shell", "--", "echo"], ["--jobs", "0", "--", "echo"]])
def test_usage_errors(tmp_path: Path, zotsink: Run, bad: list[str]) -> None:
    write_tasks(tmp_path / "tasks.txt", 2)
    r = zotsink("run", "tasks.txt", "out.txt", *bad)
    assert r.returncode == 2
    assert b"Traceback" not in r.stderr
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize(
    ("out", "extra", "what"),
    [
        ("tasks.txt", [], "OUT: give OUT"),
        ("link.txt", [], "OUT: give OUT"),
        ("out.txt", ["--log", "tasks.txt"], "the log: give --log"),
        ("out.txt", ["--ledger", "./tasks.txt"], "the ledger: give --ledger"),
    ],
)
def test_the_task_list_is_never_written_to(
    tmp_path: Path, zotsink: Run, out: str, extra: list[str], what: str
) -> None:
    tasks = write_tasks(tmp_path / "tasks.txt", 2)
    (tmp_path / "link.txt").symlink_to("tasks.txt")
    before = tasks.read_bytes()
    r = zotsink("run", "tasks.txt", out, "--index", "1", *extra, "--", "echo")
    assert r.returncode == 2, r.stderr
    assert f"zotsink: error: the task list tasks.txt is also {what} another name".encode() in (
        r.stderr
    )
    assert tasks.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "tasks.txt"]


def test_out_forgotten_before_the_dashes_is_refused(tmp_path: Path, zotsink: Run) -> None:
    write_tasks(tmp_path / "tasks.txt", 2)
    r = zotsink("run", "tasks.txt", "--", "echo", "{}")
    assert r.returncode == 2, r.stderr
    assert r.stderr == (
        b"zotsink: error: `--` comes after OUT: here OUT would be 'echo'; write "
        b"`zotsink run TASKS OUT -- CMD [ARG ...]`\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.txt"]
    # a `--` inside CMD, and no `--` at all, are still CMD's
    r = zotsink("run", "tasks.txt", "out.txt", "--", "echo", "{}", "--", "x")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_bytes() == b"item1 -- x\nitem2 -- x\n"
    r = zotsink("run", "tasks.txt", "bare.txt", "echo", "{}")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "bare.txt").read_bytes() == b"item1\nitem2\n"


def test_missing_task_list_is_a_clear_error(tmp_path: Path, zotsink: Run) -> None:
    r = zotsink("run", "nope.txt", "out.txt", "--", "echo")
    assert r.returncode == 1
    assert r.stderr == b"zotsink: error: task list nope.txt does not exist\n"


def test_status_watch_off_a_terminal_prints_the_bar_and_stops(tmp_path: Path, zotsink: Run) -> None:
    tasks = write_tasks(tmp_path / "tasks.txt", 4)
    assert zotsink("run", tasks, "out.txt", "--", "echo").returncode == 0
    r = zotsink("status", tasks, "out.txt", "--watch", "--interval", "0.1")
    assert r.returncode == 0
    lines = r.stderr.decode().splitlines()
    assert lines[0] == "[" + "#" * 30 + "] 4/4 ok 100%, 0 running, 0 not ok"
    assert lines[1] == "zotsink: 4 tasks: 4 ok"


def test_status_needs_out_or_ledger(tmp_path: Path, zotsink: Run) -> None:
    write_tasks(tmp_path / "tasks.txt", 1)
    r = zotsink("status", "tasks.txt")
    assert r.returncode == 2
    assert b"give OUT or --ledger PATH" in r.stderr
