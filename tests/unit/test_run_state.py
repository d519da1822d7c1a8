"""The run's decisions, fed events with no process, file or clock: each test hands
``RunState.handle`` what happened and reads the instructions it returns."""

from __future__ import annotations

import signal
from typing import Any

from zotsink._run.commit import BEGIN_WITHIN
from zotsink._run.events import (
    Began,
    Claim,
    Claimed,
    Commit,
    Committed,
    Done,
    Drain,
    Drained,
    Exited,
    HandedBack,
    Hold,
    Key,
    Look,
    Looked,
    Placed,
    Returned,
    Rows,
    Signal,
    Signalled,
    Spawn,
    Start,
    Started,
    StartFailed,
    StopWorkers,
    Turn,
    WorkerReady,
    WorkerStarted,
)
from zotsink._run.halting import Halting
from zotsink._run.queue import Candidate, TaskQueue
from zotsink._run.state import (
    HOLD,
    LOOK_FIRST,
    LOOK_MOST,
    STOP_SETTLE,
    Plan,
    RunState,
)
from zotsink._run.tasks import Task
from zotsink._run.usage import Usage

T = [Task(n, f"t{n}") for n in range(0, 40)]


def kinds(out: list[Any]) -> list[str]:
    return [type(x).__name__ for x in out]


def of(out: list[Any], kind: type) -> list[Any]:
    return [x for x in out if isinstance(x, kind)]


class Run:
    """A RunState and its clock, driven as the pool drives it."""

    def __init__(self, mode: str = "chunk", **plan: Any) -> None:
        self.queue = TaskQueue(mode)  # type: ignore[arg-type]
        halting = plan.pop("halting", None)
        self.state = RunState(Plan(**{"calls": False, "jobs": 1, **plan}), self.queue,
                              halting=halting, now=0.0)  # fmt: skip
        self.now = 0.0
        self.jobs = plan.get("jobs", 1)

    def turn(self, *events: Any, at: float | None = None, free: int | None = None) -> list[Any]:
        """A turn; the free slots as a command backend has them (``free`` given: as a
        function backend's workers say)."""
        if at is not None:
            self.now = at
        if free is None:
            free = self.jobs - len(self.state.live)
        return self.state.handle([Turn(self.now, free), *events])

    def claimed(
        self, *tasks: tuple[Task, int], drained: bool = True, taken: tuple[int, ...] = ()
    ) -> list[Any]:
        """The claim written as the ledger writes it: ``tasks`` claimed, the numbers
        ``taken`` by another run since the look dropped, the other tasks asked given back."""
        got = {t.num for t, _a in tasks} | set(taken)
        rest = [c for c in self.state._asked if c.task.num not in got]
        return self.turn(Claimed(list(tasks), drained, rest=rest))

    def started(self, *nums: int, attempt: int = 1) -> list[Any]:
        return self.turn(*(Started((n, attempt), 1000 + n, "s") for n in nums))

    def ends(self, num: int, code: int = 0, attempt: int = 1, size: int = 0) -> list[Any]:
        return self.turn(
            Exited((num, attempt), code, Usage()), Drained((num, attempt), size, "boom")
        )

    def committed(self, *keys: tuple[int, int]) -> list[Any]:
        return self.turn(Committed([Placed(k, 0, 1, 0) for k in keys]))


def test_a_run_claims_starts_commits_and_writes_each_end() -> None:
    r = Run()
    r.queue.add([Candidate(T[1], 1), Candidate(T[2], 1)])
    out = r.turn()
    (claim,) = of(out, Claim)
    # asked for one, handed both: the claim drops those another run took since the look
    assert claim.n == 1 and [c.task.num for c in claim.explicit] == [1, 2]
    assert of(r.claimed((T[1], 1)), Start) == [Start([(T[1], 1)])]
    out = r.started(1)
    assert of(out, Rows) == []  # a begin row waits for the next append, or a while
    out = r.ends(1)
    assert of(out, Commit) == [Commit([(1, 1)])]  # alone: nothing else runs
    out = r.committed((1, 1))
    # the end goes with the next claim
    rows, claim = of(out, Rows)[0], of(out, Claim)[0]
    assert [e.key for _c, group in rows.ends for e in group] == [(1, 1)]
    assert rows.begins == []  # ended before its begin row was written: the end says all
    assert [c.task.num for c in claim.explicit] == [2]
    assert r.state.final == {1: "ok"}


