"""The ledger read back after what crashes and typos leave: a torn row, a reused pid, a
mistyped ``--ledger`` path; and a chunk's rows found without reading the others.

Every test drives real ``zotsink run``, ``status`` and ``missing`` processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import begins, rewrite_rows
from zotsink import ZotsinkWarning, read_ledger
from zotsink._ledger.v1 import COLUMNS as V1_COLUMNS

#: the columns every ledger of zotsink 0.1 has (format 1)
LEDGER_COLUMNS = V1_COLUMNS[:16]

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def write_tasks(path: Path, n: int) -> Path:
    path.write_text("".join(f"item{i}\n" for i in range(1, n + 1)))
    return path


def status_json(zotsink: Run, tasks: Path, out: str) -> tuple[int, dict, str]:
    r = zotsink("status", tasks, out, "--json")
    return r.returncode, json.loads(r.stdout or b"{}"), r.stderr.decode()


def test_a_torn_last_row_is_skipped_once_a_run_appends_behind_it(
    tmp_path: Path, zotsink: Run
) -> None:
    tasks = write_tasks(tmp_path / "tasks.txt", 4)
    r = zotsink("run", tasks, "out.tsv", "--index", "1", "--chunk", "2", "--", "echo")
    assert r.returncode == 0, r.stderr
    ledger = tmp_path / "out.tsv.ledger"
    # A run killed while appending its next claim row: the row stops mid-field.
    torn = b"claim\t1795000000.000000\tdeadbeef\t3-4\t9a"
    with open(ledger, "ab") as f:
        f.write(torn)
    at = ledger.stat().st_size - len(torn)
    r = zotsink("run", tasks, "out.tsv", "--index", "2", "--chunk", "2", "--", "echo")
    assert r.returncode == 0, r.stderr
    lines = ledger.read_bytes().split(b"\n")
    assert torn in lines  # ended with a newline by the next writer, never cut
    code, report, err = status_json(zotsink, tasks, "out.tsv")
    assert code == 0, err
    assert report["total"] == 4 and report["counts"]["ok"] == 4, report
    assert "torn row" in err and f"byte {at}" in err, err
    r = zotsink("missing", tasks, "--ledger", ledger)
    assert (r.returncode, r.stdout) == (0, b""), r.stderr
    # A third run skips all four: the torn row named no task it trusts.
    r = zotsink("run", tasks, "out.tsv", "--", "echo")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.tsv").read_text() == "item1\nitem2\nitem3\nitem4\n"


def test_a_damaged_row_is_passed_by_with_a_warning_naming_it(tmp_path: Path, zotsink: Run) -> None:
    """A line that is no whole row (its CRC does not match: damage, or a foreign writer's
    line) says nothing: every reader passes it by and says where it was."""
    tasks = write_tasks(tmp_path / "tasks.txt", 2)
    r = zotsink("run", tasks, "out.tsv", "--", "echo")
    assert r.returncode == 0, r.stderr
    ledger = tmp_path / "out.tsv.ledger"
    at = ledger.stat().st_size
    with open(ledger, "ab") as f:
        f.write(b"\t".join([b"x"] * 30) + b"\n")
    r = zotsink("status", tasks, "out.tsv")
    assert r.returncode == 0, r.stderr
    assert b"2 tasks: 2 ok" in r.stderr
    assert f"torn row(s), the first at byte {at}".encode() in r.stderr, r.stderr
    assert b"Traceback" not in r.stderr
    r = zotsink("run", tasks, "out.tsv", "--", "echo")  # and runs append behind it
    assert r.returncode == 0 and b"2 already ok" in r.stderr, r.stderr


def test_missing_with_a_mistyped_ledger_is_an_error(tmp_path: Path, zotsink: Run) -> None:
    tasks = write_tasks(tmp_path / "tasks.txt", 5)
    r = zotsink("run", tasks, "out.tsv", "--", "echo")
    assert r.returncode == 0, r.stderr
    for extra in ([], ["--array"]):
        r = zotsink("missing", tasks, "--ledger", "out.tsv.ledgr", *extra)
        assert r.returncode == 2, r
        assert r.stdout == b""
        assert b"out.tsv.ledgr does not exist" in r.stderr, r.stderr
    r = zotsink("missing", tasks, "--ledger", "out.tsv.ledger", "--array")
    assert (r.returncode, r.stdout) == (0, b""), r.stderr


def test_a_start_row_whose_pid_now_belongs_to_another_process_is_lost(
    tmp_path: Path, zotsink: Run
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("echo $$ > ready; exec sleep 60\n")
    os.mkfifo(tmp_path / "ready")
    run = subprocess.Popen(
        [sys.executable, "-m", "zotsink", "run", tasks, "out.tsv", "--shell"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ledger = tmp_path / "out.tsv.ledger"
        # The task has started; its begin row, naming its process, follows a moment later.
        task_pid = int((tmp_path / "ready").read_text())
        deadline = time.monotonic() + 60
        while not begins(ledger):
            assert time.monotonic() < deadline, "no begin row"
            time.sleep(0.01)
        code, report, err = status_json(zotsink, tasks, "out.tsv")
        assert code == 1
        assert report["counts"]["running"] == 1, (report, err)
        # run and its task (in a session of its own), as a node's death would
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
        os.kill(task_pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while os.path.exists(f"/proc/{task_pid}"):  # reaped by init: gone for good
            assert time.monotonic() < deadline, "the task did not end"
            time.sleep(0.01)
        # The kernel gives run's pid to an unrelated process: this one stands in for it.
        other = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
        )
        try:

            def reused(row):  # the run's pid and its task's now name `other`
                if row.kind == "run":
                    return row._replace(fields={**row.fields, "pid": str(other.pid)})
                if row.kind == "begin":
                    num_att, _pid, start = row.fields["items"].split(":")
                    items = f"{num_att}:{other.pid}:{start}"
                    return row._replace(fields={**row.fields, "items": items})
                return row

            rewrite_rows(ledger, reused)
            code, report, err = status_json(zotsink, tasks, "out.tsv")
            assert code == 1
            assert report["counts"]["lost"] == 1 and report["counts"]["running"] == 0, (
                report,
                err,
            )
            r = zotsink("missing", tasks, "--ledger", ledger)
            assert (r.returncode, r.stdout) == (0, b"echo $$ > ready; exec sleep 60\n"), r.stderr
        finally:
            other.communicate(b"")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


def test_a_ledger_of_zotsink_0_1_is_read_and_its_torn_row_passed_by(tmp_path: Path) -> None:
    ledger = tmp_path / "l"
    head = "\t".join(LEDGER_COLUMNS)
    rows = [
        "\t".join(
            [
                "end",
                "2026-11-24T10:00:00.000000Z",
                str(n),
                f"k{n}",
                "1",
                "",
                "",
                "h",
                "1",
                "ok",
                "0",
                "",
                "0.5",
                "1",
                "2",
                "",
            ]
        )
        for n in range(1, 2001)
    ]
    rows.insert(700, "start\t2026-11-24T10:00:00.000000Z\t1500\tk15")  # torn, then more
    ledger.write_text(head + "\n" + "\n".join(rows) + "\n")
    with pytest.warns(ZotsinkWarning, match="left out 1 torn row"):
        got = [(e.tasknum, e.status) for e in read_ledger(ledger) if e.event == "end"]
    assert got == [(n, "ok") for n in range(1, 2001)]


def test_a_long_run_of_zero_bytes_is_skipped_without_holding_it(
    tmp_path: Path, zotsink: Run
) -> None:
    """What a node crash can leave where a row was being written: no newline, only zeros."""
    tasks = write_tasks(tmp_path / "tasks.txt", 2)
    r = zotsink("run", tasks, "out.tsv", "--index", "1", "--", "echo")
    assert r.returncode == 0, r.stderr
    size = 80 << 20
    with open(tmp_path / "out.tsv.ledger", "ab") as f:
        f.truncate(f.tell() + size)  # a hole reads as zeros
    r = zotsink("run", tasks, "out.tsv", "--index", "2", "--", "echo")
    assert r.returncode == 0, r.stderr
    # Started from a small launcher: Linux charges a child the memory of the process it
    # was forked from, up to its exec, and a pytest worker may have grown large.
    launch = (
        "import os, subprocess, sys\n"
        "p = subprocess.Popen(sys.argv[1:], stderr=subprocess.PIPE)\n"
        "err = p.stderr.read()\n"
        "_pid, status, ru = os.wait4(p.pid, 0)\n"
        "sys.stderr.buffer.write(err)\n"
        "print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", launch, sys.executable, "-m", "zotsink", "status", tasks, "out.tsv"],
        cwd=tmp_path,
        capture_output=True,
        check=True,
    )
    code, maxrss_kib = map(int, r.stdout.split())
    assert code == 0, r.stderr
    assert b"2 tasks: 2 ok" in r.stderr and b"torn row" in r.stderr, r.stderr
    assert maxrss_kib * 1024 < size, maxrss_kib  # never held whole


def test_status_and_missing_keep_a_few_bytes_per_task(tmp_path: Path) -> None:
    """100,000 tasks (200,000 rows): each command's peak RSS stays far below what holding
    every row as objects takes (about 2 kB a task)."""
    n = 100_000
    (tmp_path / "tasks.txt").write_text("".join(f"img/{i:07d}.jpg\n" for i in range(1, n + 1)))
    host = os.uname().nodename
    rows = []
    for i in range(1, n + 1):
        common = f"{i}\timg/{i:07d}.jpg\t1\t77\t{i // 100}\t{host}\t1"
        rows.append(f"start\t2026-11-24T10:00:00.{i:06d}Z\t{common}\t\t\t\t\t\t\t\n")
        status = "failed" if i % 1000 == 0 else "ok"
        rows.append(
            f"end\t2026-11-24T11:00:00.{i:06d}Z\t{common}\t{status}\t0\t\t{i % 7}\t1\t9\t\n"
        )
    (tmp_path / "out.tsv.ledger").write_text("\t".join(LEDGER_COLUMNS) + "\n" + "".join(rows))
    launch = (
        "import os, resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "sys.stderr.buffer.write(p.stderr)\n"
        "sys.stdout.buffer.write(p.stdout)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "sys.stdout.write(f'\\n{p.returncode} {peak}')\n"
    )
    zotsink = [sys.executable, "-m", "zotsink"]
    failed = ",".join(str(i) for i in range(1000, n + 1, 1000))
    for argv, code in (
        (["status", "tasks.txt", "out.tsv", "--json"], 1),
        (["missing", "tasks.txt", "--ledger", "out.tsv.ledger", "--array"], 0),
    ):
        r = subprocess.run(
            [sys.executable, "-c", launch, *zotsink, *argv], cwd=tmp_path, capture_output=True
        )
        out, _, tail = r.stdout.rpartition(b"\n")
        got, maxrss_kib = map(int, tail.split())
        assert got == code, r.stderr
        if argv[0] == "status":
            report = json.loads(out)
            assert (report["total"], report["counts"]["ok"]) == (n, n - 100)
            assert report["not_ok"] == failed
        else:
            assert out == failed.encode() + b"\n"
        assert maxrss_kib < 100 * 1024, (argv[0], maxrss_kib)
