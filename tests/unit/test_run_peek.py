"""A run's peek: whether the task list has a whole line past the ledger's cursor, read from
the ledger's last row with no lock and no news (what a run holding claimed tasks that wait
behind no slow task asks before it gives them back)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from zotsink._run.ledger import Ledger
from zotsink._run.look import Looker


def _run(tmp_path: Path) -> tuple[Ledger, Looker]:
    tasks, path = str(tmp_path / "tasks.txt"), str(tmp_path / "out.txt.ledger")
    ledger = Ledger(path, tasks=tasks, env={})
    ledger.open()
    looker = Looker(
        ledger, tasks=tasks, out=str(tmp_path / "out.txt"), began=time.time(),
        max_attempts=None, rerun=False,
    )  # fmt: skip
    return ledger, looker


def test_a_peek_sees_what_other_runs_claimed_since_this_one_read(tmp_path: Path) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    mine, looker = _run(tmp_path)
    assert mine.claim(1, [], cursor=True, closed_lines=None).tasks
    assert looker.peek().grew  # b and c wait past the cursor
    other, _ = _run(tmp_path)  # another run takes the rest: this one read none of its rows
    assert len(other.claim(5, [], cursor=True, closed_lines=None).tasks) == 2
    assert mine.cursor.next == 2  # what this run last read of the ledger
    assert not looker.peek().grew  # what the ledger's last row says now
    with open(tmp_path / "tasks.txt", "a") as f:
        f.write("d")  # no newline yet: not a whole line
    assert not looker.peek().grew
    with open(tmp_path / "tasks.txt", "a") as f:
        f.write("\n")
    assert looker.peek().grew
    for led in (mine, other):
        led.flush()
        led.close()


def test_a_ledger_that_cannot_be_read_tells_nothing_and_the_tasks_stay(tmp_path: Path) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    ledger, looker = _run(tmp_path)
    assert ledger.claim(2, [], cursor=True, closed_lines=None).tasks
    assert not looker.peek().grew
    # the ledger's name now a FIFO (planted, or replaced): the peek neither hangs on it
    # nor concludes that the list is done
    os.rename(ledger.path, ledger.path + ".moved")
    os.mkfifo(ledger.path)
    assert looker.peek().grew
    os.unlink(ledger.path)
    assert looker.peek().grew  # gone: nothing told either
    os.rename(ledger.path + ".moved", ledger.path)
    ledger.flush()
    ledger.close()