def test_a_retry_goes_first_with_its_next_attempt() -> None:
    r = Run(retries=1)
    r.queue.add([Candidate(T[1], 1), Candidate(T[2], 1)])
    (claim,) = of(r.turn(), Claim)
    assert claim.n == 1 and [c.task.num for c in claim.explicit] == [1, 2]
    r.claimed((T[1], 1))
    r.started(1)
    r.ends(1, code=3)
    out = r.committed((1, 1))
    assert r.state.final == {1: "failed"}
    (claim,) = of(out, Claim)
    assert [(c.task.num, c.attempt) for c in claim.explicit] == [(1, 2), (2, 1)]


def test_commands_that_cannot_start_halt_the_run_after_a_few() -> None:
    r = Run(jobs=1)
    r.queue.add([Candidate(t, 1) for t in T[1:10]])
    r.turn()
    for n in range(1, 4):
        r.claimed((T[n], 1))
        r.turn(StartFailed((n, 1), "cannot start 'nosuch': No such file", own=False))
        r.committed((n, 1))
    assert r.state.halted is not None and "the first 3 tasks could not start" in r.state.halted
    out = r.turn()
    assert of(out, Claim) == [] and of(out, Done)


def test_a_task_whose_line_is_at_fault_fails_alone() -> None:
    r = Run()
    r.queue.add([Candidate(t, 1) for t in T[1:6]])
    r.turn()
    for n in range(1, 5):
        r.claimed((T[n], 1))
        r.turn(StartFailed((n, 1), "argument list too long", own=True))
        r.committed((n, 1))
    assert r.state.halted is None


def test_a_stop_signals_commands_gives_grace_then_kills_and_a_second_one_kills_now() -> None:
    r = Run(jobs=2, grace=10.0)
    r.queue.add([Candidate(t, 1) for t in T[1:6]])
    r.turn(free=2)
    r.claimed((T[1], 1), (T[2], 1), (T[3], 1))
    r.started(1, 2)
    out = r.turn(Signalled(signal.SIGUSR2, 1), at=1.0)
    assert of(out, Signal) == [Signal((1, 1), signal.SIGUSR2), Signal((2, 1), signal.SIGUSR2)]
    # the claimed task not started is given back, never begun
    rows = of(out, Rows)
    assert [k for r_ in rows for k in r_.releases] == [(3, 1)]
    out = r.turn(at=11.5)  # the grace is over: SIGTERM
    assert sorted(of(out, Signal)) == [Signal((1, 1), 15), Signal((2, 1), 15)]
    out = r.turn(Signalled(signal.SIGINT, 2), at=12.0)  # Ctrl-C again: SIGKILL now
    assert sorted(of(out, Signal)) == [Signal((1, 1), 9), Signal((2, 1), 9)]
    out = r.turn(
        Exited((1, 1), -9, Usage()),
        Drained((1, 1), 0),
        Exited((2, 1), -9, Usage()),
        Drained((2, 1), 0),
    )
    (commit,) = of(out, Commit)  # at a stop, at once
    out = r.turn(Committed([Placed(k, 0, 0, 0) for k in commit.keys]))
    ends = [e for r_ in of(out, Rows) for _c, g in r_.ends for e in g]
    assert {e.key: e.status for e in ends} == {(1, 1): "interrupted", (2, 1): "interrupted"}
    assert of(out, Done)


