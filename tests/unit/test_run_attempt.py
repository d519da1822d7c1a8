"""Decisions without processes: the pipe line cutter, an attempt's phases and how it
ended, and when a group commit is due."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from zotsink._core.pump import LineCutter
from zotsink._run.attempt import KILL_AFTER, PIPE_LINGER, Attempt
from zotsink._run.commit import COMMIT_WINDOW, MAX_COMMIT_WINDOW, CommitGroup
from zotsink._run.tasks import Task
from zotsink._run.usage import Usage

LIMIT = 8


class Sink:
    """Records what a cutter hands on, as (kind, bytes or size)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, object]] = []
        self.long = b""

    def lines(self, block: bytes) -> None:
        assert block.endswith(b"\n")
        self.got += [("line", ln) for ln in block[:-1].split(b"\n")]

    def long_begin(self, head: bytes) -> None:
        assert len(head) > LIMIT and b"\n" not in head
        self.long = head

    def long_more(self, piece: bytes) -> None:
        assert b"\n" not in piece
        self.long += piece

    def long_end(self, size: int, how: str) -> None:
        assert size == len(self.long)
        self.got.append(("long", (self.long, how)))
        self.long = b""


def expected(data: bytes) -> list[tuple[str, object]]:
    lines = data.split(b"\n")
    last = lines.pop()  # after the last newline: the unfinished line
    out: list[tuple[str, object]] = []
    for ln in lines:
        out.append(("line", ln) if len(ln) <= LIMIT else ("long", (ln, "")))
    if last:
        out.append(("line", last) if len(last) <= LIMIT else ("long", (last, "; cut")))
    return out


@given(st.binary(max_size=60).map(lambda b: b.replace(b"\0", b"\n")), st.data())
def test_the_cutter_hands_on_every_line_whole_or_as_one_long_line(
    data: bytes, d: st.DataObject
) -> None:
    cuts = sorted(d.draw(st.lists(st.integers(0, len(data)), max_size=8)))
    cutter, sink = LineCutter(LIMIT), Sink()
    for a, b in zip([0, *cuts], [*cuts, len(data)]):
        cutter.feed(data[a:b], sink)
    added = cutter.finish(sink, "; cut")
    assert sink.got == expected(data)
    assert added == (
        bool(data) and not data.endswith(b"\n") and len(data.rsplit(b"\n")[-1]) <= LIMIT
    )


def test_a_long_line_is_never_held_whole() -> None:
    cutter, sink = LineCutter(LIMIT), Sink()
    cutter.feed(b"ok\n" + b"x" * 9, sink)
    assert sink.got == [("line", b"ok")] and sink.long == b"x" * 9  # handed on at once
    cutter.feed(b"yy", sink)
    assert sink.long == b"x" * 9 + b"yy" and not cutter.finish(sink, "; ended")
    assert sink.got[-1] == ("long", (b"x" * 9 + b"yy", "; ended"))


def attempt(now: float = 0.0) -> Attempt:
    return Attempt(Task(1, "a"), 1, 0.0, now)


NO = Usage()


def test_an_attempt_that_exits_with_its_pipes_closed_ends() -> None:
    a = attempt()
    assert (a.phase, a.step(1.0)) == ("running", None)
    a.drained()  # its pipes were read to their end first: the exit ends it
    a.exited(2.0, 0, NO)
    assert (a.step(2.0), a.phase, a.status) == ("end", "ended", "ok")


def test_a_timeout_terminates_then_kills() -> None:
    a = attempt()
    a.limit(10.0)
    assert a.step(9.9) is None and a.step(10.0) == "term"
    a.terminated(10.0)
    assert (a.phase, a.ended_by) == ("terminating", "timeout")
    assert a.step(10.0 + KILL_AFTER - 0.1) is None and a.step(10.0 + KILL_AFTER) == "kill"
    a.killed()
    assert a.step(1e9) is None and a.status == "timeout"


