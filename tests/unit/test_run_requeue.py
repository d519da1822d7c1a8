"""A requeued element (the same job and index started again: ``scontrol requeue``,
preemption, NODE_FAIL with ``--requeue``): its run rows name the start, the runs of its
earlier start are over once a later one began or the scheduler started it again, and its
attempts are counted as its own in ``status --by element``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ledgers import Book
from zotsink._ledger.format import (
    FIELDS,
    INITIAL,
    Row,
    element_name,
    element_text,
    parse_element,
    tasks_text,
)
from zotsink._ledger.view import LedgerView
from zotsink._run import scheduler
from zotsink._run.alive import Judge, element_key, run_element
from zotsink._run.report import attempts_by, iter_attempts


def test_an_element_names_its_start() -> None:
    assert element_text("7", 0) == "7" and element_text("7", 2) == "7+2"
    assert element_text("", 1) == "+1"  # a job without an array, started again
    assert parse_element("7+2") == ("7", 2) and parse_element("7") == ("7", 0)
    assert parse_element("+1") == ("", 1) and parse_element("7+x") == ("7", 0)
    assert element_name("c:44", "7+2") == "c:44[7] restart 2"
    assert element_name("c:44", "") == "c:44" and element_name("", "3") == ""
    assert element_key("c:44", "7+2") == "c:44_7"
    assert element_key("44", "+1") == "44"


def test_a_run_writes_slurm_s_restart_count() -> None:
    job = {"SLURM_JOB_ID": "45"}
    assert run_element("7", job) == "7"
    assert run_element("7", {**job, "SLURM_RESTART_COUNT": "3"}) == "7+3"
    assert run_element("", {**job, "SLURM_RESTART_COUNT": "1"}) == "+1"
    assert run_element("7", {"SLURM_RESTART_COUNT": "3"}) == "7"  # no Slurm job: no restarts


def run_row(run: str, element: str, hostid: str = "other.1") -> Row:
    f = dict(zip(FIELDS["run"], ("n2", hostid, "100", "5", "c:44", element, "")))
    return Row("run", 1.0, run, f, INITIAL)


def claim_row(run: str, nums: list[int]) -> Row:
    f = dict(zip(FIELDS["claim"], (tasks_text((n, 1) for n in nums), "0")))
    return Row("claim", 2.0, run, f, INITIAL)


def begin_row(run: str, num: int) -> Row:
    return Row("begin", 3.0, run, {"items": f"{num}.1:555:9"}, INITIAL)


def test_a_later_start_of_an_element_supersedes_the_runs_of_the_earlier_one() -> None:
    view = LedgerView()
    rows = [
        run_row("a", "7"),
        run_row("b", "7"),  # a second run of the same start: not superseded
        run_row("c", "8+1"),  # another element
        run_row("d", "7+1"),
    ]
    view.feed(enumerate(rows))
    by = {r.id: r for r in view.runs}
    assert by["a"].superseded and by["b"].superseded
    assert not by["c"].superseded and not by["d"].superseded
    assert by["d"].element_name == "c:44[7] restart 1" and by["d"].restart == 1


@pytest.fixture
def no_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No scheduler command anywhere: a question would be no answer (None)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("SLURM_JOB_ID", "JOB_ID", "PBS_JOBID", "SGE_ROOT"):
        monkeypatch.delenv(var, raising=False)
    scheduler.reset()
    yield
    scheduler.reset()


def test_the_tasks_of_a_superseded_start_are_free_at_once(no_scheduler: None) -> None:
    view = LedgerView()
    view.feed(
        enumerate(
            [
                run_row("a", "7"),
                claim_row("a", [1, 2]),
                begin_row("a", 2),
                run_row("d", "7+1"),
                claim_row("d", [3]),
            ]
        )
    )
    view.settle(Judge(wait=0.0))
    # the first start's claimed task is free, its begun one lost: its processes are gone
    assert view.state(1) == "never" and view.state(2) == "lost"
    # the live start's task: nothing here can tell (no scheduler), so it counts as held
    assert view.state(3) == "claimed" and 3 in view.unknown


def test_a_requeued_element_s_attempts_are_its_own_in_status_by_element(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("a\nb\nc\n")
    ledger = tmp_path / "out.ledger"
    first = Book(ledger, hostid="n2.1", job="c:44", element="7")
    first.claim(1, line="a").claim(2, line="b").begin(1).end(1).write()
    again = Book(ledger, hostid="n3.1", job="c:44", element="7+1")
    again.claim(2, 2, line="b").claim(3, line="c").begin(2, 2).end(2, 2).begin(3).end(3).write()
    table = dict(attempts_by(iter_attempts(tasks, ledger), "element"))
    # one cluster: the jobs are named as squeue names them
    assert set(table) == {"44[7]", "44[7] restart 1"}
    assert table["44[7] restart 1"]["attempts"] == 2 and table["44[7]"]["attempts"] == 1
    # a job of a second cluster: each is named with its cluster
    Book(ledger, hostid="n4.1", job="d:44", element="7").claim(3, 2, line="c").begin(3, 2).write()
    table = dict(attempts_by(iter_attempts(tasks, ledger), "element"))
    assert set(table) == {"c:44[7]", "c:44[7] restart 1", "d:44[7]"}