def test_a_task_dead_of_a_stop_signal_waits_for_the_run_s_own() -> None:
    r = Run()
    r.queue.add([Candidate(T[1], 1)])
    r.turn()
    r.claimed((T[1], 1))
    r.started(1)
    out = r.turn(Exited((1, 1), -15, Usage()), Drained((1, 1), 0), at=1.0)
    assert of(out, Commit) == []  # scancel signals everyone: the run's SIGTERM may follow
    out = r.turn(Signalled(signal.SIGTERM, 1), at=1.5)
    assert of(out, Commit)
    out = r.turn(Committed([Placed((1, 1), 0, 0, 0)]))
    (end,) = [e for r_ in of(out, Rows) for _c, g in r_.ends for e in g]
    assert end.status == "interrupted"
    # and without a stop of its own, after STOP_SETTLE: killed by somebody
    r = Run()
    r.queue.add([Candidate(T[1], 1)])
    r.turn()
    r.claimed((T[1], 1))
    r.started(1)
    r.turn(Exited((1, 1), -15, Usage()), Drained((1, 1), 0), at=1.0)
    out = r.turn(at=1.0 + STOP_SETTLE)
    assert of(out, Commit)
    out = r.turn(Committed([Placed((1, 1), 0, 0, 0)]))
    (end,) = [e for r_ in of(out, Rows) for _c, g in r_.ends for e in g]
    assert end.status == "killed"


def test_a_task_dead_of_a_stop_signal_in_the_turn_of_the_run_s_own_is_interrupted() -> None:
    """scancel signals every process of the job at once: the task's death and the run's
    SIGTERM may be read in one turn, the death first. The task was stopped, not killed by
    somebody, and a task that ended ok in that turn stays ok."""
    r = Run(jobs=2)
    r.queue.add([Candidate(T[1], 1), Candidate(T[2], 1)])
    r.turn(free=2)
    r.claimed((T[1], 1), (T[2], 1))
    r.started(1, 2)
    out = r.turn(
        Exited((1, 1), -15, Usage()),
        Drained((1, 1), 0),
        Exited((2, 1), 0, Usage()),
        Drained((2, 1), 0),
        Signalled(signal.SIGTERM, 1),
        at=1.0,
    )
    (commit,) = of(out, Commit)
    out = r.turn(Committed([Placed(k, 0, 0, 0) for k in commit.keys]))
    ends = [e for r_ in of(out, Rows) for _c, g in r_.ends for e in g]
    assert {e.key: e.status for e in ends} == {(1, 1): "interrupted", (2, 1): "ok"}


def test_pipes_left_open_are_drained_after_a_while() -> None:
    r = Run()
    r.queue.add([Candidate(T[1], 1)])
    r.turn()
    r.claimed((T[1], 1))
    r.started(1)
    out = r.turn(Exited((1, 1), 0, Usage()), at=1.0)
    assert of(out, Drain) == []
    out = r.turn(at=3.5)
    assert of(out, Drain) == [Drain((1, 1))]


def test_a_timeout_terminates_then_kills() -> None:
    r = Run(task_timeout=5.0)
    r.queue.add([Candidate(T[1], 1)])
    r.turn()
    r.claimed((T[1], 1))
    r.started(1)
    assert of(r.turn(at=4.9), Signal) == []
    assert of(r.turn(at=5.0), Signal) == [Signal((1, 1), signal.SIGTERM)]
    assert of(r.turn(at=10.1), Signal) == [Signal((1, 1), signal.SIGKILL)]
    r.turn(Exited((1, 1), -9, Usage()), Drained((1, 1), 0))
    out = r.turn(Committed([Placed((1, 1), 0, 0, 0)]))
    (end,) = [e for r_ in of(out, Rows) for _c, g in r_.ends for e in g]
    assert end.status == "timeout"


