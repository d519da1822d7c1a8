"""Which tasks a run claims and starts next: the queue, fed what the ledger said."""

from __future__ import annotations

from zotsink._run.queue import AHEAD_TASKS, ASK_BEYOND, Candidate, TaskQueue
from zotsink._run.tasks import Task

T = [Task(n, f"t{n}") for n in range(20)]


def test_tasks_by_name_are_asked_in_order_and_an_own_retry_goes_first() -> None:
    q = TaskQueue("chunk")
    q.add([Candidate(T[1], 1), Candidate(T[2], 1), Candidate(T[3], 1)])
    asked = q.ask(2)  # a claim of two is handed more: it drops those taken since the look
    assert [c.task.num for c in asked] == [1, 2, 3]
    q.claimed([(T[1], 1), (T[2], 1)], [], 0.0, drained=True, rest=asked[2:])
    assert q.next() == (T[1], 1, 0.0)
    q.retry(T[1], 1)
    assert [(c.task.num, c.attempt) for c in q.ask(5)] == [(1, 2), (3, 1)]


def test_a_claim_is_handed_a_bounded_number_of_tasks_by_name_and_gives_the_free_back() -> None:
    q = TaskQueue("pull")
    tasks = [Task(n, f"t{n}") for n in range(1, 3001)]
    q.add([Candidate(t, 1) for t in tasks])
    asked = q.ask(3)
    assert len(asked) == 3 + ASK_BEYOND
    # another run took 1 and 5 since the look: dropped; 2-4 claimed; the rest given back
    q.claimed([(tasks[n - 1], 1) for n in (2, 3, 4)], [asked[0], asked[4]], 0.0,
              drained=False, rest=asked[5:])  # fmt: skip
    assert q.elsewhere == 2 and q.pending == 3000 - 5
    assert [c.task.num for c in q.ask(0)][:3] == [6, 7, 8]


def test_a_claim_not_written_gives_its_tasks_back_in_order() -> None:
    q = TaskQueue("chunk")
    q.add([Candidate(t, 1) for t in T[1:4]])
    q.ask(2)
    q.unasked()
    assert [c.task.num for c in q.ask(3)] == [1, 2, 3]


def test_tasks_another_run_claimed_since_the_look_are_dropped() -> None:
    asked = [Candidate(T[1], 1), Candidate(T[2], 3), Candidate(T[3], 1)]
    take, drop = TaskQueue.verify(asked, {1: 0, 2: 3, 3: 0}.__getitem__)
    assert [c.task.num for c in take] == [1, 3] and [c.task.num for c in drop] == [2]


def test_how_many_to_claim_follows_the_rate_tasks_start_at() -> None:
    q = TaskQueue("pull")
    assert q.to_claim(2, 0.25, 0.0) == 2  # before any task ran: only the free slots
    q.claimed([(t, 1) for t in T[1:3]], [], 0.0, drained=False)
    q.ran()
    q.next(), q.next()
    # two started in 0.4 s: 5 a second; twice the window ahead is 2.5, so 2 more
    assert q.to_claim(2, 0.25, 0.4) == 4


def test_a_rate_is_measured_over_a_commit_window_at_least() -> None:
    # two tasks taken by a worker within a millisecond are not 2,000 a second: a claim
    # on that rate held 1,000 tasks it could not start, given back a second later
    q = TaskQueue("pull")
    q.claimed([(t, 1) for t in T[1:3]], [], 0.0, drained=False)
    q.ran()
    q.next(), q.next()
    assert q.to_claim(2, 0.25, 0.001) == 2 + 4  # 2 in 0.25 s: 8 a second, 4 ahead


def test_a_claim_takes_a_thousand_tasks_ahead_at_most() -> None:
    # a run alone at first starts 40,000 quick tasks a second; once the other elements of
    # its array have started it gets a sixty-fourth of that, and what it claimed on the
    # first rate waits for the list's end to be given back
    q = TaskQueue("pull")
    q.claimed([(Task(n, f"t{n}"), 1) for n in range(1, 10_001)], [], 0.0, drained=False)
    q.ran()
    for _ in range(10_000):
        q.next()
    assert q.to_claim(64, 0.25, 0.25) == 64 + AHEAD_TASKS


def test_tasks_of_a_second_or_more_are_not_claimed_ahead() -> None:
    # their commit window is 2 s: claimed for the commit after the next, a run would sit
    # on 4 s of them while other runs idle
    q = TaskQueue("pull")
    q.claimed([(T[1], 1)], [], 0.0, drained=False)
    q.ran()
    q.next()
    assert q.to_claim(1, 2.0, 1.0) == 1  # one a second, half a second ahead at most: none
    q.claimed([(T[2], 1)], [], 1.0, drained=False)
    q.next()
    assert q.to_claim(1, 0.25, 1.01) == 1 + 2  # then quick: 4 a second over the window


def test_a_stop_claims_nothing_more_and_gives_back_what_was_claimed() -> None:
    q = TaskQueue("pull")
    q.claimed([(t, 1) for t in T[1:4]], [], 0.0, drained=False)
    q.stop()
    assert q.next() is None and q.to_claim(4, 0.25, 1.0) == 0
    assert q.release() == [(T[1], 1), (T[2], 1), (T[3], 1)]
    assert not q.has_work


def test_claims_held_too_long_are_given_back_last_first() -> None:
    q = TaskQueue("pull")
    q.claimed([(t, 1) for t in T[1:4]], [], 0.0, drained=False)
    assert q.next() == (T[1], 1, 0.0)
    assert q.stale(0.5, hold=1.0) == []
    assert q.stale(1.5, hold=1.0) == [(T[3], 1), (T[2], 1)]
    assert q.claimed_count == 0


def test_a_look_s_free_tasks_come_once_and_others_holding_means_waiting() -> None:
    q = TaskQueue("pull")
    q.claimed([], [], 0.0, drained=True)
    assert not q.has_work and not q.waits_on_others
    assert q.learn([Candidate(T[5], 2, taken=True)], held=3) == 1
    assert q.learn([Candidate(T[5], 2, taken=True)], held=3) == 0  # known already
    assert q.has_work and not q.waits_on_others  # its own first
    (c,) = q.ask(5)
    q.claimed([(c.task, c.attempt)], [], 0.0, drained=True, taken_over=1)
    q.next()
    assert q.taken_over == 1 and q.waits_on_others  # then it waits on the others


def test_a_chunk_counts_what_it_finds_done_given_up_or_running_elsewhere() -> None:
    q = TaskQueue("chunk")
    q.settle_chunk(3, {7}, 2)
    assert (q.skipped, q.given_up, q.elsewhere) == (3, {7}, 2)
    q.give_up(9)
    assert q.given_up == {7, 9}


def test_a_followed_list_waits_for_lines_until_closed() -> None:
    q = TaskQueue("follow")
    assert not q.closed and q.has_work  # the cursor may have tasks
    q.claimed([], [], 0.0, drained=True)
    assert not q.has_work
    q.grew()
    assert q.has_work
    q.close()
    assert q.closed


def test_a_probing_run_claims_one_task_only() -> None:
    q = TaskQueue("chunk")
    q.add([Candidate(t, 1) for t in T[1:9]])
    q.limit(1)
    assert q.to_claim(4, 0.25, 0.0) == 1
    q.claimed([(T[1], 1)], [], 0.0, drained=True)
    assert q.to_claim(4, 0.25, 0.0) == 0
    q.limit(None)
    q.next()
    assert q.to_claim(4, 0.25, 0.0) == 4
