"""One rule from ledger rows to a task's state, applied three ways that must agree.

The rule: a task's latest row whose key is the task's line counts; a ``start`` with no end
is ``running`` while its run lives and ``lost`` once it is known dead; an end of an
unknown status counts as ``failed``; ``failed``, ``killed``, ``timeout`` and unknown
statuses are failures, and a task whose latest attempt failed and whose failures reached
``max_attempts`` is ``given-up``. It is applied to a snapshot (``states_of`` over
``read_ledger``), incrementally under the claim's lock (a snapshot of the first rows, then
the rows other runs appended since, as news), and in a tally of a few bytes per task
(``status``, ``missing --ledger``). Random ledgers, and the three compared.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import deque
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zotsink._ledgerfile import END_STATES, LATER_COLUMNS, LEDGER_COLUMNS, read_ledger
from zotsink._run.control import read_control
from zotsink._run.states import (
    LedgerTally,
    TaskState,
    given_up,
    read_begin,
    settle,
    states_of,
)

from zotsink._core.records import Encoder
from zotsink._run.alive import PROC_START, proc_start
from zotsink._run.ledger import Ledger

HERE = os.uname().nodename
COLUMNS = (*LEDGER_COLUMNS, *LATER_COLUMNS)
#: Each task's line, and a line the same number had before the list was edited.
KEYS = {1: "one", 2: "tw\\o", 3: "thr\tee", 4: "four"}
OLD = "an older line"
ME = str(os.getpid())
MY_START = PROC_START + (proc_start(os.getpid()) or "")

#: Who wrote a start row: this live process, this pid after its start time changed (a dead
#: run whose pid was given to another), a pid that is gone, and a run on another host with
#: no scheduler to ask.
RUNS = st.sampled_from(
    [
        (HERE, ME, MY_START),
        (HERE, ME, PROC_START + "1"),
        (HERE, "999999999", ""),
        ("elsewhere", "1234", ""),
    ]
)
STATUSES = st.sampled_from([*END_STATES, "", "weird"])


@st.composite
def _rows(draw: st.DrawFn) -> list[Any]:
    """One row: a task row (start, end, an unknown event), a run row, a control row
    (close, open, stop), or a torn row."""
    kind = draw(
        st.sampled_from(["start", "end", "end", "other", "run", "close", "open", "stop", "torn"])
    )
    num = draw(st.sampled_from([1, 2, 3, 4, 5]))  # 5 is no task of KEYS
    key = draw(st.sampled_from([KEYS.get(num, "five"), KEYS.get(num, "five"), OLD]))
    host, pid, note = draw(RUNS)
    time = f"2026-11-24T10:00:{draw(st.integers(0, 59)):02d}.000000Z"
    attempt = str(draw(st.integers(1, 5)))
    if kind == "torn":
        return ["start", time, str(num), key]
    if kind == "run":
        return ["run", time, "0", "", "", "", "", host, pid, *[""] * 6, "{}", "", "", "", ""]
    if kind in ("close", "open", "stop"):  # what `zotsink close` and `stop` write
        note = '{"lines": "4"}' if kind == "close" else ""
        return [kind, time, "0", "", "", "", "", host, pid, *[""] * 6, note, "", "", "", ""]
    event = {"other": "pause"}.get(kind, kind)
    status = "" if kind == "start" else draw(STATUSES)
    offset = str(draw(st.integers(0, 999))) if kind == "end" else ""
    return [
        event,
        time,
        str(num),
        key,
        attempt,
        "",
        "",
        host,
        pid,
        status,
        "0" if status == "ok" else "1",
        "",
        "1.5",
        "1",
        "10",
        note if kind == "start" else "",
        offset,
        "0",
        "",
        "",
    ]


def _write(path: Path, rows: list[list[Any]], older: bool = False) -> None:
    """A ledger of ``rows``; ``older``: as a release before LATER_COLUMNS began it."""
    columns = LEDGER_COLUMNS if older else COLUMNS
    enc = Encoder("tsv", columns)
    data = enc.header_line()
    for row in rows:
        if len(row) < len(COLUMNS):  # a torn row: cut short, the next on a fresh line
            data += "\t".join(row).encode() + b"\n"
        else:
            data += enc.encode(row[: len(columns)])
    path.write_bytes(data)


def _named(st_: TaskState | None, max_attempts: int | None) -> tuple[Any, ...]:
    """What a state says, the given-up rule applied: (state, starts, failures, last)."""
    if st_ is None:
        return ("never", 0, 0, None)
    state = "given-up" if given_up(st_, max_attempts) else st_.state
    return (state, st_.starts, st_.failures, st_.last)


def _incremental(
    path: Path, rows: list[list[Any]], cut: int, max_attempts: int | None, older: bool
) -> dict[int, tuple[Any, ...]]:
    """The claim's way: a snapshot of the first ``cut`` rows, then the others as news."""
    _write(path, rows[:cut], older)
    states, seen, _settings = read_begin(path, KEYS)
    book = Ledger(path, env={})
    book.begin(KEYS, states, seen, rerun=False, max_attempts=max_attempts)
    with open(path, "ab") as f:  # another run's rows, after this run's snapshot
        full = path.with_suffix(".full")
        _write(full, rows, older)
        f.write(full.read_bytes()[seen:])
    picked, dropped = book.claim(deque(), 0, [])  # reads the news under the lock
    book.close()
    assert (picked, dropped) == ([], [])
    found = book._states  # the claim's own fold: what it picks tasks by, settled as it is
    settled = {n: settle(s, HERE, max_attempts) for n, s in found.items()}
    return {n: _named(settled.get(n), max_attempts) for n in KEYS}


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(_rows(), max_size=14),
    cut=st.integers(0, 14),
    max_attempts=st.one_of(st.none(), st.integers(1, 3)),
    older=st.booleans(),
)
def test_snapshot_incremental_and_tally_agree(
    tmp_path: Path, rows: list[list[Any]], cut: int, max_attempts: int | None, older: bool
) -> None:
    path = tmp_path / f"l{os.urandom(6).hex()}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torn rows are warned of; not the question here
        _write(path, rows, older)
        snapshot = states_of(KEYS, read_ledger(path), max_attempts=max_attempts)
        tally = LedgerTally(path, KEYS, max_attempts=max_attempts)
        want = {n: _named(s, max_attempts) for n, s in snapshot.items()}
        assert {n: _named(tally[n], max_attempts) for n in KEYS} == want
        assert {n: tally.state(n) for n in KEYS} == {n: w[0] for n, w in want.items()}
        counts = tally.counts()
        assert sum(counts.values()) == len(KEYS)
        assert all(counts[s] == [w[0] for w in want.values()].count(s) for s in counts)
        incremental = _incremental(tmp_path / "inc", rows, min(cut, len(rows)), max_attempts, older)
        control, _size = read_control(path)  # and the control rows are read by their fold
    assert incremental == want
    switches = [r[0] for r in rows if len(r) == len(COLUMNS) and r[0] in ("close", "open")]
    assert control.closed == (switches[-1:] == ["close"])
    assert (control.stop_at >= 0) == any(r[0] == "stop" and len(r) > 4 for r in rows)


def test_run_rows_hold_settings_not_task_states(tmp_path: Path) -> None:
    """A ``run`` row (task number 0) is no task's history in any of the three."""
    note = json.dumps({"max_attempts": "1"})
    rows = [["run", "2026-11-24T10:00:00.000000Z", "0", "", "", "", "", HERE, ME]]
    rows[0] += ["", "", "", "", "", "", note, "", "", "", ""]
    path = tmp_path / "l"
    _write(path, rows)
    keys = {1: "one"}
    assert states_of(keys, read_ledger(path))[1].state == "never"
    assert LedgerTally(path, keys).state(1) == "never"