def test_a_stop_gives_grace_then_terminates_and_says_interrupted() -> None:
    a = attempt()
    a.limit(100.0)
    a.stop(5.0, grace=30.0)
    assert a.step(34.9) is None and a.step(35.0) == "term"
    a.terminated(35.0)
    assert a.status == "interrupted"


def test_open_pipes_after_the_exit_are_drained_after_a_while() -> None:
    a = attempt()
    a.exited(1.0, 0, NO)
    assert a.phase == "exited" and a.step(1.0 + PIPE_LINGER - 0.1) is None
    assert a.step(1.0 + PIPE_LINGER) == "drain"
    a.drained()
    assert a.step(1.0 + PIPE_LINGER) == "end"


def test_a_function_call_ends_with_its_code_and_its_own_time() -> None:
    a = attempt()
    a.sent()
    a.began(0.5, 11, "s")
    a.returned(1.0, 1, 0.2, NO)
    assert a.step(1.0) == "end" and a.status == "failed" and a.own_time() == 0.2


def test_a_call_whose_worker_died_is_killed_and_a_stop_s_stays_interrupted() -> None:
    a = attempt()
    a.returned(1.0, 3, None, NO, died=True)
    assert a.status == "killed"
    a = attempt()
    a.returned(1.0, -9, None, NO, died=True)
    assert a.status == "killed"  # by the signal itself
    a = attempt()
    a.stop(0.5, grace=30.0)
    a.returned(1.0, 0, 0.1, NO)  # its call ended within the grace: its result stands
    assert a.status == "ok"
    a = attempt()
    a.stop(0.5, grace=30.0)
    a.returned(1.0, 5, None, NO, died=True)
    assert a.status == "interrupted"


def test_an_attempt_the_kernel_killed_for_memory_is_named_so() -> None:
    a = attempt()
    a.exited(1.0, -9, Usage(oom=True))
    assert a.status == "oom"


def test_a_commit_is_due_at_its_window_size_a_stop_or_when_nothing_else_runs() -> None:
    group = CommitGroup(max_bytes=100)
    assert not group.due(0.0, alone=True, hurry=True)  # nothing to commit
    assert group.wait(0.0) is None
    group.add(attempt(0.0), 0.01, 0.01, 0)  # a quick task: the shortest window
    assert group.window == COMMIT_WINDOW
    assert not group.due(0.1, alone=False, hurry=False)
    assert group.due(0.1, alone=True, hurry=False) and group.due(0.1, alone=False, hurry=True)
    assert group.due(0.01 + COMMIT_WINDOW, alone=False, hurry=False)
    group.add(attempt(0.0), 0.02, 0.02, 101)
    assert group.due(0.02, alone=False, hurry=False)  # by size
    assert len(group.take()) == 2 and not group.due(10.0, alone=True, hurry=True)


def test_the_window_follows_the_tasks() -> None:
    group = CommitGroup(max_bytes=1 << 20)
    for _ in range(30):
        group.add(attempt(0.0), 10.0, 10.0, 0)  # tasks of ten seconds
        group.take()
    assert group.window == MAX_COMMIT_WINDOW
    group.add(attempt(0.0), 0.5, 0.5, 0)
    assert group.wait(0.5) == MAX_COMMIT_WINDOW


def test_a_stop_in_the_turn_an_attempt_ended_leaves_how_it_ended() -> None:
    """A call that returned, or a command that exited, in the turn a stop signal came is
    ended already: its result stands (it was called interrupted, and never ran again)."""
    a = attempt()
    a.sent()
    a.began(0.5, 11, "s")
    a.returned(1.0, 0, 0.2, NO)
    a.stop(1.0, grace=0.5)
    assert (a.step(1.0), a.status) == ("end", "ok")
    b = attempt()
    b.exited(1.0, 0, NO)
    b.stop(1.0, grace=0.5)
    b.drained()
    assert (b.step(1.0), b.status) == ("end", "ok")
