"""The control rows of a ledger (zotsink._run.control): their fold, fed rows, and every
other reader of the ledger passing them by."""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

import pytest
from zotsink._ledgerfile import claims, read_ledger
from zotsink._run.control import Control, control_event, fold_rows, read_control
from zotsink._run.states import LedgerTally, read_begin, states_of

from zotsink import UsageError, verify
from zotsink._run.close import close_tasks, stop_runs
from zotsink._run.ledger import Ledger
from zotsink._run.report import read_attempts
from zotsink._run.runs import read_runs
from zotsink._run.status import failed_tasks, ledger_missing, task_status
from zotsink._run.tasks import Task

T = "2026-11-26T10:00:00.000000Z"


def _row(event: str, num: int = 0, note: str = "") -> bytes:
    fields = [event, T, str(num), "", "", "", "", "h", "1", "", "", "", "", "", "", note, "", ""]
    return "\t".join(fields).encode()


def test_control_event_names_control_rows_only() -> None:
    assert control_event(_row("close")) == "close"
    assert control_event(_row("stop")) == "stop"
    assert control_event(_row("open")) == "open"
    assert control_event(_row("run")) is None  # settings, not a control row
    assert control_event(_row("stop", 3)) is None  # task 3: not task 0
    assert control_event(_row("start", 0)) is None
    assert control_event(b"stop") is None and control_event(b"") is None


def test_fold_close_open_and_the_latest_counts() -> None:
    c = Control()
    assert not c.closed and c.stop_at == -1 and not c.stopped(0)
    c = c.fold("close", 100, T, '{"lines": "12"}')
    assert c.closed and c.closed_lines == 12 and c.closed_time == T
    c = c.fold("open", 200)
    assert not c.closed and c.closed_lines is None
    c = c.fold("close", 300, T, "not json")
    assert c.closed and c.closed_lines is None
    assert c.fold("start", 400) == c  # any other event changes nothing


def test_a_stop_reaches_the_runs_begun_before_it_only() -> None:
    c = Control().fold("stop", 500, T)
    assert c.stopped(100) and c.stopped(500)  # began with a snapshot before the stop
    assert not c.stopped(501)  # began after it: proceeds
    c = c.fold("stop", 900, T)
    assert c.stop_at == 900 and c.stopped(600)
    assert c.fold("stop", 700).stop_at == 900  # offsets only grow; an older one is no news


def test_feed_takes_any_row_and_decodes_control_rows_only() -> None:
    rows = [(10, _row("start", 1)), (20, _row("close", 0, '{"lines": "3"}')), (30, b"torn")]
    rows += [(40, _row("stop")), (50, _row("run")), (60, b"stop\t" + T.encode() + b"\t0")]
    c = fold_rows(rows)
    assert c == Control(True, T, 3, 40, T)  # the torn stop at 60 is no row
    assert fold_rows([(70, _row("open"))], c).closed is False


def test_close_and_stop_write_rows_readers_fold(tmp_path: Path) -> None:
    tasks = tmp_path / "t.txt"
    tasks.write_text("a\nb\nc")  # three lines, the last without its newline
    ledger = tmp_path / "out.tsv.ledger"
    with pytest.raises(UsageError, match="no run has begun"):
        stop_runs(tasks, ledger)
    assert not ledger.exists()
    state, wrote = close_tasks(tasks, ledger)
    assert wrote and state.closed and state.closed_lines == 3
    assert close_tasks(tasks, ledger) == (state, False)  # closed already: no row
    assert close_tasks(tasks, ledger, reopen=True)[0].closed is False
    assert close_tasks(tasks, ledger, reopen=True)[1] is False  # open already
    size = os.path.getsize(ledger)
    stopped = stop_runs(tasks, ledger)
    assert stopped.stop_at == size and stopped.stopped(size) and not stopped.stopped(size + 1)
    control, end = read_control(ledger)
    assert control == stopped and end == os.path.getsize(ledger)
    rows = ledger.read_bytes().split(b"\n")[1:-1]
    assert [r.split(b"\t")[0] for r in rows] == [b"close", b"open", b"stop"]
    assert all(r.split(b"\t")[2] == b"0" and r.split(b"\t")[7] for r in rows)  # host noted