def test_a_pull_run_looks_less_often_while_nothing_changes_and_takes_what_it_finds() -> None:
    r = Run(mode="pull")
    out = r.turn()
    (claim,) = of(out, Claim)
    out = r.claimed(drained=True)  # the cursor has no task: look at the others
    assert of(out, Look) == [Look(deep=True)]
    out = r.turn(Looked(held=2), at=0.0)  # two held by live runs: wait for them
    assert of(out, Done) == []
    waits = []
    for _ in range(8):
        at = r.state.wake()
        assert at is not None
        waits.append(round(at - r.now, 3))
        out = r.turn(at=at)
        assert of(out, Look)
        out = r.turn(Looked(held=2))
    assert waits[0] == 2 * LOOK_FIRST and waits[-1] == LOOK_MOST
    assert waits == sorted(waits)
    # a run died: its task comes free, and is claimed by name
    out = r.turn(Looked(free=[(T[5], 2, False, True, 0)], held=1), at=r.state.wake())
    (claim,) = of(out, Claim)
    assert [(c.task.num, c.attempt, c.taken) for c in claim.explicit] == [(5, 2, True)]


def test_a_followed_list_ends_once_closed_and_every_line_taken() -> None:
    r = Run(mode="follow", idle=None)
    r.turn()
    out = r.claimed(drained=True)
    assert of(out, Look)
    out = r.turn(Looked(closed=False))
    assert of(out, Done) == []
    out = r.turn(Looked(closed=True, grew=True), at=r.state.wake())  # a last line came
    assert of(out, Claim)
    out = r.claimed((T[1], 1), drained=True)
    r.started(1)
    r.ends(1)
    out = r.committed((1, 1))
    assert of(out, Done)


def test_a_followed_list_with_idle_ends_when_nothing_comes() -> None:
    r = Run(mode="follow", idle=2.0)
    r.turn()
    r.claimed(drained=True)
    at = 0.0
    done = False
    for _ in range(20):
        out = r.turn(Looked(), at=at)
        if of(out, Done):
            done = True
            break
        at = r.state.wake() or at
    assert done and r.state.idled_out and at >= 2.0


def test_the_deadline_is_judged_when_a_task_would_begin() -> None:
    """A task claimed ahead does not begin past the deadline: it is given back."""
    r = Run(deadline=10.0, task_time=3.0, jobs=1)
    r.queue.add([Candidate(t, 1) for t in T[1:4]])
    r.turn()
    r.claimed((T[1], 1), (T[2], 1))
    assert of(r.turn(at=1.0), Start) == []  # task 1 started at the claim above
    r.started(1)
    r.ends(1)
    out = r.turn(at=8.0, free=1)
    # 8 + 3 > 10: task 2 (claimed) is not begun but released; nothing more is claimed
    assert of(out, Start) == [] and of(out, Commit) == [Commit([(1, 1)])]
    assert [k for r_ in of(out, Rows) for k in r_.releases] == [(2, 1)]
    assert r.queue.out_of_time
    out = r.turn(Committed([Placed((1, 1), 0, 0, 0)]), at=8.0, free=1)
    assert of(out, Done)


def released(out: list[Any]) -> list[Key]:
    return sorted(k for r_ in of(out, Rows) for k in r_.releases)


def test_claims_held_too_long_are_given_back_once_the_list_has_no_more() -> None:
    r = Run(mode="pull", jobs=1)
    r.turn()
    r.claimed((T[1], 1), (T[2], 1), (T[3], 1), drained=True)
    r.started(1)
    out = r.turn(at=HOLD / 2)
    assert released(out) == []
    out = r.turn(at=HOLD + 0.01)  # behind task 1, with no line left for others: 2 and 3 go
    assert released(out) == [(2, 1), (3, 1)]


def test_a_slot_a_slow_task_just_left_starts_the_next_rather_than_give_it_back() -> None:
    r = Run(mode="pull", jobs=1)
    r.turn()
    r.claimed((T[1], 1), (T[2], 1), (T[3], 1), drained=True)
    r.started(1)
    r.turn(at=HOLD - 0.01)
    # task 1 ended as the hold passed (its slot free as the backend says): 2 starts in it,
    # 3 is given back
    out = r.turn(Exited((1, 1), 0, Usage()), Drained((1, 1), 0, ""), at=HOLD + 0.01, free=1)
    assert of(out, Start) == [Start([(T[2], 1)])] and released(out) == [(3, 1)]


