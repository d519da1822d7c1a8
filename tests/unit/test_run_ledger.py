"""The ledger: rows written under the lock, states read back (zotsink._run.ledger)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from zotsink._ledgerfile import LATER_COLUMNS, LEDGER_COLUMNS, read_ledger
from zotsink._run.states import states_of

from zotsink import InputError
from zotsink._run.ledger import Ledger

ENV = {"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "3"}


def test_rows_round_trip_with_hostile_keys(tmp_path: Path) -> None:
    path = tmp_path / "l"
    book = Ledger(path, env=ENV)
    key = "a\tb\\c\nd"
    book.append([book.start_row(1, key, 1), book.end_row(1, key, 1, status="ok", exit=0)])
    book.close()
    lines = path.read_bytes().splitlines()
    assert lines[0] == "\t".join((*LEDGER_COLUMNS, *LATER_COLUMNS)).encode()
    assert len(lines) == 3
    rows = list(read_ledger(path))
    assert [(r.event, r.tasknum, r.key, r.job, r.array_task, r.status) for r in rows] == [
        ("start", 1, key, "77", "3", ""),
        ("end", 1, key, "77", "3", "ok"),
    ]
    assert rows[0].pid == str(os.getpid())


def test_states(tmp_path: Path) -> None:
    path = tmp_path / "l"
    book = Ledger(path, env={})
    rows = [
        book.start_row(1, "one", 1),
        book.end_row(1, "one", 1, status="failed", exit=3),
        book.start_row(1, "one", 2),
        book.end_row(1, "one", 2, status="ok", exit=0),
        book.start_row(2, "two", 1),
        book.start_row(3, "OLD three", 1),  # the list was edited since: not task 3's row
        book.end_row(3, "OLD three", 1, status="ok"),
        book.start_row(5, "five", 1),
        book.end_row(5, "five", 1, status="interrupted"),
    ]
    book.append(rows)
    book.close()
    keys = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
    states = states_of(keys, read_ledger(path))
    assert {n: (s.state, s.starts) for n, s in states.items()} == {
        1: ("ok", 2),
        2: ("running", 1),  # this very process wrote it, and lives
        3: ("never", 0),
        4: ("never", 0),
        5: ("interrupted", 1),
    }
    # The same rows seen as written by a process that is gone: lost.
    text = path.read_text().replace(f"\t{os.getpid()}\t", "\t999999999\t")
    path.write_text(text)
    assert states_of(keys, read_ledger(path))[2].state == "lost"
    # On another host nothing can be said about the pid: still running.
    assert states_of(keys, read_ledger(path), host="elsewhere")[2].state == "running"


def test_missing_ledger_is_empty_and_a_foreign_file_is_refused(tmp_path: Path) -> None:
    assert list(read_ledger(tmp_path / "none")) == []
    (tmp_path / "x.tsv").write_text("a\tb\n1\t2\n")
    with pytest.raises(InputError, match="not a zotsink ledger"):
        list(read_ledger(tmp_path / "x.tsv"))


def test_a_ledger_begun_by_an_older_release_keeps_its_columns(tmp_path: Path) -> None:
    # an older zotsink wrote no out_offset column: rows appended now fit its header, and
    # are read with out_offset ""
    path = tmp_path / "old.ledger"
    path.write_bytes("\t".join(LEDGER_COLUMNS).encode() + b"\n")
    book = Ledger(path, env={})
    book.append([book.start_row(1, "a", 1)], spill=False)
    book.append([book.end_row(1, "a", 1, status="ok", out_offset=42)])
    book.close()
    lines = path.read_bytes().splitlines()
    assert {line.count(b"\t") for line in lines} == {len(LEDGER_COLUMNS) - 1}
    rows = list(read_ledger(path))
    assert [(r.event, r.status, r.out_offset) for r in rows] == [
        ("start", "", ""),
        ("end", "ok", ""),
    ]


def test_end_rows_name_where_the_attempt_s_records_are(tmp_path: Path) -> None:
    path = tmp_path / "new.ledger"
    book = Ledger(path, env={})
    book.append([book.end_row(3, "c", 2, status="ok", bytes=10, out_offset=1234)])
    book.close()
    (row,) = read_ledger(path)
    assert (row.tasknum, row.attempt, row.bytes, row.out_offset) == (3, "2", "10", "1234")


def test_a_task_the_run_did_not_know_when_it_began_is_claimed_by_its_whole_history(
    tmp_path: Path,
) -> None:
    """A claim's look at the news passes by the rows of tasks the run did not name when it
    began; a task that comes to be claimed later still counts every row it has."""
    from collections import deque

    from zotsink._run.states import read_states

    from zotsink._run.tasks import Task

    path = tmp_path / "l"
    other = Ledger(path, env={})
    # before this run's snapshot: task 2 failed once in another run
    other.append([other.start_row(2, "two", 1), other.end_row(2, "two", 1, status="failed")])
    states, seen = read_states(path, {1: "one"})
    book = Ledger(path, env={})
    book.begin({1: "one"}, states, seen, rerun=False)
    # after it: task 2 failed again, task 3 ended ok, task 4 ran under another line
    other.append(
        [
            other.start_row(2, "two", 2),
            other.end_row(2, "two", 2, status="failed"),
            other.start_row(3, "three", 1),
            other.end_row(3, "three", 1, status="ok"),
            other.start_row(4, "OLD four", 1),
            other.end_row(4, "OLD four", 1, status="ok"),
        ]
    )
    other.close()
    picked, dropped = book.claim(deque([Task(1, "one")]), 1, [])  # reads all that news
    assert ([(t.num, a) for t, a in picked], dropped) == ([(1, 1)], [])
    queue = deque([Task(2, "two"), Task(3, "three"), Task(4, "four")])
    picked, dropped = book.claim(queue, 3, [])
    book.close()
    assert [(t.num, a) for t, a in picked] == [(2, 3), (4, 1)]  # its third attempt; a new line
    assert [t.num for t in dropped] == [3]  # ok in the other run
    rows = [(r.event, r.tasknum, r.attempt) for r in read_ledger(path) if r.pid == str(os.getpid())]
    assert rows[-2:] == [("start", 2, "3"), ("start", 4, "1")]


@pytest.mark.parametrize("reads_as", [b"", b"\0"])
@pytest.mark.parametrize("short_reads", [1, 3, None])
def test_rows_a_network_client_cannot_read_yet_are_never_passed_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short_reads: int | None, reads_as: bytes
) -> None:
    """GlusterFS, pull runs on three nodes: under the ledger's lock a client knows the
    server's size, yet its read stops short of the rows another client appended a moment
    before. A claim that took that size as read would pass those rows by for good and claim
    tasks another run had claimed (run twice at once). The claim reads the rest again; a
    client that still cannot read it claims nothing and raises. A look (no lock to claim
    under) takes what it could read and leaves the rest for the next look."""
    from collections import deque

    from zotsink._run.states import read_states

    from zotsink import WriteError
    from zotsink._core import fileio
    from zotsink._run import ledger as ledger_module
    from zotsink._run.tasks import Task

    # Counted tries, not a budget of time: on a loaded machine three short reads and their
    # pauses may outlast any short budget, and the claim would give up before the fourth.
    monkeypatch.setattr(
        ledger_module,
        "HEADER_SETTLE",
        ledger_module.HEADER_SETTLE.replace(budget=None, tries=6, first=1e-3),
    )
    path = tmp_path / "l"
    keys = {1: "one", 2: "two"}
    book = Ledger(path, env={})
    book.append([])  # the header: this run's snapshot is the ledger as begun
    states, seen = read_states(path, keys)
    book.begin(keys, states, seen, rerun=False)
    other = Ledger(path, env={})
    other.append([other.start_row(1, "one", 1)])  # another run, on another node, claims 1
    other.close()
    # the ledger's rows past `seen` come back empty, `short_reads` times (None: always)
    real, left = os.pread, [short_reads]

    def short(fd: int, n: int, at: int) -> bytes:
        news = at == seen and n > 1  # not the writer's look at the last byte
        if news and (left[0] is None or left[0] > 0) and os.fstat(fd).st_ino == ino:
            if left[0] is not None:
                left[0] -= 1
            return reads_as * n  # nothing, or a page of zeros cached before the rows came
        return real(fd, n, at)

    ino = path.stat().st_ino
    size = path.stat().st_size
    monkeypatch.setattr(fileio.os, "pread", short)
    assert book.look()[1].state == "never"  # a look reads what it can ...
    assert book._seen == seen  # ... and passes nothing by
    if short_reads is None and not reads_as:
        with pytest.raises(WriteError, match=f"reads {seen} bytes of the ledger, the server has"):
            book.claim(deque([Task(1, "one"), Task(2, "two")]), 2, [])
        assert path.stat().st_size == size  # nothing claimed
        book.close()
        return
    left[0] = short_reads if short_reads is not None else 3
    picked, _dropped = book.claim(deque([Task(1, "one"), Task(2, "two")]), 2, [])
    book.close()
    assert [(t.num, a) for t, a in picked] == [(2, 1)]  # task 1 is the other run's


def test_a_run_s_first_look_names_only_the_rows_it_read_as_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot a run begins with: when the read stops short of the size (a network
    client), the run's news start where the read stopped, not at the size."""
    from zotsink._run.states import read_states

    from zotsink._core import fileio

    path = tmp_path / "l"
    book = Ledger(path, env={})
    book.append([book.start_row(1, "one", 1)])
    first = path.stat().st_size
    book.append([book.end_row(1, "one", 1, status="ok"), book.start_row(2, "two", 1)])
    book.close()
    real = os.pread
    monkeypatch.setattr(
        fileio.os, "pread", lambda fd, n, at: real(fd, max(0, min(n, first - at)), at)
    )
    states, seen = read_states(path, {1: "one", 2: "two"})
    assert seen == first and path.stat().st_size > first
    assert (states[1].state, states[2].state) == ("running", "never")


