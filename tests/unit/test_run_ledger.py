"""A run's ledger: its run row, claims by the cursor and by name in one locked append each,
the list read by offset and checked, settings recorded once, a format 1 ledger migrated."""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from pathlib import Path

import pytest

from tests.ledgers import Book, ledger_rows
from zotsink import UsageError
from zotsink._ledger.format import parse_row
from zotsink._ledger.read import Snapshot
from zotsink._ledger.view import LedgerView
from zotsink._run.close import stop_runs
from zotsink._run.ledger import Ledger
from zotsink._run.queue import Candidate
from zotsink._run.tasks import Task
from zotsink.errors import InputError

A = {"chunk": "", "format": "lines", "command": "echo", "tasks": "t.txt"}


def tasks(tmp_path: Path, n: int, extra: str = "") -> str:
    path = tmp_path / "t.txt"
    path.write_text("".join(f"line{i}\n" for i in range(1, n + 1)) + extra)
    return str(path)


def opened(path: Path, task_list: str, settings: dict[str, str] | None = None) -> Ledger:
    book = Ledger(path, tasks=task_list, env={})
    view = book.open()
    book.record(settings or A, view.settings)
    return book


def cursor_claim(book: Ledger, n: int, closed: int | None = None) -> list[int]:
    got = book.claim(n, [], cursor=True, closed_lines=closed)
    return [t.num for t, _a in got.tasks]


def test_claims_by_the_cursor_take_the_next_tasks_once_each(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 10, "\n# a note\nline13\n")
    a, b = opened(path, t), opened(path, t)
    assert cursor_claim(a, 3) == [1, 2, 3]
    assert cursor_claim(b, 3) == [4, 5, 6]
    assert cursor_claim(a, 5) == [7, 8, 9, 10, 13]  # blank and # lines are no tasks
    got = b.claim(4, [], cursor=True, closed_lines=None)
    assert got.tasks == [] and got.drained
    rows = ledger_rows(path)
    assert sorted(int(r["tasknum"]) for r in rows if r["event"] == "start") == [
        *range(1, 11), 13,
    ]  # fmt: skip
    # one run row each, then claim rows of ranges: a few bytes a task
    kinds = [parse_row(x).kind for x in path.read_bytes().splitlines()[1:]]  # type: ignore[union-attr]
    assert kinds == ["run", "claim", "run", "claim", "claim"]
    a.close()
    b.close()


def _claimer(path: str, task_list: str, found: multiprocessing.Queue, go: object) -> None:  # type: ignore[type-arg]
    book = Ledger(path, tasks=task_list, env={})
    book.open()
    book.record(A, None)
    go.wait()  # type: ignore[attr-defined]  # every claimer opened: they claim together
    got: list[int] = []
    while True:
        res = book.claim(3, [], cursor=True, closed_lines=None)
        if not got:
            go.wait()  # type: ignore[attr-defined]  # every claimer claimed once: the rest race
        got += [t.num for t, _a in res.tasks]
        if res.drained:
            break
    book.close()
    found.put(got)


def test_claimers_in_processes_of_their_own_never_claim_one_task_twice(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 600)
    ctx = multiprocessing.get_context("spawn")
    found: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    go = ctx.Barrier(6)
    procs = [ctx.Process(target=_claimer, args=(str(path), t, found, go)) for _ in range(6)]
    for p in procs:
        p.start()
    got = [found.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    claimed = Counter(n for each in got for n in each)
    assert claimed == Counter(range(1, 601))
    assert all(got)  # they shared the list


def test_a_task_claimed_by_name_since_the_look_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 3)
    late = opened(path, t)
    Book(path, pid=4242).claim(2, 1, "line2").write()  # another run, after late's look
    got = late.claim(2, [Candidate(Task(1, "line1"), 1), Candidate(Task(2, "line2"), 1)],
                     cursor=False, closed_lines=None)  # fmt: skip
    assert [(x.num, a) for x, a in got.tasks] == [(1, 1)]
    assert [c.task.num for c in got.dropped] == [2]
    late.close()


def test_a_list_rewritten_under_the_runs_is_refused_and_nothing_claimed(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 10)
    book = opened(path, t)
    assert cursor_claim(book, 4) == [1, 2, 3, 4]
    Path(t).write_text("".join(f"new{i}\n" for i in range(1, 20)))  # emptied and filled anew
    size = path.stat().st_size
    with pytest.raises(InputError, match="changed under the runs"):
        book.claim(4, [], cursor=True, closed_lines=None)
    assert path.stat().st_size == size
    book.close()


def test_a_last_line_without_its_newline_waits_until_the_list_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 2, "line3")
    book = opened(path, t)
    assert cursor_claim(book, 5) == [1, 2]  # line 3 is being written
    assert cursor_claim(book, 5) == []
    assert cursor_claim(book, 5, closed=3) == [3]  # closed at 3 lines: it is whole as it is
    book.close()


def test_a_line_with_a_nul_byte_is_no_task_and_is_said(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 1, "bad\0line\nline3\n")
    book = opened(path, t)
    got = book.claim(5, [], cursor=True, closed_lines=None)
    assert [x.num for x, _a in got.tasks] == [1, 3] and got.passed == [2]
    book.close()