def test_control_rows_are_no_task_failure_or_unknown_row_anywhere(tmp_path: Path) -> None:
    """Every reader of the ledger passes control rows by: the snapshot fold, the tally,
    missing, failed, the attempts, claims, verify and a run's claim."""
    tasks = tmp_path / "t.txt"
    tasks.write_text("a\nb\n")
    ledger = tmp_path / "out.tsv.ledger"
    book = Ledger(ledger, env={})
    book.append(
        [
            book.start_row(1, "a", 1),
            book.end_row(1, "a", 1, status="ok", out_offset=0, bytes=2),
            book.control_row("close", '{"lines": "2"}'),
            book.control_row("stop"),
            book.control_row("open"),
        ]
    )
    book.close()
    keys = {1: "a", 2: "b"}
    assert [r.tasknum for r in read_ledger(ledger)] == [1, 1]
    assert {n: s.state for n, s in states_of(keys, read_ledger(ledger)).items()} == {
        1: "ok",
        2: "never",
    }
    tally = LedgerTally(ledger, keys)
    assert tally.counts()["ok"] == 1 and tally.counts()["never"] == 1
    assert sum(tally.counts().values()) == 2 and tally.settings is None
    states, _seen, settings = read_begin(ledger, keys)
    assert states[1].state == "ok" and states[2].state == "never" and settings is None
    assert [t.num for t in ledger_missing(tasks, ledger).tasks] == [2]
    assert failed_tasks(tasks, ledger, tmp_path / "none.log")[0] == []
    assert [(a.tasknum, a.status) for a in read_attempts(tasks, ledger)] == [(1, "ok")]
    found = claims(ledger)
    assert found is not None and [(p.offset, p.length) for p in found.parts] == [(0, 2)]
    report = task_status(tasks, ledger)
    assert report.total == 2 and report.to_run == 1
    assert report.runs is not None and report.runs.runs == 1  # the control rows are no run
    assert verify(ledger, format="tsv").ok
    # a run's claim reads them as news, and claims task 2 all the same
    run = Ledger(ledger, env={})
    begun = read_begin(ledger, {2: "b"})
    run.begin({2: "b"}, begun[0], begun[1], rerun=False)
    extra = Ledger(ledger, env={})
    extra.append([extra.control_row("close", '{"lines": "2"}')])
    extra.close()
    picked, dropped = run.claim(deque([Task(2, "b")]), 1, [])
    run.close()
    assert [(t.num, a) for t, a in picked] == [(2, 1)] and dropped == []
    assert run.control.closed and run.control.closed_lines == 2 and not run.stopped


def test_a_stop_row_after_a_run_began_stops_its_claims_not_a_later_runs(tmp_path: Path) -> None:
    ledger = tmp_path / "out.tsv.ledger"
    early = Ledger(ledger, env={})
    early.begin({1: "a", 2: "b"}, *read_begin(ledger, {1: "a", 2: "b"})[:2], rerun=False)
    picked, _ = early.claim(deque([Task(1, "a")]), 1, [])
    assert [t.num for t, _ in picked] == [1]
    stopper = Ledger(ledger, env={})
    stopper.append([stopper.control_row("stop")])
    stopper.close()
    picked, _ = early.claim(deque([Task(2, "b")]), 1, [])  # reads the stop as news
    early.close()
    assert picked == [] and early.stopped
    late = Ledger(ledger, env={})  # begun after the stop: it proceeds
    begun = read_begin(ledger, {2: "b"})
    control, _size = read_control(ledger)
    late.begin({2: "b"}, begun[0], begun[1], rerun=False, control=control)
    picked, _ = late.claim(deque([Task(2, "b")]), 1, [])
    late.close()
    assert [t.num for t, _ in picked] == [2] and not late.stopped


def test_read_runs_of_a_ledger_with_no_run(tmp_path: Path) -> None:
    runs = read_runs(tmp_path / "none.ledger")
    assert runs.live == [] and runs.unknown == [] and runs.runs == 0
    assert runs.control == Control()


def test_read_runs_tells_live_runs_from_dead_ones_by_pid_and_start_time(tmp_path: Path) -> None:
    from zotsink._run.alive import PROC_START

    ledger = tmp_path / "l"
    me = Ledger(ledger, env={"SLURM_JOB_ID": ""})  # this process: a live run
    rows = [me.start_row(1, "a", 1), me.end_row(1, "a", 1, status="ok", seconds="1")]
    rows += [me.start_row(2, "b", 1)]
    # the same pid with another start time: a dead run whose pid was given to this process
    ghost = me.start_row(3, "c", 1).replace(me.start_row(3, "c", 1).split(b"\t")[15], b"x")
    ghost = ghost.replace(b"\tx\t", b"\t" + (PROC_START + "1").encode() + b"\t")
    me.append([*rows, ghost, me.control_row("stop")])
    me.append([me.start_row(4, "d", 1)])
    me.close()
    runs = read_runs(ledger)
    assert runs.runs == 2  # this process, and the ghost with its own start time
    [live] = runs.live
    assert live.pid == str(os.getpid()) and live.host == os.uname().nodename
    assert (live.started, live.ok, live.not_ok, live.running) == (3, 1, 0, 2)
    assert live.stopping and runs.stopping == [live]
    assert runs.unknown == [] and runs.control.stop_at > 0
    d = runs.to_dict()
    assert d["stopping"] == 1 and d["live"][0]["pid"] == str(os.getpid())
