"""The relay's decisions, fed events with no scheduler, file or clock: the chain's rule
(``decide``, as a run applies it under the ledger's lock), one run's ``Relay``, and a
``RunState`` that ends only once its relay is done; and the rule applied to a real ledger
(``Desk``), with no scheduler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zotsink._ledger.format import INITIAL, Row
from zotsink._ledger.read import Snapshot
from zotsink._ledger.relay import Chain, join_note, relay_fields
from zotsink._run.events import Done, RelayCheck, RelayChecked, Rows, Submit, Submitted, Turn
from zotsink._run.ledger import Ledger
from zotsink._run.queue import TaskQueue
from zotsink._run.relay import (
    CHECK_EVERY,
    CHECK_FULL,
    HANDOFF_GIVE_UP,
    HANDOFF_WAIT,
    RETRY_FIRST,
    TICKET_TTL,
    Facts,
    Relay,
    RelayPlan,
    Verdict,
    decide,
    quiet,
    relay_lead,
)
from zotsink._run.state import Plan, RunState
from zotsink._run.status import chain_status
from zotsink._run.successor import Desk
from zotsink.cli.status_words import relay_lines

NAMES = ("what", "ticket", "job", "count", "note")


def chain_of(*rows: tuple[Any, ...]) -> Chain:
    """A chain from (what, run, time, fields) tuples."""
    chain = Chain()
    for at, (what, run, t, fields) in enumerate(rows):
        chain.fold(
            at, Row("relay", t, run, dict(zip(NAMES, relay_fields(what, **fields))), INITIAL)
        )
    return chain


def joined(job: str, run: str, t: float = 0.0, n: int = 3) -> tuple[Any, ...]:
    return ("join", run, t, {"job": job, "note": join_note(n, None)})


def plan(n: int = 3, me: str = "c:1", max_relays: int | None = None) -> RelayPlan:
    return RelayPlan(n, max_relays, me, "me")


class Scheduler:
    """The word on jobs: queued or running unless said gone (or, for ``unsure`` ones, no
    word yet); the questions it was asked, with their ``after`` and ``by_rows``."""

    def __init__(self, gone: set[str] = frozenset(), unsure: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.gone, self.unsure = set(gone), set(unsure)
        self.asked: list[tuple[str, float, bool]] = []

    def __call__(self, job: str, after: float, by_rows: bool) -> bool | None:
        self.asked.append((job, after, by_rows))
        if job in self.gone:
            return False
        return None if job in self.unsure else True


def run_decide(chain: Chain, p: RelayPlan, facts: Facts, **kw: Any) -> Verdict:
    kw.setdefault("ticket", "1")
    kw.setdefault("now", 100.0)
    kw.setdefault("alive", Scheduler())
    kw.setdefault("list_waiting", True)
    kw.setdefault("stopped", False)
    kw.setdefault("exited", False)
    return decide(chain, p, facts, **kw)


def whats(v: Verdict) -> list[str]:
    return [r[0] for r in v.rows]


# -- the chain's rule -------------------------------------------------------------------------
def test_a_run_fills_the_chain_one_successor_at_a_time() -> None:
    chain = chain_of(joined("c:1", "me"))
    v = run_decide(chain, plan(), Facts(False))
    assert v.ticket == "1" and whats(v) == ["decide"]
    assert v.rows[0][3] == "1/3" and v.rows[0][4] == "fill"  # the count it saw
    # decided: that place is taken, whatever the scheduler's lag
    chain = chain_of(joined("c:1", "me"), ("decide", "me", 99.0, {"ticket": "1"}))
    assert run_decide(chain, plan(), Facts(False), ticket="2").count == 2


def test_a_full_chain_submits_nothing_and_looks_again_later() -> None:
    chain = chain_of(joined("c:1", "me"), joined("c:2", "r2"), joined("c:3", "r3"))
    v = run_decide(chain, plan(), Facts(False))
    assert v.ticket is None and v.rows == [] and v.next == CHECK_FULL and v.count == 3


def test_an_element_the_scheduler_no_longer_has_is_gone_and_its_place_free() -> None:
    chain = chain_of(joined("c:1", "me"), joined("c:2", "r2"), joined("c:3", "r3"))
    v = run_decide(chain, plan(), Facts(False), alive=Scheduler({"c:3"}))
    assert whats(v) == ["gone", "decide"] and v.rows[0][2] == "c:3" and v.ticket == "1"


def test_an_element_that_exits_counts_until_the_scheduler_asked_afresh_lets_it_go() -> None:
    chain = chain_of(
        joined("c:1", "me"),
        joined("c:2", "r2"),
        joined("c:3", "r3"),
        ("exit", "r3", 50.0, {"job": "c:3"}),
    )
    asked = Scheduler()
    v = run_decide(chain, plan(), Facts(False), alive=asked)
    assert v.ticket is None and v.count == 3  # shown still: no fourth
    # the scheduler's word after its exit row, and no older than a check
    assert ("c:3", 100.0 - CHECK_EVERY, False) in asked.asked
    # the others: a row of their runs, or a word, newer than quiet() seconds ago
    assert ("c:2", 100.0 - quiet(3), True) in asked.asked


def test_a_run_that_ends_asks_before_it_trusts_the_others_to_carry_on() -> None:
    chain = chain_of(joined("c:1", "me"), joined("c:2", "r2"))
    # no word on c:2 newer than the moment this run began to end: it asks, and waits
    v = run_decide(
        chain, plan(), Facts(True, "deadline"), alive=Scheduler(unsure={"c:2"}), waited=1.0
    )
    assert not v.done and v.next == CHECK_EVERY and whats(v) == ["exit"]
    asked = Scheduler({"c:2"})
    v = run_decide(chain, plan(), Facts(True, "deadline"), exited=True, alive=asked, waited=2.0)
    assert whats(v) == ["gone", "handoff", "decide"] and v.rows[2][4] == "handoff"  # killed
    assert asked.asked == [("c:2", 98.0, True)]  # a word newer than its end began
    # a scheduler that never answers: it trusts the rows after a while
    v = run_decide(
        chain,
        plan(),
        Facts(True, "deadline"),
        alive=Scheduler(unsure={"c:2"}),
        exited=True,
        waited=HANDOFF_WAIT,
    )
    assert v.done and v.ticket is None


def test_no_work_no_successor_and_a_stop_or_max_relays_none_either() -> None:
    chain = chain_of(joined("c:1", "me"))
    assert run_decide(chain, plan(), Facts(False), list_waiting=False).ticket is None
    assert run_decide(chain, plan(), Facts(True), list_waiting=False).ticket == "1"
    v = run_decide(chain, plan(), Facts(False), stopped=True)
    assert v.ticket is None and v.next is None
    chain = chain_of(
        joined("c:1", "me"),
        ("decide", "me", 1.0, {"ticket": "1"}),
        ("job", "me", 2.0, {"ticket": "1", "job": "c:2"}),
    )
    v = run_decide(chain, plan(max_relays=1), Facts(False), ticket="2")
    assert v.ticket is None and "--max-relays 1" in v.words


def test_a_failed_submission_makes_the_whole_chain_wait_before_the_next_try() -> None:
    chain = chain_of(
        joined("c:1", "me"),
        ("decide", "r2", 90.0, {"ticket": "1"}),
        ("fail", "r2", 99.0, {"ticket": "1", "note": "sbatch: error"}),
    )
    v = run_decide(chain, plan(), Facts(False), now=100.0)
    assert v.ticket is None and v.next == pytest.approx(99.0 + RETRY_FIRST - 100.0)
    assert run_decide(chain, plan(), Facts(False), now=99.0 + RETRY_FIRST).ticket == "1"


def test_a_pending_decision_of_a_dead_run_holds_its_place_only_a_while() -> None:
    chain = chain_of(
        joined("c:1", "me"), joined("c:2", "r2"), ("decide", "r9", 10.0, {"ticket": "1"})
    )
    assert run_decide(chain, plan(), Facts(False), now=11.0).ticket is None
    assert run_decide(chain, plan(), Facts(False), now=10.0 + TICKET_TTL).ticket == "1"


# -- leaving ------------------------------------------------------------------------------------
def test_a_run_that_leaves_while_others_stay_writes_exit_only() -> None:
    chain = chain_of(joined("c:1", "me"), joined("c:2", "r2"))
    v = run_decide(chain, plan(), Facts(True, "deadline"))
    assert whats(v) == ["exit"] and v.done and v.ticket is None


def test_the_last_to_leave_with_work_left_hands_its_place_on() -> None:
    chain = chain_of(joined("c:1", "me"), joined("c:2", "r2"), ("exit", "r2", 5.0, {"job": "c:2"}))
    # the other left too, and the scheduler still shows it: with N = 2, no place yet; this
    # run holds the handoff (the others leaving leave it to it)
    v = run_decide(chain, plan(n=2), Facts(True, "deadline"))
    assert whats(v) == ["exit", "handoff"] and not v.done and v.next == CHECK_EVERY
    # it is gone now: the place is handed on
    held = chain_of(
        joined("c:1", "me"),
        joined("c:2", "r2"),
        ("exit", "r2", 5.0, {"job": "c:2"}),
        ("handoff", "me", 6.0, {"job": "c:1"}),
    )
    v = run_decide(held, plan(n=2), Facts(True, "deadline"), exited=True, alive=Scheduler({"c:2"}))
    assert whats(v) == ["gone", "decide"] and v.rows[1][4] == "handoff" and v.ticket == "1"
    # with N = 3 there is a place at once
    v = run_decide(chain, plan(n=3), Facts(True, "deadline"))
    assert whats(v) == ["exit", "handoff", "decide"]


def test_when_one_element_hands_on_the_others_leaving_leave_it_to_it() -> None:
    chain = chain_of(
        joined("c:1", "me"),
        joined("c:2", "r2"),
        ("exit", "r2", 5.0, {"job": "c:2"}),
        ("handoff", "r2", 5.0, {"job": "c:2"}),
    )
    v = run_decide(chain, plan(n=2), Facts(True, "deadline"))
    assert whats(v) == ["exit"] and v.done and "c:2 hands on" in v.words
    # unless the scheduler says the holder is gone: then this run holds it
    v = run_decide(chain, plan(n=2), Facts(True, "deadline"), alive=Scheduler({"c:2"}))
    assert whats(v) == ["exit", "gone", "handoff", "decide"]


def test_alone_with_n_one_the_last_element_submits_at_once() -> None:
    chain = chain_of(joined("c:1", "me", n=1))
    v = run_decide(chain, plan(n=1), Facts(True, "deadline"))
    assert whats(v) == ["exit", "handoff", "decide"] and v.count == 1


def test_a_handoff_waits_no_longer_than_its_bound() -> None:
    chain = chain_of(joined("c:1", "me"), joined("c:2", "r2"), ("exit", "r2", 5.0, {"job": "c:2"}))
    v = run_decide(chain, plan(n=2), Facts(True, "deadline"), exited=True, waited=HANDOFF_WAIT)
    assert v.ticket == "1"  # the scheduler shows the other still: submitted all the same
    v = run_decide(chain, plan(n=2), Facts(True, "signal"), exited=True)
    assert v.ticket == "1"  # a signal: no time to wait


def test_the_last_to_leave_says_why_the_chain_ends() -> None:
    one = chain_of(joined("c:1", "me"))
    cases = [
        (Facts(False, "done"), {}, "done"),
        (Facts(False, "idle"), {}, "idle"),
        (Facts(False, "done", given_up=2), {}, "given-up"),
        (Facts(True, "halted", "the first 5 tasks failed alike"), {}, "failing"),
        (Facts(True, "stopped"), {}, "stopped"),
        (Facts(True, "deadline"), {"stopped": True}, "stopped"),
    ]
    for facts, kw, reason in cases:
        v = run_decide(one, plan(), facts, list_waiting=False, **kw)
        assert whats(v) == ["exit", "end"] and v.done, (facts, v)
        assert v.rows[1][4].startswith(f"{reason}: "), (facts, v.rows)
    # work waits in the list (a line added as it left): handed on, not ended
    v = run_decide(one, plan(), Facts(False, "idle"), list_waiting=True)
    assert whats(v) == ["exit", "handoff", "decide"]
    # a followed list still open with no --idle: lines to come, the chain stays allocated
    v = run_decide(one, plan(), Facts(False, "deadline", open_list=True), list_waiting=False)
    assert whats(v) == ["exit", "handoff", "decide"]


def test_submissions_that_keep_failing_at_the_handoff_break_the_chain_and_say_so() -> None:
    chain = chain_of(
        joined("c:1", "me"),
        ("decide", "me", 1.0, {"ticket": "1"}),
        ("fail", "me", 2.0, {"ticket": "1", "note": "sbatch: not allowed here"}),
    )
    v = run_decide(chain, plan(), Facts(True, "deadline"), exited=True, waited=HANDOFF_GIVE_UP)
    assert whats(v) == ["end"] and v.done and "sbatch: not allowed here" in v.rows[0][4]
    assert v.rows[0][4].startswith("broken: ")


def test_the_last_element_killed_after_the_others_left_it_the_work_is_told_by_status() -> None:
    # c:3 and c:4 left the work to c:5 (their deadline came), then c:5 was SIGKILLed before
    # its next check: nobody is left to replace it; status says so and what to do
    chain = chain_of(
        joined("c:3", "r3"),
        joined("c:4", "r4"),
        joined("c:5", "r5"),
        ("exit", "r3", 30.0, {"job": "c:3"}),
        ("exit", "r4", 30.0, {"job": "c:4"}),
    )
    v = run_decide(chain, plan(me="c:3"), Facts(True, "deadline"), exited=True)
    assert v.done and v.ticket is None and "carry on" in v.words  # c:5 was alive then
    gone = {"c:3", "c:4", "c:5"}
    relay = chain_status(chain, lambda job: job not in gone)
    assert relay is not None and relay.gone == ("c:5",) and relay.running == ()
    assert relay_lines(relay, 12) == [
        "relay chain (--relay 3): no element; 0 successors submitted by it",
        "relay: c:5 no longer queued or running, with no word in the ledger (killed? cancelled?)",
        "relay: 12 tasks wait and no element of the chain is queued or running: its last one "
        "ended without handing on; submit one again (or `zotsink add --relay SCRIPT`)",
    ]


def test_a_run_outside_a_job_is_no_element() -> None:
    chain = Chain()
    v = run_decide(chain, plan(n=1, me=""), Facts(False))
    assert v.count == 0 and v.ticket == "1"
    v = run_decide(chain, plan(n=1, me=""), Facts(False, "done"), list_waiting=False)
    assert whats(v) == ["end"]  # no exit row: there is no element of it to leave


def test_a_relay_run_leaves_room_before_its_job_ends() -> None:
    assert relay_lead(30.0) == 5.0
    assert relay_lead(3600.0) == 120.0
    assert 5.0 < relay_lead(1200.0) < 120.0


# -- one run's side ------------------------------------------------------------------------------
def test_relay_checks_at_once_then_as_the_verdict_says() -> None:
    r = Relay(plan(), now=0.0)
    (check,) = r.turn(0.0, Facts(False))
    assert isinstance(check, RelayCheck) and check.ticket == "1" and not check.exited
    assert r.turn(0.1, Facts(False)) == []  # one check at a time
    r.checked(RelayChecked(Verdict([], None, 2.0, False, 3, "full")))
    # from the turn it came in (0.1)
    assert r.wake() == pytest.approx(2.1) and r.turn(1.0, Facts(False)) == []
    assert len(r.turn(2.1, Facts(False))) == 1


def test_relay_submits_then_writes_the_outcome_and_checks_again() -> None:
    r = Relay(plan(), now=0.0)
    r.turn(0.0, Facts(False))
    (submit,) = r.checked(RelayChecked(Verdict([], "1", None, False, 1, "fill")))
    assert submit == Submit("1")
    assert r.turn(1.0, Facts(False)) == []  # one submission at a time
    (rows,) = r.answered(Submitted("1", "c:2"))
    assert (
        isinstance(rows, Rows)
        and rows.now
        and rows.relays == [relay_fields("job", ticket="1", job="c:2")]
    )
    assert r.submitted == ["c:2"] and r.wake() == 1.0
    (check,) = r.turn(1.0, Facts(False))
    assert check.ticket == "2"
    r.checked(RelayChecked(Verdict([], "2", None, False, 2, "fill")))
    (rows,) = r.answered(Submitted("2", None, "sbatch: error: no"))
    assert rows.relays == [relay_fields("fail", ticket="2", note="sbatch: error: no")]
    assert r.failures == ["sbatch: error: no"]


def test_relay_at_the_end_checks_at_once_and_is_done_when_told() -> None:
    r = Relay(plan(), now=0.0)
    r.turn(0.0, Facts(False))
    r.checked(RelayChecked(Verdict([], None, None, False, 3, "full")))
    assert r.wake() is None  # no more checks while it runs
    (check,) = r.turn(5.0, Facts(False, "done"))
    assert check.waited == 0.0
    r.checked(RelayChecked(Verdict([["exit"]], None, 1.0, False, 2, "waiting")))
    (check,) = r.turn(6.0, Facts(False, "done"))
    assert check.exited and check.waited == 1.0
    r.checked(RelayChecked(Verdict([], None, None, True, 1, "ends")))
    assert r.done and r.turn(7.0, Facts(False, "done")) == []


def test_a_run_that_handed_on_is_done() -> None:
    r = Relay(plan(), now=0.0)
    r.turn(0.0, Facts(True, "deadline"))
    r.checked(RelayChecked(Verdict([["exit"], ["decide"]], "1", None, False, 1, "h")))
    r.answered(Submitted("1", "c:9"))
    assert r.done and r.turn(5.0, Facts(True, "deadline")) == []


def test_a_ledger_that_cannot_be_written_ends_the_relay() -> None:
    r = Relay(plan(), now=0.0)
    assert r.turn(0.0, Facts(False, "error")) == [] and r.done


def test_a_run_state_ends_only_once_its_relay_is_done() -> None:
    queue = TaskQueue("pull")
    relay = Relay(plan(), now=0.0)
    state = RunState(Plan(calls=False, jobs=1), queue, relay=relay, now=0.0)
    out = state.handle([Turn(0.0, 1)])
    checks = [x for x in out if isinstance(x, RelayCheck)]
    assert len(checks) == 1 and Done() not in out
    # the claim finds the list drained, the look nothing: the run would end
    from zotsink._run.events import Claimed, Looked

    state.handle([Turn(0.1, 1), Claimed([], True)])
    state.handle([Turn(0.2, 1), RelayChecked(Verdict([], None, None, False, 1, "no work"))])
    out = state.handle([Turn(0.3, 1), Looked()])
    checks = [x for x in out if isinstance(x, RelayCheck)]
    assert len(checks) == 1 and checks[0].facts.ending == "done" and Done() not in out
    out = state.handle([Turn(0.4, 1), RelayChecked(Verdict([["exit"]], None, None, True, 1, "e"))])
    assert Done() in out


# -- the rule applied to a real ledger (Desk) ---------------------------------------------------
def test_tasks_a_leaving_run_gave_back_are_work_the_last_one_hands_on(tmp_path: Path) -> None:
    # run A reached its deadline and gave back two tasks it had claimed; run B, leaving at
    # the same moment with nothing of its own left and the list's lines all claimed, must
    # hand its place on over them, not end the chain "done" (the tasks would wait with no
    # element, or a late leaver would begin a second chain)
    tasks = tmp_path / "t.txt"
    tasks.write_text("a\nb\nc\n")
    path = tmp_path / "l"
    a = Ledger(path, tasks=str(tasks), env={})
    a.record({"command": "x"}, a.open().settings)
    got = a.claim(3, [], cursor=True, closed_lines=None)
    assert [t.num for t, _ in got.tasks] == [1, 2, 3]
    a.put(releases=[(t.num, att) for t, att in got.tasks[1:]])
    assert a.flush() is None
    b = Ledger(path, tasks=str(tasks), env={})
    b.record({"command": "x"}, b.open().settings)
    assert b.claim(3, [], cursor=True, closed_lines=None).tasks == []  # no line past the cursor
    desk = Desk(
        b,
        RelayPlan(3, None, "slurm:7", b.run_id),
        backend=None,  # type: ignore[arg-type]  # no submission here
        env={},
        script=None,
        lock="auto",
        timeout=10.0,
    )
    checked = desk.check(RelayCheck("1", Facts(False, "done"), exited=False, waited=0.0))
    assert checked.error is None and checked.verdict is not None
    assert checked.verdict.ticket == "1" and "handoff" in checked.verdict.words
    with Snapshot(path) as snap:
        whats = [row.fields["what"] for _, row in snap.rows() if row.kind == "relay"]
    assert whats == ["exit", "handoff", "decide"]
    a.close()
    b.close()
