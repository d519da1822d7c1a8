"""What an ``ok`` end proves, and what the readers do when OUT or the task list changed.

An ``end`` row names its tasks' records in OUT by place (each block's offset and length),
by file (OUT's inode) and by content (each block's CRC). A piece that is not there, not
whole or not the same is never shown as that task's records: ``cat`` and ``verify`` say
which tasks, ``status`` counts them ``lost``, and a resubmission runs them again when OUT
is another file or shorter. A task is its number and its line: after a line was inserted
at the top of the task list, the view holds each line once. A newer release's rows of a
kind this release does not know are passed over; a ledger of a newer format is refused.
Real ``zotsink`` processes throughout.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import Book, ledger_rows

Run = Callable[..., subprocess.CompletedProcess[bytes]]

# One record per task: its line and a number; "rotate" first waits for the end rows of
# tasks 1 and 2 (their pieces are in OUT then), renames OUT as logrotate does, then prints.
TASK = r"""
import os, sys, time

from zotsink import read_ledger

item = sys.argv[1]
if item == "rotate":
    end = time.monotonic() + 60
    while time.monotonic() < end:
        ends = {e.tasknum for e in read_ledger("out.tsv.ledger") if e.event == "end"}
        if {1, 2} <= ends:
            break
        time.sleep(0.01)
    os.rename("out.tsv", "out.tsv.1")
