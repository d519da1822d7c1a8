"""The queue decides which tasks are this run's next: fed events, it is asked for picks.

No processes and no ledger file, except in the last test, which checks that the ledger
reads a late task's history for the queue."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from zotsink._ledgerfile import LedgerRow
from zotsink._run.states import TaskState, given_up, read_begin

from zotsink._run.ledger import Ledger
from zotsink._run.queue import ChunkSource, FollowSource, PullSource, TaskQueue, verdict
from zotsink._run.tasks import Task, task_of

T = [Task(n, f"line {n}") for n in range(1, 8)]


class GrowingSource:
    """A task list that grows while the run is live (as a followed list would)."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        self.new = list(tasks)
        self.closed = False

    def take(self) -> Sequence[Task]:
        new, self.new = self.new, []
        return new


def row(num: int, event: str = "start", status: str = "", host: str = "h") -> LedgerRow:
    return LedgerRow(event, "t", num, f"line {num}", "1", "", "", host, "1", status, *[""] * 6)


def state(num: int, st: str, starts: int = 1, failures: int = 0) -> TaskState:
    return TaskState(num, st, starts, row(num, "end" if st != "running" else "start"), failures)


def queue(tasks: Sequence[Task], states: dict[int, TaskState], **kw: object) -> TaskQueue[Task]:
    max_attempts = kw.pop("max_attempts", None)
    q: TaskQueue[Task] = TaskQueue(
        ChunkSource(tasks),
        given_up=lambda s: given_up(s, max_attempts),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )
    q.refill()
    q.learn(states)
    return q


def claimed(q: TaskQueue[Task], n: int, states: dict[int, TaskState], alive: bool = False):
    picked = q.pick(n, states, lambda r: alive)
    for task, attempt in picked.claimed:  # what the ledger records of a pick
        states[task.num] = TaskState(task.num, "running", attempt, None, 0)
    return [(t.num, a) for t, a in picked.claimed], [t.num for t in picked.dropped]


def test_begin_leaves_out_ok_and_given_up_tasks() -> None:
    states = {1: state(1, "ok"), 2: state(2, "failed", 3, 3), 3: state(3, "failed", 1, 1)}
    q = queue(T[:4], states, max_attempts=3)
    assert (q.total, q.skipped, q.given_up) == (2, 1, {2})
    assert claimed(q, 10, states) == ([(3, 2), (4, 1)], [])
    assert q.exhausted is False  # claimed, not started
    assert q.next() == (T[2], 2) and q.next() == (T[3], 1) and q.next() is None
    assert q.exhausted


def test_a_pick_drops_tasks_done_or_running_elsewhere_and_takes_lost_ones() -> None:
    states: dict[int, TaskState] = {}
    q = queue(T[:4], states)
    # news read under the lock: another run finished 1, runs 2, and ran 3 on a dead node
    states.update({1: state(1, "ok"), 2: state(2, "running"), 3: state(3, "lost", 2)})
    assert claimed(q, 10, states, alive=True) == ([(3, 3), (4, 1)], [1, 2])
    assert q.elsewhere == 2


def test_running_elsewhere_means_a_live_run() -> None:
    s = state(1, "running")
    assert verdict(s, rerun=False, given_up=lambda _: False, alive=lambda r: True) == "elsewhere"
    assert verdict(s, rerun=False, given_up=lambda _: False, alive=lambda r: None) == "start"
    ok = state(1, "ok")
    assert verdict(ok, rerun=True, given_up=lambda _: False, alive=lambda r: True) == "start"


def test_up_to_n_in_order_and_a_retry_goes_first() -> None:
    states: dict[int, TaskState] = {}
    q = queue(T[:5], states)
    assert claimed(q, 2, states) == ([(1, 1), (2, 1)], [])
    q.retry(T[0])
    states[1] = state(1, "failed", 1, 1)  # its end row
    assert claimed(q, 2, states) == ([(1, 2), (3, 1)], [])
    assert q.pending == 2 and q.claimed == 4


def test_rerun_runs_an_ok_task_again_once() -> None:
    states = {1: state(1, "ok")}
    q = queue(T[:1], states, rerun=True)
    assert (q.total, q.skipped) == (1, 0)
    assert claimed(q, 1, states) == ([(1, 2)], [])
    q.retry(T[0])
    states[1] = state(1, "ok", 2)  # another run finished it meanwhile
    assert claimed(q, 1, states) == ([], [1])


