"""The one fold of a ledger's rows: what each kind of row says of a task, what a run's
life says of its tasks (settled by a judge), the lines a claim proves, the parts of OUT
that ok ends claim, and the control rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ledgers import Book
from zotsink._ledger.control import Control
from zotsink._ledger.format import header_line
from zotsink._ledger.pieces import OutFile, out_file, piece_problem
from zotsink._ledger.read import Snapshot
from zotsink._ledger.view import STATES, LedgerView, RunRecord


def view_of(path: Path, keys: dict[int, str] | None = None, **kw: Any) -> LedgerView:
    view = LedgerView(keys, **kw)
    with Snapshot(path) as snap:
        view.feed(snap.rows())
    return view


class Judge:
    """Runs alive by their pid: ``alive`` (True), ``dead`` (False), anything else None;
    task processes alive when their pid is in ``orphans``; a dead run's claims held when
    its pid is in ``held``."""

    def __init__(self, alive=(), dead=(), orphans=(), held=()) -> None:  # type: ignore[no-untyped-def]
        self.alive, self.dead = set(alive), set(dead)
        self.orphans, self.held = set(orphans), set(held)
        self.asked: list[str] = []

    def run_alive(self, run: RunRecord) -> bool | None:
        self.asked.append(run.pid)
        pid = int(run.pid)
        return True if pid in self.alive else False if pid in self.dead else None

    def task_alive(self, run: RunRecord, pid: int, start: str) -> bool | None:
        return pid in self.orphans

    def workers_alive(self, run: RunRecord) -> bool:
        return int(run.pid) in self.held

    def claim_held(self, run: RunRecord, num: int) -> bool:
        return (int(run.pid), num) in self.held


KEYS = {n: f"t{n}" for n in range(1, 9)}


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """Run 100 (alive) claimed 1-4: 1 ok, 2 failed, 3 begun, 4 claimed; run 200 (dead)
    claimed 5-7: 5 begun (its process 5005 lives on), 6 begun, 7 claimed; run 300 gave 8
    back."""
    path = tmp_path / "l"
    a = Book(path, pid=100, start="1")
    for n in range(1, 5):
        a.claim(n, 1, f"t{n}")
    a.begin(1, pid=1001).end(1, status="ok").begin(2, pid=1002).end(2, status="failed", code="3")
    a.begin(3, pid=1003).write()
    b = Book(path, pid=200, start="1")
    for n in range(5, 8):
        b.claim(n, 1, f"t{n}")
    b.begin(5, pid=5005).begin(6, pid=5006).write()
    Book(path, pid=300, start="1").claim(8, 1, "t8").release(8).write()
    return path


def test_what_rows_say_before_anything_is_judged(history: Path) -> None:
    view = view_of(history, KEYS)
    view.settle(None)
    got = {n: view.state(n) for n in KEYS}
    assert got == {
        1: "ok", 2: "failed", 3: "running", 4: "claimed",
        5: "running", 6: "running", 7: "claimed", 8: "never",
    }  # fmt: skip


def test_free_waiting_is_a_task_given_back_or_interrupted(history: Path, tmp_path: Path) -> None:
    assert view_of(history, KEYS).free_waiting()  # run 300 gave 8 back
    Book(history, pid=400, start="1").claim(8, 2, "t8").write()
    assert not view_of(history, KEYS).free_waiting()  # taken again: held (3, 4 too)
    other = tmp_path / "m"
    Book(other, pid=500, start="1").claim(1, 1, "t1").begin(1, pid=5001).end(
        1, status="interrupted"
    ).write()
    assert view_of(other, KEYS).free_waiting()  # a stop interrupted it: it waits


def test_a_dead_run_frees_what_it_only_claimed_and_loses_what_it_began(history: Path) -> None:
    view = view_of(history, KEYS)
    judge = Judge(alive=[100], dead=[200, 300], orphans=[5005])
    view.settle(judge)
    got = {n: view.state(n) for n in KEYS}
    assert got == {
        1: "ok", 2: "failed", 3: "running", 4: "claimed",
        # 5's own process lives on (an orphan): waited for; 6's is gone: lost; 7 never began
        5: "running", 6: "lost", 7: "never", 8: "never",
    }  # fmt: skip
    assert sorted(judge.asked) == ["100", "200"]  # once per run, not per task


@pytest.mark.parametrize(
    ("alive", "dead", "me"),
    [
        ([100], [200, 300], -2),  # a look of another run
        ([100], [300], -2),  # nobody can tell of 200
        ([100, 200], [300], 0),  # run 100's own look
        ([200], [100, 300], 1),  # run 200's own look, 100 dead
    ],
)
def test_tasks_of_live_runs_are_counted_and_the_rest_settled_as_before(
    history: Path, alive: list[int], dead: list[int], me: int
) -> None:
    # a look takes the tasks held by runs alive (and its own) out before it judges the
    # rest task by task: the states of all are what settling all of them says
    whole = view_of(history, KEYS)
    whole.settle(Judge(alive, dead, orphans=[5005]))
    view = view_of(history, KEYS)
    judge = Judge(alive, dead, orphans=[5005])
    rest, held = view.held_by_live(judge, view.unsettled(), me)
    view.settle(judge, nums=rest)
    assert {n: view.state(n) for n in KEYS} == {n: whole.state(n) for n in KEYS}
    assert view.unknown == whole.unknown
    holds = {100: {3, 4}, 200: {5, 6, 7}}  # 2 failed and 8 given back: nobody's
    mine = int(view.runs[me].pid) if me >= 0 else None
    out = {n for pid, nums in holds.items() if pid in alive or pid == mine for n in nums}
    assert rest == [n for n in (2, 3, 4, 5, 6, 7, 8) if n not in out]
    assert held == sum(len(nums) for pid, nums in holds.items() if pid in alive and pid != mine)
    assert judge.asked.count("200") <= 2  # once here, once in settle at most


def test_a_dead_run_whose_claims_may_still_begin_keeps_them(history: Path) -> None:
    view = view_of(history, KEYS)
    view.settle(Judge(alive=[100], dead=[200], held=[200]))
    assert view.state(7) == "claimed"  # a worker of it, or a task started before its begin row


def test_nobody_can_tell_keeps_the_task_where_it_is_and_says_so(history: Path) -> None:
    view = view_of(history, KEYS)
    view.settle(Judge(alive=[100]))  # run 200: no answer
    assert (view.state(5), view.state(7)) == ("running", "claimed")
    assert view.unknown == {5, 6, 7}


def test_failures_and_lost_begun_attempts_reach_max_attempts(tmp_path: Path) -> None:
    path = tmp_path / "l"
    book = Book(path, pid=100, start="1")
    for att, status in enumerate(("failed", "interrupted", "timeout"), 1):
        book.claim(1, att, "t1").begin(1, att).end(1, att, status=status, code="1")
    book.write()
    view = view_of(path, {1: "t1"})
    view.settle(None, max_attempts=3)
    assert view.state(1) == "timeout"  # interrupted counts for nothing: 2 of 3
    # a third attempt begun by a run that died with it counts as the third failure
    Book(path, pid=999999, start="1").claim(1, 4, "t1").begin(1, 4, pid=4242).write()
    view = view_of(path, {1: "t1"})
    view.settle(Judge(dead=[999999]), max_attempts=3)
    assert view.state(1) == "given-up"
    view = view_of(path, {1: "t1"})
    view.settle(Judge(dead=[999999]), max_attempts=4)
    assert view.state(1) == "lost"


def test_a_claim_of_an_edited_line_says_nothing_of_the_line_there_now(tmp_path: Path) -> None:
    path = tmp_path / "l"
    book = Book(path, pid=100, start="1")
    book.claim(1, 1, "alpha").begin(1).end(1).claim(2, 1, "beta").begin(2).end(2).write()
    view = view_of(path, {1: "alpha", 2: "beta"})
    assert view.verify() == set()
    view.settle(None)
    assert (view.state(1), view.state(2)) == ("ok", "ok")
    # "gamma" inserted at the top: the numbers now name other lines
    view = view_of(path, {1: "gamma", 2: "alpha", 3: "beta"})
    assert view.verify() == {1, 2}
    view.settle(None)
    assert [view.state(n) for n in (1, 2, 3)] == ["never", "never", "never"]


def test_the_view_of_out_counts_each_number_s_latest_line_once(tmp_path: Path) -> None:
    """cat reads no task list: a claim marked as another line (``!``) drops the pieces of
    the line the number ran as before."""
    path = tmp_path / "l"
    book = Book(path, pid=100, start="1")
    book.claim(1, 1, "a").end(1, size_at=(5, 2)).claim(2, 1, "b").end(2, size_at=(7, 2))
    # "z" at the top: every line has a new number and runs again, marked so
    book.claim(1, 2, "z", fresh=True).end(1, 2, size_at=(9, 2))
    book.claim(2, 2, "a", fresh=True).end(2, 2, size_at=(11, 2))
    book.claim(3, 1, "b").end(3, size_at=(13, 2)).write()
    view = view_of(path, pieces=True)
    c = view.claims(OutFile(0, 100))
    assert [(p.tasknum, p.offset) for p in c.parts] == [(1, 9), (2, 11), (3, 13)]


def test_a_ledger_of_zotsink_0_1_renumbered_keeps_each_line_once(tmp_path: Path) -> None:
    from zotsink._ledger.v1 import COLUMNS

    def row(event: str, num: int, key: str, **kw: str) -> str:
        values = {"event": event, "time": "2026-11-24T10:00:00.000000Z", "tasknum": str(num)}
        values |= {"key": key, "attempt": "1", "host": "h", "pid": "1", **kw}
        return "\t".join(values.get(c, "") for c in COLUMNS) + "\n"

    def ok(num: int, key: str, offset: int) -> str:
        return row("end", num, key, status="ok", bytes="2", out_offset=str(offset),
                   out_header="5", out_ino="7", out_crc="0")  # fmt: skip

    path = tmp_path / "l"
    rows = ["\t".join(COLUMNS) + "\n", row("start", 1, "a"), ok(1, "a", 5)]
    rows += [row("start", 2, "b"), ok(2, "b", 7), row("start", 1, "z"), ok(1, "z", 9)]
    rows += [row("start", 2, "a"), ok(2, "a", 11), row("start", 3, "b"), ok(3, "b", 13)]
    rows += [row("pause", 3, "b")]  # a newer release's kind of row
    path.write_text("".join(rows))
    view = view_of(path, pieces=True)
    c = view.claims(OutFile(7, 100))
    assert c.header == 5
    assert [(p.tasknum, p.offset) for p in c.parts] == [(1, 9), (2, 11), (3, 13)]


def test_piece_problem_names_another_file_a_short_one_and_none() -> None:
    here = OutFile(7, 100)
    assert piece_problem(10, 20, "7", here) is None
    assert piece_problem(10, 0, "8", here) is None  # no records claimed
    assert "another file" in (piece_problem(10, 20, "8", here) or "")
    assert "shorter" in (piece_problem(90, 20, "7", here) or "")
    assert "does not exist" in (piece_problem(10, 20, "7", None) or "")
    assert piece_problem(10, 20, "", None) is None  # an older release's row: unchecked
    assert "shorter" in (piece_problem(90, 20, "", here) or "")


def test_control_rows_fold_the_latest_close_or_open_and_each_stop() -> None:
    c = Control()
    c = c.fold("close", 10, 1.0, "5")
    assert (c.closed, c.closed_lines) == (True, 5)
    c = c.fold("open", 20).fold("stop", 30).fold("claim", 40)
    assert (c.closed, c.stop_at) == (False, 30)
    assert c.stopped(25) and c.stopped(30) and not c.stopped(31)


def test_control_rows_are_no_task_s_history(tmp_path: Path) -> None:
    from zotsink._run.close import close_tasks, read_control, stop_runs

    (tmp_path / "tasks.txt").write_text("a\nb\n")
    path = tmp_path / "l"
    state, wrote = close_tasks(tmp_path / "tasks.txt", path)
    assert wrote and state.closed and state.closed_lines == 2
    assert close_tasks(tmp_path / "tasks.txt", path) == (state, False)  # closed already
    stop_runs(tmp_path / "tasks.txt", path)
    control, _size = read_control(path)
    assert control.closed and control.stop_at > 0
    assert path.read_bytes().startswith(header_line())
    view = view_of(path, {1: "a", 2: "b"})
    view.settle(None)
    assert view.counts()["never"] == 2 and view.runs == []


def test_a_run_s_lean_view_says_what_the_whole_fold_says(tmp_path: Path, zotsink: Any) -> None:
    """A run folds other runs' ok ends as counts: the states, the counts per run, the
    failures and the begun tasks' processes are the whole fold's."""
    (tmp_path / "f.py").write_text(
        "def task(line):\n"
        "    n = int(line)\n"
        "    if n % 7 == 0:\n"
        "        raise ValueError(line)\n"
        "    return {'n': n, 'pad': 'x' * (n % 5)}\n"
    )
    (tmp_path / "tasks.txt").write_text("".join(f"{n}\n" for n in range(1, 301)))
    for _ in range(2):  # the failures tried again, and some ok tasks run again (--rerun)
        r = zotsink("run", "tasks.txt", "out.tsv", "--pull", "--jobs", "2", "--call",
                    "f.py:task", "--retries", "1")  # fmt: skip
        assert r.returncode == 1, r.stderr  # the multiples of 7 fail
    r = zotsink("run", "tasks.txt", "out.tsv", "--pull", "--call", "f.py:task", "--rerun")
    assert r.returncode == 1, r.stderr
    ledger = tmp_path / "out.tsv.ledger"
    full = view_of(ledger, pieces=True)
    lean = view_of(ledger, lean=True)
    assert lean.code == full.code
    assert [(r.ok, r.not_ok, r.claimed) for r in lean.runs] == [
        (r.ok, r.not_ok, r.claimed) for r in full.runs
    ]
    assert lean.fails.keys() == full.fails.keys() == {n for n in range(7, 301, 7)}
    assert lean.procs == full.procs
    assert len(full.claims(out_file(tmp_path / "out.tsv")).parts) == 300 - 300 // 7
    for view in (full, lean):
        view.settle(None)
    assert [lean.state(n) for n in range(1, 301)] == [full.state(n) for n in range(1, 301)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, len(STATES) + 1), max_size=400), st.integers(-5, 450))
def test_unsettled_is_every_task_neither_ok_nor_never_found_either_way(
    codes: list[int], upto: int
) -> None:
    # few such tasks are found by a search each, many by one pass: the same numbers
    calm = {STATES.index("ok"), STATES.index("never")}
    sparse = [c if n % 17 == 0 else STATES.index("ok") for n, c in enumerate(codes)]
    for got in (codes, sparse):
        view = LedgerView()
        view.code = bytearray(got)
        want = [n for n, c in enumerate(got[: max(upto, 0)]) if c not in calm]
        assert view.unsettled(upto) == want
        assert view.unsettled() == [n for n, c in enumerate(got) if c not in calm]
