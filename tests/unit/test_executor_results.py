"""The contract of zotsink._executor.results.news_since, the one place an Executor's client
reads the engine's files: each task waited for is told of once across a chain of cursors
(committed: only its latest ok attempt's records, whole; or given up), and only the tasks
asked about. Real runs write the ledger and OUT."""

from __future__ import annotations

import random
import shlex
import sys
from pathlib import Path

import pytest

from zotsink import add_tasks, run_tasks
from zotsink._executor.calls import call_text, decode_record, line_of
from zotsink._executor.element import SERVE
from zotsink._executor.results import TaskSet, news_since

FN = "tests.behaviour.executor_funcs:square"


def _files(d: Path) -> tuple[Path, Path, Path]:
    return d / "calls.jsonl", d / "results.jsonl", d / "results.jsonl.ledger"


def test_each_committed_task_comes_once_whole_and_only_those_asked(tmp_path: Path) -> None:
    calls, out, ledger = _files(tmp_path)
    lines = [
        line_of([call_text(f"c-{i}-{k}", FN, [i * 10 + k], {}, named="f") for k in range(3)])
        for i in range(20)
    ]
    nums = add_tasks(calls, lines)
    waiting = dict(zip(nums, lines))
    news = news_since(out, ledger, waiting, 3)
    assert news.committed == [] and news.given_up == []  # nothing ran: no ledger yet
    run_tasks(calls, out, call=SERVE, pull=True, jobs=2)
    asked = {n: waiting[n] for n in list(waiting)[:5]}
    news = news_since(out, ledger, asked, 3, news.cursor)
    assert sorted({n for n, _ in news.committed}) == list(asked)
    for n in asked:  # a task's three records, together and in its order
        mine = [decode_record(r) for m, r in news.committed if m == n]
        assert [r["value"] for r in mine] == [((n - 1) * 10 + k) ** 2 for k in range(3)]
    rest = news_since(out, ledger, waiting, 3, news.cursor._replace(at=0.0))
    assert sorted({n for n, _ in rest.committed}) == list(waiting)[5:]
    again = news_since(out, ledger, waiting, 3, rest.cursor._replace(at=0.0))
    assert again.committed == [] and again.given_up == []
    again.cursor.again(3)  # asked anew: told anew, from its first row
    once_more = news_since(out, ledger, waiting, 3, again.cursor._replace(at=0.0))
    assert {n for n, _ in once_more.committed} == {3}
    assert news_since(out, ledger, waiting, 3).committed != []  # a new chain tells again


def _shell(record: str, fails_until: Path) -> str:
    """A shell task that prints ``record`` with value 1 and fails while ``fails_until`` is
    missing, and prints it with value 2 and succeeds once it is there."""
    first, then = (shlex.quote(record.replace("VALUE", v)) for v in ("1", "2"))
    return f"if test -e {fails_until}; then echo {then}; else echo {first}; exit 1; fi"


def test_a_failed_attempts_records_are_never_told(tmp_path: Path) -> None:
    calls, out, ledger = _files(tmp_path)
    ok = tmp_path / "ok"
    line = _shell('{"task":1,"id":"a","status":"ok","value":VALUE}', ok)
    add_tasks(calls, [line])
    run_tasks(calls, out, shell=True)  # fails, its line in OUT
    assert out.read_text().count('"value":1') == 1
    news = news_since(out, ledger, {1: line}, 3)
    assert news.committed == [] and news.given_up == []
    ok.touch()
    run_tasks(calls, out, shell=True)
    news = news_since(out, ledger, {1: line}, 3, news.cursor._replace(at=0.0))
    assert [decode_record(r)["value"] for _, r in news.committed] == [2]


def test_a_task_given_up_is_told_once(tmp_path: Path) -> None:
    calls, out, ledger = _files(tmp_path)
    lines = [
        f"exec {shlex.quote(sys.executable)} -c 'import os; os.kill(os.getpid(), 9)' {i}"
        for i in range(2)
    ]
    nums = add_tasks(calls, lines)
    waiting = dict(zip(nums, lines))
    run_tasks(calls, out, shell=True, retries=1, max_attempts=2)
    news = news_since(out, ledger, waiting, 2)
    assert sorted(n for n, _ in news.given_up) == [1, 2]
    assert all(how.startswith("killed") for _, how in news.given_up)
    again = news_since(out, ledger, waiting, 2, news.cursor._replace(at=0.0))
    assert again.given_up == []
    # the same ledger read with a higher max_attempts: not given up, not done: waits
    assert news_since(out, ledger, waiting, 3).given_up == []


@pytest.mark.parametrize("seed", range(5))
def test_a_task_set_is_a_set(seed: int) -> None:
    rng = random.Random(seed)
    tasks, model = TaskSet(), set()
    for _ in range(2000):
        n = rng.randrange(0, 5000)
        if rng.random() < 0.7:
            tasks.add(n)
            model.add(n)
        else:
            tasks.discard(n)
            model.discard(n)
    assert tasks.count == len(model)
    assert [n for n in range(5001) if n in tasks] == sorted(model)
    assert -1 not in tasks and "1" not in tasks