def test_claims_held_too_long_stay_while_the_list_has_lines_past_the_cursor() -> None:
    # a run short of CPU (one of many on few cores) runs quick tasks slowly: the tasks it
    # claimed wait past the hold. While the list has lines past the cursor every run
    # claims from it and none idles for want of them: giving them back would only make
    # others look for them and claim them by name. Once it has none, they go
    r = Run(mode="pull", jobs=1)
    r.turn()
    r.claimed((T[1], 1), (T[2], 1), (T[3], 1), drained=False)
    r.started(1)
    r.turn(at=0.9)
    r.ends(1)
    out = r.committed((1, 1))
    assert of(out, Claim) == [] and of(out, Start) == [Start([(T[2], 1)])]
    r.started(2)  # began at 0.9: quick, like the rest
    out = r.turn(at=HOLD + 0.01)  # 3 waited past the hold
    assert released(out) == [] and of(out, Look) == [Look(deep=False)]
    out = r.turn(Looked(grew=True))  # lines wait past the cursor: kept
    assert released(out) == [] and of(out, Look) == []
    out = r.turn(at=HOLD + 0.1)
    assert of(out, Look) == []  # a peek every quarter of the hold at most
    out = r.turn(at=HOLD + 0.3)
    assert of(out, Look) == [Look(deep=False)]
    out = r.turn(Looked(grew=False))  # the other runs took the list's last lines
    assert released(out) == [(3, 1)]
    assert r.state.queue.others == 0


def test_a_halt_on_alike_failures_claims_nothing_more_and_gives_back_the_rest() -> None:
    r = Run(jobs=1, halting=Halting(1, None))
    r.queue.add([Candidate(t, 1) for t in T[1:20]])
    r.turn()
    out: list[Any] = []
    for n in range(1, 6):
        r.claimed((T[n], 1))
        r.started(n)
        r.ends(n, code=1)
        out = r.committed((n, 1))
    assert r.state.halted is not None and "the first 5 tasks of this run all failed alike" in (
        r.state.halted
    )
    assert of(out, Claim) == [] and of(out, Done)


def test_a_call_waits_for_a_worker_and_a_function_that_cannot_load_claims_nothing() -> None:
    r = Run(calls=True, jobs=2)
    r.queue.add([Candidate(t, 1) for t in T[1:4]])
    out = r.turn(free=0)
    assert of(out, Spawn) == [Spawn(2)] and of(out, Claim) == []
    out = r.turn(WorkerStarted(11, "s"), WorkerStarted(12, "s"), free=0)
    assert of(out, Claim) == [] and of(out, Rows) == []  # a worker row goes with others
    from zotsink._run.events import Unloadable

    out = r.turn(Unloadable("ModuleNotFoundError: No module named 'nope'"), free=0)
    assert r.state.halted is not None and "cannot load --call" in r.state.halted
    assert of(out, Claim) == []


def test_calls_begin_in_their_worker_and_return_with_their_own_time() -> None:
    r = Run(calls=True, jobs=1)
    r.queue.add([Candidate(T[1], 1)])
    r.turn(free=0)
    out = r.turn(WorkerStarted(11, "s"), WorkerReady(11), free=1)
    assert of(out, Claim)
    out = r.turn(Claimed([(T[1], 1)], True), free=1)
    assert of(out, Start) == [Start([(T[1], 1)])]
    r.turn(Began((1, 1), 11, "s"), at=0.5, free=0)
    out = r.turn(Returned((1, 1), 0, 0.004, Usage(), 12), at=0.6, free=1)
    assert of(out, Commit) == [Commit([(1, 1)])]
    out = r.turn(Committed([Placed((1, 1), 0, 1, 12)]), free=1)
    (end,) = [e for r_ in of(out, Rows) for _c, g in r_.ends for e in g]
    assert end.status == "ok" and end.seconds == 0.004  # its own time, not its wait
    assert abs(end.wait - 0.5) < 1e-9  # from its claim (at 0) to its begin
    out = r.turn(Claimed([], True), free=1)
    assert of(out, StopWorkers) and of(out, Done)


