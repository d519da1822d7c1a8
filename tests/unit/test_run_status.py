"""Status reports and resubmission specs from a ledger (zotsink._run.status)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ledgers import Book
from zotsink import UsageError
from zotsink._run.status import parse_states, resubmit_specs, task_status, tasks_in
from zotsink.cli.status_words import status_lines

#: 2026-01-01T00:00:00Z
T0 = 1767225600.0


def ledger_with(path: Path, rows: list[tuple[str, int, str, dict[str, object]]]) -> None:
    """A run's rows, each event two seconds after the one before (a start is the task's
    claim and begin, by this process)."""
    times = []
    for i, (event, _num, _key, _fields) in enumerate(rows):
        times += [T0 + 2 * i] * (2 if event == "start" else 1)
    book = Book(path, clock=[T0 - 1, *times])  # the run row first
    for event, num, key, fields in rows:
        if event == "start":
            book.claim(num, 1, key).begin(num, 1)
        else:
            status = str(fields.get("status", "ok"))
            code = str(fields.get("exit", "0" if status == "ok" else "1"))
            seconds = float(str(fields.get("seconds", "0.1")))
            book.end(num, 1, status=status, code=code, seconds=seconds)
    book.write()


def test_counts_rate_eta_and_slowest(tmp_path: Path) -> None:
    tasks = tmp_path / "t.txt"
    tasks.write_text("a\nb\nc\nd\ne\n")
    ledger_with(
        tmp_path / "l",
        [
            ("start", 1, "a", {}),  # 00:00
            ("end", 1, "a", {"status": "ok", "seconds": "2.000"}),  # 00:02
            ("start", 2, "b", {}),  # 00:04
            ("end", 2, "b", {"status": "ok", "seconds": "9.500"}),  # 00:06
            ("start", 3, "c", {}),  # 00:08
            ("end", 3, "c", {"status": "failed", "exit": 2, "seconds": "0.100"}),  # 00:10
        ],
    )
    r = task_status(tasks, tmp_path / "l", slowest=2)
    assert r.total == 5
    assert {k: v for k, v in r.counts.items() if v} == {"ok": 2, "failed": 1, "never": 2}
    assert r.rate == pytest.approx(2 / 10)
    assert r.eta is None  # nothing runs: a rate says nothing of when the rest is done
    assert r.slowest == [(2, 9.5, "b"), (1, 2.0, "a")]
    # settled: nothing runs, and no run or job is left that could start the 2 never run
    assert not r.all_ok and r.settled and not r.waiting
    d = r.to_dict()
    assert d["not_ok"] == "3-5" and d["rate_per_hour"] == 720.0
    assert status_lines(r)[0] == "5 tasks: 2 ok, 1 failed, 2 never"


def test_an_eta_while_tasks_run(tmp_path: Path) -> None:
    tasks = tmp_path / "t.txt"
    tasks.write_text("a\nb\nc\nd\n")
    ledger_with(
        tmp_path / "l",
        [
            ("start", 1, "a", {}),  # 00:00
            ("end", 1, "a", {"status": "ok", "seconds": "2.000"}),  # 00:02
            ("start", 2, "b", {}),  # 00:04, by this process: it runs
        ],
    )
    r = task_status(tasks, tmp_path / "l")
    assert r.counts["running"] == 1
    assert r.rate == pytest.approx(1 / 4)
    assert r.eta == pytest.approx(3 / 0.25)


def test_no_ledger_yet_means_never(tmp_path: Path) -> None:
    tasks = tmp_path / "t.txt"
    tasks.write_text("a\n#b\nc\n")
    r = task_status(tasks, tmp_path / "none")
    assert (r.total, r.counts["never"], r.rate, r.eta) == (2, 2, None, None)


def test_states_option() -> None:
    # given-up is not asked for by default: those tasks are not to run again
    assert parse_states(None) == {
        "failed", "killed", "timeout", "oom", "interrupted", "running", "claimed", "lost",
        "never",
    }  # fmt: skip
    assert parse_states("failed, running/lost") == {"failed", "running", "lost"}
    with pytest.raises(UsageError, match="unknown task state 'done'"):
        parse_states("ok,done")


def test_resubmit_specs_and_lines(tmp_path: Path) -> None:
    tasks = tmp_path / "t.txt"
    tasks.write_text("".join(f"t{i}\n" for i in range(1, 26)))
    ledger_with(
        tmp_path / "l",
        [("end", n, f"t{n}", {"status": "ok"}) for n in range(1, 26) if n not in (4, 5, 23)]
        + [("end", 4, "t4", {"status": "failed"})],
    )
    # 5 and 23 never ran, 4 failed; chunks of 10
    assert resubmit_specs(tasks, tmp_path / "l", chunk=10) == [("1,3", 1)]
    assert resubmit_specs(tasks, tmp_path / "l", chunk=10, base=0) == [("0,2", 0)]
    assert resubmit_specs(tasks, tmp_path / "l", states="failed") == [("4", 1)]
    assert resubmit_specs(tasks, tmp_path / "l", max_array=11) == [("4-5", 1), ("3", -19)]
    assert [t.line for t in tasks_in(tasks, tmp_path / "l")] == ["t4", "t5", "t23"]


def test_rate_reads_in_a_unit_with_a_few_digits() -> None:
    from zotsink import rate_text

    assert rate_text(6939896.8 / 3600) == "1,928 tasks/s"
    assert rate_text(5.3) == "5.30 tasks/s"
    assert rate_text(0.5) == "30.0 tasks/min"
    assert rate_text(150 / 3600) == "2.50 tasks/min"
    assert rate_text(36 / 3600) == "36.0 tasks/h"
    assert rate_text(0.72 / 3600) == "0.72 tasks/h"


def test_slow_lines_only_for_tasks_slow_against_the_median(tmp_path: Path) -> None:
    tasks = tmp_path / "t.txt"
    tasks.write_text("a\nb\nc\nd\ne\n")
    alike = [("end", n, k, {"status": "ok", "seconds": "2.000"}) for n, k in enumerate("abcd", 1)]
    ledger_with(tmp_path / "l", alike)
    r = task_status(tasks, tmp_path / "l")
    assert len(r.slowest) == 4 and r.median == 2.0
    lines = status_lines(r)
    assert not [x for x in lines if x.startswith("slow:")]  # nothing is slow
    assert lines[0] == "5 tasks: 4 ok, 1 never"
    ledger_with(tmp_path / "l2", [*alike, ("end", 5, "e", {"status": "ok", "seconds": "30"})])
    r = task_status(tasks, tmp_path / "l2")
    assert [x for x in status_lines(r) if x.startswith("slow:")] == [
        "slow: task 5 took 30 s (median 2.0 s): e"
    ]
    one = tmp_path / "one.txt"
    one.write_text("a\n")
    assert status_lines(task_status(one, tmp_path / "l"))[0] == "1 task: 1 ok"