def test_how_many_to_claim_follows_the_rate_tasks_start_at() -> None:
    states: dict[int, TaskState] = {}
    q = queue(T, states)
    window = 0.25
    # nothing ran yet: the free slots only (a command that cannot start claims no more)
    assert q.to_claim(2, window, now=0.0) == 2
    claimed(q, 2, states)
    assert q.to_claim(0, window, now=0.1) == 0  # two claimed, none free
    q.next(), q.next()
    q.ran()
    # two started in the 0.5 s since the claim: four a second, one more ahead in 0.5 s
    assert q.to_claim(1, window, now=0.5) == 1 + math.ceil(4 * 2 * window)
    assert q.claim_due(1, idle=False)
    assert not q.claim_due(0, idle=False) and q.claim_due(0, idle=True)


def test_a_claim_not_written_gives_its_tasks_back() -> None:
    states: dict[int, TaskState] = {}
    q = queue(T[:3], states)
    picked = q.pick(2, states)
    q.unpick(picked)
    assert (q.pending, q.claimed) == (3, 0)
    assert claimed(q, 3, states)[0] == [(1, 1), (2, 1), (3, 1)]


def test_a_stop_claims_nothing_more_and_releases_what_was_claimed() -> None:
    states: dict[int, TaskState] = {}
    q = queue(T[:4], states)
    claimed(q, 2, states)
    q.stop()
    assert q.to_claim(4, 0.25, now=1.0) == 0
    assert claimed(q, 4, states) == ([], [])
    q.retry(T[0])
    assert q.pending == 0 and q.next() is None and not q.has_work
    assert q.release() == [(T[0], 1), (T[1], 1)]
    assert q.exhausted


def test_a_task_unknown_when_the_run_began_waits_for_its_history() -> None:
    """The trap: rows of a task number the run did not know at its start were passed over;
    picked blind, a task another run finished would start again as attempt 1."""
    source = GrowingSource(T[:2])
    q: TaskQueue[Task] = TaskQueue(source, given_up=lambda s: False)
    q.refill()
    states: dict[int, TaskState] = {}
    q.learn(states)
    source.new = [T[2], T[3]]  # two lines added to the list
    q.refill()
    assert dict(q.unlearned) == {3: "line 3", 4: "line 4"}
    assert 3 in q.keys and 4 in q.keys  # the ledger folds their rows from now on
    assert claimed(q, 10, states) == ([(1, 1), (2, 1)], [])  # not before their history
    assert not q.exhausted and q.has_work
    q.next(), q.next()
    assert q.to_claim(1, 0.25, now=1.0) == 1  # a claim, for the ledger to read it
    # the ledger read their history: 3 was done by another run, 4 lost twice
    states.update({3: state(3, "ok"), 4: state(4, "lost", 2)})
    q.learn(states)
    assert dict(q.unlearned) == {}
    assert claimed(q, 10, states) == ([(4, 3)], [])
    assert q.skipped == 1


def test_the_ledger_reads_a_late_tasks_history_before_the_pick(tmp_path: Path) -> None:
    path = tmp_path / "out.ledger"
    source = GrowingSource(T[:1])
    book = Ledger(path, env={})
    q: TaskQueue[Task] = TaskQueue(source, given_up=book.gives_up)
    q.refill()
    states, seen, recorded = read_begin(path, q.keys)
    book.begin(q.keys, states, seen, rerun=False, recorded=recorded)
    q.learn(states)
    assert book.claim(q, 1, []) == ([(T[0], 1)], [])
    # another run, which knew the longer list, runs task 2 to its end
    other = Ledger(path, env={})
    other.append([other.start_row(2, "line 2", 1), other.end_row(2, "line 2", 1, status="ok")])
    other.append([other.start_row(3, "line 3", 1)])
    other.close()
    # the rows above are news at this claim: read, and passed over (numbers unknown)
    assert book.claim(q, 1, []) == ([], [])
    source.new = [T[1], T[2]]
    q.refill()
    other = Ledger(path, env={})
    other.append([other.end_row(3, "line 3", 1, status="failed")])
    other.close()
    # task 2 is not run again; task 3 gets attempt 2, not 1. The claim that wrote nothing
    # looked up to the end of the rows it read: they are history to learn, not news again
    assert book.claim(q, 2, []) == ([(T[2], 2)], [])
    assert q.skipped == 1
    assert book.states[1].starts == 1  # this run's own start row, folded once
    book.close()


@pytest.mark.parametrize("source", [ChunkSource(T[:3]), GrowingSource(T[:3])])
def test_every_source_hands_its_tasks_over_once(source: ChunkSource[Task]) -> None:
    q: TaskQueue[Task] = TaskQueue(source, given_up=lambda s: False)
    assert q.refill() == 3 and q.refill() == 0
    q.learn({})
    assert [t.num for t, _ in q.pick(5, {}).claimed] == [1, 2, 3]


