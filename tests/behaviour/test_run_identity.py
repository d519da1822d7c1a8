"""What an ``ok`` row proves, and what the readers do when OUT or the task list changed.

An ``ok`` row names its piece of OUT by place (``out_offset``, ``bytes``), by file
(``out_ino``) and by content (``out_crc``). A piece that is not there, not whole or not the
same is never shown as that task's records: ``cat`` and ``verify`` say which tasks,
``status`` counts them ``lost``, and a resubmission runs them again when OUT is another
file or shorter. A task is its number and its line: after a line was inserted at the top
of the task list, the view holds each line once. A ledger of a newer release is read for
what the releases share. Real ``zotsink`` processes throughout.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ledgers import ledger_rows

Run = Callable[..., subprocess.CompletedProcess[bytes]]

# One record per task: its line and a number; "rotate" first waits for the end rows of
# tasks 1 and 2 (their pieces are in OUT then), renames OUT as logrotate does, then prints.
TASK = r"""
import os, sys, time

item = sys.argv[1]
if item == "rotate":
    end = time.monotonic() + 60
    while time.monotonic() < end:
        with open("out.tsv.ledger") as f:
            ends = [ln.split("\t")[2] for ln in f if ln.startswith("end\t")]
        if "1" in ends and "2" in ends:
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


def _newer(d: Path, *, column: bool, kind: bool) -> None:
    """Make the ledger look as a newer release might write it: a column after the known
    ones (every row has it), and a row of a kind this release does not know."""
    path = d / "out.tsv.ledger"
    lines = path.read_text().splitlines()
    head = lines[0].split("\t")
    if column:
        head.append("future")
        lines = [lines[0] + "\tfuture"] + [ln + "\tx" for ln in lines[1:]]
    if kind:
        row = dict.fromkeys(head, "")
        row.update(event="pause", time="2026-11-26T10:00:00.000000Z", tasknum="1")
        row.update(key="alpha", attempt="1", host="elsewhere", pid="1")
        lines.append("\t".join(row[c] for c in head))
    path.write_text("".join(ln + "\n" for ln in lines))


def test_a_newer_release_s_row_kind_is_passed_over_not_a_failure(job: Path, zotsink: Run) -> None:
    tasks(job, ["alpha", "beta"])
    assert zotsink("run", "tasks.txt", "out.tsv", *CMD).returncode == 0
    _newer(job, column=False, kind=True)
    r = zotsink("status", "tasks.txt", "out.tsv")
    assert r.returncode == 0 and "2 ok" in r.stderr.decode(), r.stderr.decode()
    r = zotsink("missing", "tasks.txt", "--ledger", "out.tsv.ledger")
    assert r.returncode == 0 and r.stdout == b"", r.stdout
    r = zotsink("run", "tasks.txt", "out.tsv", "--max-attempts", "1", *CMD)
    assert r.returncode == 0 and "2 already ok" in r.stderr.decode(), r.stderr.decode()
    assert ok_rows(job) == Counter({"alpha": 1, "beta": 1})


def test_a_newer_release_s_column_is_kept_and_its_ledger_appended_to(
    job: Path, zotsink: Run
) -> None:
    tasks(job, ["alpha", "beta"])
    assert zotsink("run", "tasks.txt", "out.tsv", *CMD).returncode == 0
    _newer(job, column=True, kind=True)
    tasks(job, ["alpha", "beta", "gamma"])
    r = zotsink("run", "tasks.txt", "out.tsv", *CMD)
    assert r.returncode == 0, r.stderr.decode()
    assert "1 ok, 2 already ok" in r.stderr.decode()
    rows = ledger_rows(job / "out.tsv.ledger")
    assert all(len(r) == len(rows[0]) and None not in r for r in rows)
    assert rows[-1]["future"] == "" and rows[-1]["key"] == "gamma"
    lines, err = cat(zotsink, "out.tsv")
    assert lines == records(["alpha", "beta", "gamma"]) and err == ""
    r = zotsink("status", "tasks.txt", "out.tsv")
    assert r.returncode == 0 and "3 ok" in r.stderr.decode(), r.stderr.decode()