def test_a_call_that_runs_past_the_commit_window_is_told_as_begun_in_its_worker() -> None:
    r = Run(calls=True, jobs=2)
    r.queue.add([Candidate(T[1], 1), Candidate(T[2], 1)])
    r.turn(WorkerStarted(11, "s11"), WorkerReady(11), WorkerStarted(12, "s12"), WorkerReady(12))
    r.turn(Claimed([(T[1], 1), (T[2], 1)], True), free=2)
    r.turn(Began((1, 1), 11, "s11"), Began((2, 1), 12, "s12"), at=0.1, free=0)
    out = r.turn(Returned((1, 1), 0, 0.01, Usage(), 0), at=0.2, free=1)
    out += r.turn(Committed([Placed((1, 1), 0, 0, 0)]), at=0.3, free=1)
    begun = [b for r_ in of(out, Rows) for b in r_.begins]
    assert begun == []  # a quick call: its end row tells all; call 2 is too young yet
    wake = r.state.wake()
    assert wake is not None and wake <= 0.1 + BEGIN_WITHIN  # it is looked at by then
    out = r.turn(at=0.05 + BEGIN_WITHIN, free=1)
    assert [b for r_ in of(out, Rows) for b in r_.begins] == []
    out = r.turn(at=0.1 + BEGIN_WITHIN, free=1)
    assert [b for r_ in of(out, Rows) for b in r_.begins] == [((2, 1), 12, "s12")]


def test_a_follow_run_with_idle_makes_way_while_other_runs_hold_tasks() -> None:
    r = Run(mode="follow", idle=2.0)
    r.turn()
    r.claimed(drained=True)
    at, done = 0.0, False
    for _ in range(30):
        out = r.turn(Looked(held=3), at=at)  # another run sits on three claimed tasks
        if of(out, Done):
            done = True
            break
        at = r.state.wake() or at
    assert done and r.state.idled_out and 2.0 <= at < 10.0


def test_a_pull_run_asks_the_scheduler_once_about_tasks_nothing_could_tell_of() -> None:
    r = Run(mode="pull")
    r.turn()
    assert of(r.claimed(drained=True), Look) == [Look(deep=True, ask=False)]
    out = r.turn(Looked(unknown=2))  # held by runs of another host: no word yet
    assert not of(out, Done)
    at = r.state.wake()
    assert at is not None
    out = r.turn(at=at)
    assert of(out, Look) == [Look(deep=True, ask=True)]  # this one waits for the word
    out = r.turn(Looked(unknown=2), at=at + 3.0)
    assert of(out, Done)  # asked once: the run ends, and says what it could not tell


def test_a_stop_holds_the_workers_and_what_they_hand_back_is_released() -> None:
    r = Run(calls=True, jobs=1)
    r.queue.add([Candidate(t, 1) for t in T[1:4]])
    r.turn(WorkerStarted(11, "s"), WorkerReady(11), free=1)
    r.turn(Claimed([(T[1], 1), (T[2], 1), (T[3], 1)], True), free=3)
    out = r.turn(Signalled(signal.SIGTERM, 1), free=0)
    assert of(out, Hold) == [Hold()] and of(out, Signal) == []  # a call finishes its call
    out = r.turn(Returned((1, 1), 0, 0.01, Usage(), 0), HandedBack([(2, 1), (3, 1)]))
    assert sorted(k for r_ in of(out, Rows) for k in r_.releases) == [(2, 1), (3, 1)]


def test_every_line_refused_is_no_success() -> None:
    r = Run()
    r.queue.add([Candidate(T[1], 1)])
    r.turn()
    r.claimed((T[1], 1))
    r.started(1)
    r.ends(1)
    out = r.turn(Committed([Placed((1, 1), 0, 0, 0, refused=3)]))
    (end,) = [e for r_ in of(out, Rows) for _c, g in r_.ends for e in g]
    assert end.status == "failed" and "every line it printed (3) was refused" in end.note