print(f"{item}\t{len(item)}", flush=True)
"""
CMD = ("--columns", "item,n", "--", sys.executable, "task.py")


def ok_rows(d: Path) -> Counter[str]:
    rows = ledger_rows(d / "out.tsv.ledger")
    return Counter(r["key"] for r in rows if r["event"] == "end" and r["status"] == "ok")


def records(items: list[str]) -> list[str]:
    return sorted(f"{item}\t{len(item)}" for item in items)


def cat(zotsink: Run, *args: str) -> tuple[list[str], str]:
    r = zotsink("cat", *args)
    assert r.returncode == 0, r.stderr.decode()
    return sorted(r.stdout.decode().splitlines()[1:]), r.stderr.decode()


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "task.py").write_text(TASK)
    return tmp_path


def tasks(d: Path, items: list[str]) -> None:
    (d / "tasks.txt").write_text("".join(f"{i}\n" for i in items))


def test_out_emptied_between_runs_reruns_its_tasks_and_splices_nothing(
    job: Path, zotsink: Run
) -> None:
    tasks(job, ["alpha", "beta"])
    assert zotsink("run", "tasks.txt", "out.tsv", *CMD).returncode == 0
    (job / "out.tsv").write_bytes(b"")  # emptied in place: the same inode
    r = zotsink("status", "tasks.txt", "out.tsv")
    assert r.returncode == 1 and "2 lost" in r.stderr.decode(), r.stderr.decode()
    tasks(job, ["alpha", "beta", "gamma", "delta"])
    r = zotsink("run", "tasks.txt", "out.tsv", *CMD)
    assert r.returncode == 0, r.stderr.decode()
    lines, err = cat(zotsink, "out.tsv")
    assert lines == records(["alpha", "beta", "gamma", "delta"]) and err == ""
    assert ok_rows(job) == Counter({"alpha": 2, "beta": 2, "gamma": 1, "delta": 1})
    r = zotsink("verify", "out.tsv")
    assert r.returncode == 0 and "no problems" in r.stderr.decode()
    r = zotsink("status", "tasks.txt", "out.tsv")
    assert r.returncode == 0 and "4 ok" in r.stderr.decode()


def test_out_changed_in_place_is_never_shown_as_a_task_s_records(job: Path, zotsink: Run) -> None:
    tasks(job, ["alpha", "beta"])
    assert zotsink("run", "tasks.txt", "out.tsv", *CMD).returncode == 0
    out = job / "out.tsv"
    out.write_bytes(out.read_bytes().replace(b"beta\t4", b"BETA\t4"))  # same size
    lines, err = cat(zotsink, "out.tsv")
    assert lines == records(["alpha"])
    assert "task(s) (2)" in err and "changed in place" in err, err
    r = zotsink("verify", "out.tsv", "--json")
    assert r.returncode == 1
    assert "task 2: its ok row claims records OUT does not hold" in r.stderr.decode()
    assert b'"tasknum": 2' in r.stdout


def test_out_renamed_mid_run_keeps_each_task_once_and_a_resubmission_completes(
    job: Path, zotsink: Run
) -> None:
    items = ["a", "b", "rotate", "c"]
    tasks(job, items)
    r = zotsink("run", "tasks.txt", "out.tsv", "--jobs", "1", *CMD)
    assert r.returncode == 0, r.stderr.decode()
    assert (job / "out.tsv.1").exists()
    # the rotated file still holds what tasks 1 and 2 wrote, read with the ledger's help
    lines, _err = cat(zotsink, "out.tsv.1", "--ledger", "out.tsv.ledger")
    assert lines == records(["a", "b"])
    # the file now named OUT: the later tasks once, the earlier ones named as not there
    lines, err = cat(zotsink, "out.tsv")
    assert lines == records(["rotate", "c"])
    assert "2 task(s) (1, 2)" in err and "another file" in err, err
    r = zotsink("status", "tasks.txt", "out.tsv")
    assert r.returncode == 1 and "2 ok, 2 lost" in r.stderr.decode(), r.stderr.decode()
    # a resubmission runs them again, into the file OUT names now
    (job / "task.py").write_text(TASK.replace('item == "rotate"', "False"))
    r = zotsink("run", "tasks.txt", "out.tsv", *CMD)
    assert r.returncode == 0, r.stderr.decode()
    lines, err = cat(zotsink, "out.tsv")
    assert lines == records(items) and err == ""
    assert ok_rows(job) == Counter({"a": 2, "b": 2, "rotate": 1, "c": 1})


def test_verify_repair_refuses_a_run_s_out_and_says_what_to_do(job: Path, zotsink: Run) -> None:
    # tasks that print a trailing blank line: verify finds empty lines in a .tsv
    (job / "blank.py").write_text("import sys\nprint(sys.argv[1])\nprint()\n")
    tasks(job, ["a", "b", "c"])
    r = zotsink(
        "run", "tasks.txt", "out.tsv", "--columns", "item", "--", sys.executable, "blank.py"
    )
    assert r.returncode == 0, r.stderr.decode()
    before = (job / "out.tsv").read_bytes()
    r = zotsink("verify", "out.tsv")
    assert r.returncode == 1
    assert "verify --repair out.tsv`" not in r.stderr.decode()
    assert "zotsink cat out.tsv > COPY.tsv" in r.stderr.decode()
    r = zotsink("verify", "out.tsv", "--repair")
    assert r.returncode == 2, r.stderr.decode()
    err = r.stderr.decode()
    assert "was written by `zotsink run`" in err and "nothing was changed" in err
    assert "zotsink cat out.tsv > COPY.tsv" in err and "zotsink verify --repair COPY.tsv" in err
    assert (job / "out.tsv").read_bytes() == before
    assert not (job / "out.tsv.rejects").exists()
    # the way it names: a copy of the committed view, repaired
    r = zotsink("cat", "out.tsv")
    (job / "COPY.tsv").write_bytes(r.stdout)
    r = zotsink("verify", "--repair", "COPY.tsv")
    assert r.returncode == 0, r.stderr.decode()
    assert (job / "COPY.tsv").read_text() == "item\na\nb\nc\n"


def test_a_line_inserted_at_the_top_leaves_each_line_once_in_the_view(
    job: Path, zotsink: Run
) -> None:
    tasks(job, ["alpha", "beta"])
    assert zotsink("run", "tasks.txt", "out.tsv", *CMD).returncode == 0
    tasks(job, ["zero", "alpha", "beta"])
    r = zotsink("run", "tasks.txt", "out.tsv", *CMD)
    assert r.returncode == 0, r.stderr.decode()
    assert "3 ok" in r.stderr.decode()  # every task ran again: each has a new number
    lines, err = cat(zotsink, "out.tsv")
    assert lines == records(["zero", "alpha", "beta"]) and err == ""
    r = zotsink("verify", "out.tsv", "--json")
    assert r.returncode == 0 and b'"unclaimed": 2' in r.stdout


def _newer(d: Path) -> bytes:
    """A run of a newer release appends a row of a kind this release does not know, whole
    (about task 1 on another host); its bytes."""
    ledger = d / "out.tsv.ledger"
    Book(ledger, host="elsewhere").row("pause", "1", "until 10:00").write()
    return ledger.read_bytes().splitlines(keepends=True)[-1]


def test_a_newer_release_s_row_kind_is_passed_over_not_a_failure(job: Path, zotsink: Run) -> None:
    tasks(job, ["alpha", "beta"])
    assert zotsink("run", "tasks.txt", "out.tsv", *CMD).returncode == 0
    _newer(job)
    r = zotsink("status", "tasks.txt", "out.tsv")
    assert r.returncode == 0 and "2 ok" in r.stderr.decode(), r.stderr.decode()
    assert "torn" not in r.stderr.decode()
    r = zotsink("missing", "tasks.txt", "--ledger", "out.tsv.ledger")
    assert r.returncode == 0 and r.stdout == b"", r.stdout
    r = zotsink("run", "tasks.txt", "out.tsv", "--max-attempts", "1", *CMD)
    assert r.returncode == 0 and "2 already ok" in r.stderr.decode(), r.stderr.decode()
    assert ok_rows(job) == Counter({"alpha": 1, "beta": 1})


def test_a_newer_release_s_row_is_kept_and_its_ledger_appended_to(job: Path, zotsink: Run) -> None:
    tasks(job, ["alpha", "beta"])
    assert zotsink("run", "tasks.txt", "out.tsv", *CMD).returncode == 0
    newer = _newer(job)
    tasks(job, ["alpha", "beta", "gamma"])
    r = zotsink("run", "tasks.txt", "out.tsv", *CMD)
    assert r.returncode == 0, r.stderr.decode()
    assert "1 ok, 2 already ok" in r.stderr.decode() and "torn" not in r.stderr.decode()
    data = (job / "out.tsv.ledger").read_bytes()
    assert data.count(newer) == 1 and not data.endswith(newer)
    rows = ledger_rows(job / "out.tsv.ledger")
    assert rows[-1]["key"] == "gamma" and rows[-1]["status"] == "ok"
    lines, err = cat(zotsink, "out.tsv")
    assert lines == records(["alpha", "beta", "gamma"]) and err == ""
    r = zotsink("status", "tasks.txt", "out.tsv")
    assert r.returncode == 0 and "3 ok" in r.stderr.decode(), r.stderr.decode()


def test_a_ledger_of_a_newer_format_is_refused_and_left_as_it_is(job: Path, zotsink: Run) -> None:
    tasks(job, ["alpha", "beta"])
    ledger = job / "out.tsv.ledger"
    ledger.write_bytes(b"zotsink-ledger\t3\tzotsink>=0.9\nlater\t1\t2\t3\n")
    for args in (("status", "tasks.txt", "out.tsv"), ("run", "tasks.txt", "out.tsv", *CMD)):
        r = zotsink(*args)
        err = " ".join(r.stderr.decode().split())
        assert r.returncode == 1 and "a ledger of format 3" in err, err
        assert "zotsink>=0.9 reads it" in err and "keep this ledger as it is" in err, err
        assert "Traceback" not in err
    assert ledger.read_bytes() == b"zotsink-ledger\t3\tzotsink>=0.9\nlater\t1\t2\t3\n"
    assert not (job / "out.tsv").exists()