def test_a_run_that_records_other_settings_meanwhile_stops_the_claim(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 4)
    first = opened(path, t, A)
    second = opened(path, t, {**A, "command": "cat"})  # both looked before either claimed
    assert cursor_claim(first, 1) == [1]
    with pytest.raises(UsageError, match=r"echo"):
        second.claim(1, [], cursor=True, closed_lines=None)
    assert [r["tasknum"] for r in ledger_rows(path) if r["event"] == "start"] == ["1"]
    # settings another run records once this run began (--new-settings) do not stop it
    Book(path, settings={**A, "command": "tac"}).write()
    assert cursor_claim(first, 1) == [2]
    first.close()
    second.close()


def test_the_settings_are_recorded_once_and_the_latest_counts(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 4)
    a = opened(path, t, A)
    cursor_claim(a, 1)
    b = opened(path, t, A)  # the same: not recorded again
    cursor_claim(b, 1)
    view = LedgerView()
    with Snapshot(path) as snap:
        view.feed(snap.rows())
    assert view.settings == A
    settings_rows = [r for r in ledger_rows(path) if r["event"] == "run"]
    assert len(settings_rows) == 1
    a.close()
    b.close()


def test_a_stop_reaches_the_runs_begun_before_it_only(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 6)
    early = opened(path, t)
    assert cursor_claim(early, 1) == [1]
    stop_runs(t, path)
    got = early.claim(1, [], cursor=True, closed_lines=None)
    assert got.stopped and got.tasks == []
    late = opened(path, t)  # begun after the stop: it proceeds
    assert cursor_claim(late, 1) == [2]
    early.close()
    late.close()


V1_HEADER = (
    "event\ttime\ttasknum\tkey\tattempt\tjob\tarray_task\thost\tpid\tstatus\texit\tsignal\t"
    "seconds\trecords\tbytes\tnote\tout_offset\tout_header\tout_ino\tout_crc\n"
)


def _v1_row(event: str, num: int, key: str, **kw: str) -> str:
    cols = V1_HEADER.rstrip("\n").split("\t")
    values = {"event": event, "time": "2026-11-24T10:00:00.000000Z", "tasknum": str(num),
              "key": key, "attempt": "1", "host": "gone-node", "pid": "1", **kw}  # fmt: skip
    return "\t".join(values.get(c, "") for c in cols) + "\n"


def test_a_ledger_of_zotsink_0_1_is_migrated_and_its_history_kept(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 4)
    rows = [V1_HEADER, _v1_row("start", 1, "line1"), _v1_row("end", 1, "line1", status="ok")]
    rows += [_v1_row("start", 2, "line2"), _v1_row("end", 2, "line2", status="failed", exit="3")]
    path.write_text("".join(rows))
    old = path.read_bytes()
    book = opened(path, t)
    assert (tmp_path / "l.v1").read_bytes() == old  # kept as it was
    assert path.read_bytes().startswith(b"zotsink-ledger\t2\t")
    # the cursor passes over what format 1 claimed: tasks 3 and 4 are new
    assert cursor_claim(book, 5) == [3, 4]
    view = LedgerView({1: "line1", 2: "line2", 3: "line3", 4: "line4"})
    with Snapshot(path) as snap:
        view.feed(snap.rows())
    view.settle(None)
    assert [view.state(n) for n in (1, 2, 3, 4)] == ["ok", "failed", "claimed", "claimed"]
    book.close()


def test_a_ledger_of_zotsink_0_1_with_a_live_run_is_not_migrated(tmp_path: Path) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 2)
    here = os.uname().nodename
    from zotsink._run.alive import PROC_START, proc_start

    live = _v1_row("start", 1, "line1", host=here, pid=str(os.getpid()),
                   note=PROC_START + (proc_start(os.getpid()) or ""))  # fmt: skip
    path.write_text(V1_HEADER + live)
    before = path.read_bytes()
    book = Ledger(path, tasks=t, env={})
    with pytest.raises(UsageError, match="a run of that release still holds tasks"):
        book.open()
    book.close()
    assert path.read_bytes() == before and not (tmp_path / "l.v1").exists()


def test_a_claim_by_number_sees_the_cursor_s_claims_since_it_last_read(tmp_path: Path) -> None:
    """A chunked run and a pull run on one ledger: the pull run's cursor passed tasks 2-5
    after the chunked run last read; the chunked run's claim of them by number takes none."""
    path = tmp_path / "l"
    t = tasks(tmp_path, 10)
    chunk, pull = opened(path, t), opened(path, t)
    got = chunk.claim(1, [Candidate(Task(1, "line1"), 1)], cursor=False, closed_lines=None)
    assert [x.num for x, _a in got.tasks] == [1]
    assert cursor_claim(pull, 4) == [2, 3, 4, 5]
    named = [Candidate(Task(n, f"line{n}"), 1) for n in range(2, 7)]
    got = chunk.claim(5, named, cursor=False, closed_lines=None)
    assert [x.num for x, _a in got.tasks] == [6]
    assert [c.task.num for c in got.dropped] == [2, 3, 4, 5]
    chunk.close()
    pull.close()


def test_a_claim_handed_more_by_name_than_it_takes_drops_the_taken_and_gives_the_rest_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "l"
    t = tasks(tmp_path, 5)
    late = opened(path, t)
    Book(path, pid=4242).claim(1, 1, "line1").claim(4, 1, "line4").write()  # since the look
    named = [Candidate(Task(n, f"line{n}"), 1) for n in range(1, 6)]
    got = late.claim(2, named, cursor=False, closed_lines=None)
    assert [(x.num, a) for x, a in got.tasks] == [(2, 1), (3, 1)]
    assert [c.task.num for c in got.dropped] == [1, 4]
    assert [c.task.num for c in got.rest] == [5]  # free, beyond the two: asked again later
    late.close()