def test_an_ok_task_is_not_lost_because_this_client_caches_a_shorter_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GlusterFS, pull runs on three nodes: a run that begins right after another node
    committed tasks sees OUT's old size through its client's cache, for a moment. Its
    pieces then look cut off; the run took those tasks for lost and ran them again (as
    attempt 2, while they were done). OUT's size is asked of the server instead."""
    import subprocess
    import sys

    from zotsink import _ledgerfile

    (tmp_path / "tasks.txt").write_text("a\nb\n")
    r = subprocess.run(
        [sys.executable, "-m", "zotsink", "run", "tasks.txt", "out.txt", "--", "echo"],
        cwd=tmp_path,
        capture_output=True,
    )
    assert r.returncode == 0, r.stderr
    out = str(tmp_path / "out.txt")
    real = os.stat

    def cached(path, *a, **k):  # this client still has OUT as it was before the appends
        st = real(path, *a, **k)
        if os.fspath(path) == out:
            return os.stat_result((*st[:6], 0, *st[7:10]))
        return st

    monkeypatch.setattr(_ledgerfile.os, "stat", cached)
    monkeypatch.setattr(_ledgerfile, "wants_fsync", lambda path: True)  # as on GlusterFS
    assert os.stat(out).st_size == 0
    keys = {1: "a", 2: "b"}
    states = states_of(keys, read_ledger(tmp_path / "out.txt.ledger"), out=out)
    assert {n: s.state for n, s in states.items()} == {1: "ok", 2: "ok"}


