"""zotsink._executor.supervise.Supervision, fed events: when a client starts elements,
waits, or breaks with one error for every call left."""

from __future__ import annotations

from typing import Any

from zotsink._executor.supervise import FRUITLESS_MAX, Supervision, trouble_of


def element(state: str, **more: Any) -> dict[str, Any]:
    return {"event": "element", "state": state, "host": "n1", **more}


def test_the_first_start_and_waiting_while_elements_live() -> None:
    s = Supervision()
    assert s.decide(live=False, waiting=False).action == "wait"
    assert s.decide(live=False, waiting=True).action == "start"
    s.started(3)
    assert s.decide(live=True, waiting=True).action == "wait"


def test_what_went_wrong_before_this_clients_start_never_breaks() -> None:
    s = Supervision()
    s.event(0, element("ended", halted="halted: the first 5 tasks of this run failed alike"))
    assert s.decide(live=False, waiting=True).action == "start"  # an attach after a fix
    s.started(1)
    s.event(0, element("ended", halted="halted: old"))  # before the start: not this try's
    s.event(1, element("began"))
    s.done(4)
    assert s.decide(live=False, waiting=True).action == "start"  # ended on its own: again


def test_a_halt_since_the_start_breaks_with_its_cause() -> None:
    s = Supervision()
    s.started(5)
    s.event(5, element("began"))
    s.event(
        6,
        element(
            "ended",
            halted="halted: the first 5 tasks of this run all failed alike (last line: "
            "Unloadable: cannot load m:f); nothing more was claimed: the tasks ...",
        ),
    )
    d = s.decide(live=False, waiting=True)
    assert d.action == "break"
    assert d.why == (
        "the elements halted, on n1: the first 5 tasks of this run all failed alike (last "
        "line: Unloadable: cannot load m:f)"
    )


def test_a_run_that_could_not_begin_breaks() -> None:
    s = Supervision()
    s.started(0)
    s.event(0, element("began"))
    s.event(1, element("failed", error="settings differ"))
    assert s.decide(live=False, waiting=True) == (
        "break",
        "an element on n1 could not run: settings differ",
    )


def test_elements_that_never_began_break() -> None:
    s = Supervision()
    s.started(0)
    assert s.decide(live=False, waiting=True) == ("break", "never began")


def test_starts_that_end_without_a_call_done_break_after_a_few() -> None:
    s = Supervision()
    for n in range(FRUITLESS_MAX):
        assert s.decide(live=False, waiting=True).action == "start"
        s.started(n)
        s.event(n, element("began"))
    d = s.decide(live=False, waiting=True)
    assert d.action == "break" and "without finishing a call" in d.why
    s2 = Supervision()
    for n in range(FRUITLESS_MAX * 2):  # a call done each time: never
        assert s2.decide(live=False, waiting=True).action == "start"
        s2.started(n)
        s2.event(n, element("began"))
        s2.done(1)


def test_trouble_is_a_halt_or_a_failure_only() -> None:
    assert trouble_of(element("began")) is None
    assert trouble_of(element("ended", halted=None, idled_out=True)) is None
    assert trouble_of({"event": "elements"}) is None