def test_a_pull_source_reads_the_list_once() -> None:
    reads: list[int] = []

    def read() -> list[Task]:
        reads.append(1)
        return T[:3]

    source: PullSource[Task] = PullSource(read)
    assert not source.closed
    assert list(source.take()) == T[:3]
    assert source.closed and list(source.take()) == [] and len(reads) == 1


def test_a_follow_source_takes_whole_new_lines_by_offset() -> None:
    data = bytearray(b"a\n\n# c\nb")
    asked: list[int] = []

    def tail(at: int) -> bytes:
        asked.append(at)
        return bytes(data[at:])

    source: FollowSource[Task] = FollowSource(tail, task_of)
    assert list(source.take()) == [Task(1, "a")]  # "b" has no newline yet: it waits
    data += b"\nd\r\n"
    assert list(source.take()) == [Task(4, "b"), Task(5, "d")]
    assert list(source.take()) == []
    assert asked == [0, 7, 12]
    assert not source.closed
    source.close()
    assert source.closed


def test_a_follow_source_closed_at_n_lines_takes_them_all_first() -> None:
    """A close row records how many lines the list had: a node that sees the last lines
    late still takes them before the source counts as closed."""
    data = bytearray(b"a\n")
    source: FollowSource[Task] = FollowSource(lambda at: bytes(data[at:]), task_of)
    assert list(source.take()) == [Task(1, "a")]
    source.close(3)  # closed when the list had 3 lines; this node has seen 1
    assert not source.closed
    data += b"b\nc\n"
    assert list(source.take()) == [Task(2, "b"), Task(3, "c")]
    assert source.closed


def test_take_over_keeps_unknown_runs_tasks_and_takes_dead_ones() -> None:
    states = {1: state(1, "running"), 2: state(2, "running"), 3: state(3, "running")}
    q = queue(T[:4], states, take_over=True)
    # an unknown (None) run keeps its task, as a live one does: watched, not started
    live = {1: True, 2: None, 3: True}
    picked = q.pick(10, states, lambda r: live[r.tasknum])
    assert [t.num for t, _ in picked.claimed] == [4]
    assert sorted(q.watched) == [1, 2, 3]
    for task, attempt in picked.claimed:
        states[task.num] = TaskState(task.num, "running", attempt, None, 0)
    q.next()
    assert q.waits_on_others and not q.exhausted
    # 1's run died, 2's cannot be told of, 3 ended ok
    states[3] = state(3, "ok")
    assert q.recheck(states, lambda r: {1: False, 2: None}[r.tasknum]) == 1
    assert q.unknown == {2} and q.watched == {}
    assert claimed(q, 5, states) == ([(1, 2)], [])
    assert q.taken_over == 1
    assert not q.waits_on_others


def test_a_deadline_leaves_tasks_to_other_runs() -> None:
    q = queue(T[:3], {})
    q.deadline, q.task_time = 10.0, 4.0
    assert q.to_claim(1, 0.25, now=5.0) == 1
    assert q.to_claim(1, 0.25, now=6.5) == 0  # would end at 10.5
    assert q.out_of_time and q.exhausted and not q.has_work
    assert not q.claim_due(1, True)


def test_a_dead_runs_task_another_run_took_first_is_watched_again() -> None:
    states = {1: state(1, "running")}
    q = queue(T[:1], states, take_over=True)
    assert claimed(q, 1, states) == ([], [1])
    assert q.recheck(states, lambda r: False) == 1
    # another pull run took it over first: its new start row is not the one found dead
    states[1] = TaskState(1, "running", 2, row(1, host="other"), 0)
    assert claimed(q, 1, states) == ([], [1])
    assert sorted(q.watched) == [1] and q.taken_over == 0


def test_a_task_its_run_interrupted_while_watched_comes_back() -> None:
    """A cancelled element ends its tasks ``interrupted`` while another pull run waits on
    them: they are not done, and that run takes them (not taken over: nobody died)."""
    states = {1: state(1, "running"), 2: state(2, "running")}
    q = queue(T[:2], states, take_over=True)
    assert claimed(q, 2, states, alive=True) == ([], [1, 2])
    assert q.waits_on_others
    states[1], states[2] = state(1, "interrupted"), state(2, "failed")
    assert q.recheck(states, lambda r: True) == 1
    assert q.watched == {} and q.elsewhere == 1
    assert claimed(q, 5, states) == ([(1, 2)], [])
    assert q.taken_over == 0