@pytest.mark.parametrize("late", [False, True])
def test_news_read_before_the_lock_count_as_news_read_under_it(tmp_path: Path, late: bool) -> None:
    """Many news are folded before the exclusive lock (a snapshot), the rest under it: the
    claim picks by every row either way, once each (attempt numbers count every start),
    also for tasks the run got after it began (``late``), whose rows the look passed by."""
    from collections import deque

    from zotsink._run.states import read_states

    from zotsink._run.ledger import LOOK_AHEAD
    from zotsink._run.tasks import Task

    path = tmp_path / "l"
    n = 400
    keys = {i: f"task {i}" for i in range(1, n + 1)}
    known = {1: keys[1]} if late else keys
    states, seen = read_states(path, known)
    book = Ledger(path, env={})
    book.begin(known, states, seen, rerun=False)
    other = Ledger(path, env={})
    rows = []
    for i in range(1, n + 1):  # odd tasks ok elsewhere; even ones failed there, twice
        rows.append(other.start_row(i, keys[i], 1))
        rows.append(other.end_row(i, keys[i], 1, status="ok" if i % 2 else "failed"))
        if i % 2 == 0:
            rows += [other.start_row(i, keys[i], 2), other.end_row(i, keys[i], 2, status="failed")]
    other.append(rows)
    assert path.stat().st_size - seen >= LOOK_AHEAD  # read before the lock
    tail = [other.start_row(2, keys[2], 3), other.end_row(2, keys[2], 3, status="failed")]
    other.append(tail)  # the few rows under the lock
    other.close()
    picked, dropped = book.claim(deque(Task(i, keys[i]) for i in range(1, n + 1)), n, [])
    book.close()
    assert [(t.num, a) for t, a in picked] == [(2, 4)] + [(i, 3) for i in range(4, n + 1, 2)]
    assert [t.num for t in dropped] == list(range(1, n + 1, 2))
    assert book.states[2].failures == 3 and book.states[4].failures == 2


def test_a_look_that_reads_short_reads_the_rest_at_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A network client may read less than the size it reports (a GlusterFS client reads up
    to the end it cached): the rows a look did not read whole are news at the next look."""
    from collections import deque

    from zotsink._run.states import read_states

    import zotsink._run.ledger as ledger_module
    from zotsink._run.tasks import Task

    path = tmp_path / "l"
    keys = {1: "one", 2: "two", 3: "three"}
    states, seen = read_states(path, keys)
    book = Ledger(path, env={})
    book.begin(keys, states, seen, rerun=False)
    other = Ledger(path, env={})
    other.append([other.start_row(i, keys[i], 1) for i in keys])
    other.close()
    cut = path.stat().st_size - 5  # the last row is read only in part

    def short(fd: int, size: int, chunk: int = 1 << 20, start: int = 0) -> Any:
        data = os.pread(fd, max(cut - start, 0), start)
        return iter([data] if data else [])

    monkeypatch.setattr(ledger_module, "pread_chunks", short)
    first = {n: s.state for n, s in book.look().items()}
    assert first[1] == first[2] == "running" and first.get(3, "never") == "never"
    monkeypatch.undo()
    assert {n: s.state for n, s in book.look().items()} == {i: "running" for i in keys}
    picked, dropped = book.claim(deque(Task(i, keys[i]) for i in keys), 3, [])
    book.close()
    assert (picked, [t.num for t in dropped]) == ([], [1, 2, 3])  # running elsewhere
