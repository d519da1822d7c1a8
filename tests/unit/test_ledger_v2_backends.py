"""One contract over the two ways a task runs: commands (:class:`zotsink._run.commands.
Commands`) and function calls (:class:`zotsink._run.calls.Calls`), each driven as the
pool drives it (its events fed to a real :class:`~zotsink._run.state.RunState`, each
instruction carried out on the backend, group commits through the real append path), with
only the ledger and the looks left out (the claims are granted as asked).

Alike tasks end alike whichever backend runs them: a task that succeeds, fails, dies
under its process (SIGKILL mid-task), or leaves a process behind that holds its output;
every task that began is told as begun (``Started`` or ``Began``, naming a real process)
before it is told as ended (``Exited`` and ``Drained``, or ``Returned``), once; a stop
signal starts nothing more, and the tasks claimed and not begun are given back
(``release`` rows), and the loop ends.
"""

from __future__ import annotations

import select
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zotsink._core.header import make_encoder
from zotsink._core.outlet import Outlet
from zotsink._core.writer import Writer
from zotsink._read import read_records
from zotsink._run.calls import Calls, signame
from zotsink._run.commands import Commands
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
    Look,
    Looked,
    Returned,
    Rows,
    Signal,
    Signalled,
    Spawn,
    Start,
    Started,
    StopWorkers,
    Turn,
)
from zotsink._run.output import Output, append_held
from zotsink._run.queue import Candidate, TaskQueue
from zotsink._run.state import Plan, RunState
from zotsink._run.tasks import Task

# What a task does, by its line: "fail..." says why and fails; "die..." is killed under its
# process (SIGKILL); "slow..." takes a while; "linger..." leaves a process behind (that
# holds a command's stdout); any other line succeeds. Each gives its line as its record.
BODY = r"""
import os, signal, subprocess, sys, time

def work(line):
    if line.startswith("fail"):
        raise ValueError(f"no such input: {line}")
    if line.startswith("die"):
        os.kill(os.getpid(), signal.SIGKILL)
    if line.startswith("slow"):
        time.sleep(3)
    if line.startswith("linger"):
        subprocess.Popen(["sleep", "4"])
    return line + "\n"
"""
COMMAND_MAIN = r"""
if __name__ == "__main__":
    try:
        sys.stdout.write(work(sys.argv[1]))
    except ValueError as e:
        sys.stderr.write(f"{e}\n")
        sys.exit(3)
"""


class Driver:
    """The pool's loop over one backend, with the ledger left out: claims are granted as
    asked, rows are kept, looks find nothing."""

    def __init__(self, d: Path, calls: bool, lines: list[str], jobs: int = 2) -> None:
        out = d / "out.txt"
        template = make_encoder(str(out), "lines", None, (), adopt=False)
        self.out_outlet = Outlet(Writer(str(out), header=template.header_line()), timeout=60)
        self.log_outlet = Outlet(Writer(str(d / "out.txt.log"), side_file=True), timeout=60)
        self.output = Output(template, self.out_outlet, self.log_outlet, None)
        self.poller = select.poll()
        self.backend: Any
        if calls:
            self.backend = Calls(
                f"{d / 'task.py'}:work",
                jobs=jobs,
                env={},
                output=self.output,
                poller=self.poller,
                load_limit=60.0,
            )
        else:
            argv = [sys.executable, str(d / "task.py"), "{}"]
            self.backend = Commands(
                argv, shell=False, jobs=jobs, env={}, output=self.output, poller=self.poller
            )
        queue = TaskQueue("chunk")
        queue.add(Candidate(Task(n, line), 1) for n, line in enumerate(lines, 1))
        plan = Plan(calls=calls, jobs=jobs, grace=0.5)
        self.state = RunState(plan, queue, now=time.monotonic(), signame=signame)
        self.events: list[Any] = []  # every event the backend reported, in order
        self.rows: list[Rows] = []
        self.started_after_stop: list[Any] = []
        self.claimed: set[int] = set()
        self.stopped = False
        self.stop_at = -1  # how many events had come when the stop signal came

    def run(self, stop_when: Any = None, limit: float = 120.0) -> None:
        """The loop, to its end; ``stop_when(driver)``: a stop signal comes once it holds."""
        end = time.monotonic() + limit
        events: list[Any] = []
        while True:
            assert time.monotonic() < end, "the loop never ended"
            events.insert(0, Turn(time.monotonic(), self.backend.room()))
            if stop_when is not None and not self.stopped and stop_when(self):
                self.stopped = True
                self.stop_at = len(self.events)
                events.append(Signalled(int(signal.SIGTERM), 1))
            produced: list[Any] = []
            done = False
            for ins in self.state.handle(events):
                if type(ins) is Done:
                    done = True
                else:
                    produced += self._apply(ins)
            if done:
                return
            self.events += [e for e in produced if not isinstance(e, (Claimed, Committed))]
            events = produced
            if produced:
                continue
            wait = self.state.wake()
            ms = 50 if wait is None else max(0, min(50, int((wait - time.monotonic()) * 1000)))
            for fd, _ev in self.poller.poll(ms):
                got = self.backend.readable(fd)
                self.events += got
                events += got
            got = self.backend.tend(time.monotonic())
            self.events += got
            events += got
            self.output.flush_log(time.monotonic())

    def _apply(self, ins: Any) -> list[Any]:
        kind = type(ins)
        b = self.backend
        if kind is Start:
            if self.stopped:
                self.started_after_stop += list(ins.attempts)
            return b.start(ins.attempts)  # type: ignore[no-any-return]
        if kind is Claim:
            self.claimed.update(c.task.num for c in ins.explicit)
            return [Claimed([(c.task, c.attempt) for c in ins.explicit], drained=True)]
        if kind is Commit:
            placed, blocks = append_held(self.output.out, b.take(ins.keys))
            self.output.flush_log()
            return [Committed(placed, blocks, self.output.out.writer.last_ino, 0)]
        if kind is Rows:
            self.rows.append(ins)
            return []
        if kind is Signal:
            b.signal(ins.key, ins.signum)
            return []
        if kind is Drain:
            return b.drain(ins.key)  # type: ignore[no-any-return]
        if kind is Look:
            return [Looked()]
        if kind is Spawn:
            return b.spawn(ins.n)  # type: ignore[no-any-return]
        if kind is Hold:
            b.hold()
            return []
        if kind is StopWorkers:
            b.stop_workers()
            return []
        raise AssertionError(f"an instruction of no known kind: {ins!r}")

    def close(self) -> None:
        try:
            self.backend.close()
        finally:
            self.out_outlet.close()
            self.log_outlet.close()

    # -- what the contract looks at ----------------------------------------------------------
    def begun(self) -> Counter[tuple[int, int]]:
        return Counter(e.key for e in self.events if isinstance(e, (Started, Began)))

    def ended(self) -> Counter[tuple[int, int]]:
        """Attempts told as ended: a call's return, a command's exit with its pipes read."""
        out: Counter[tuple[int, int]] = Counter(
            e.key for e in self.events if isinstance(e, Returned)
        )
        exited = {e.key for e in self.events if isinstance(e, Exited)}
        out.update(e.key for e in self.events if isinstance(e, Drained) and e.key in exited)
        return out

    def released(self) -> set[int]:
        return {num for rows in self.rows for num, _a in rows.releases}


@pytest.fixture(params=["commands", "calls"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, bool]]:
    (tmp_path / "task.py").write_text(BODY + COMMAND_MAIN)
    yield tmp_path, request.param == "calls"


def records(d: Path) -> list[str]:
    return sorted(r[0] for r in read_records(d / "out.txt", every=True))  # type: ignore[index]


def test_alike_tasks_end_alike_and_each_is_told_begun_then_ended_once(
    backend: tuple[Path, bool],
) -> None:
    d, calls = backend
    lines = ["ok1", "fail2", "die3", "linger4", "ok5"]
    drive = Driver(d, calls, lines)
    try:
        drive.run()
    finally:
        drive.close()
    assert drive.state.final == {1: "ok", 2: "failed", 3: "killed", 4: "ok", 5: "ok"}
    keys = [(n, 1) for n in range(1, 6)]
    assert drive.begun() == Counter(keys)  # each attempt told as begun once
    assert drive.ended() == Counter(keys)  # and as ended once
    for e in drive.events:
        if isinstance(e, (Started, Began)):
            assert e.pid > 0 and e.start, e  # a real process, with its start time
    order = [e.key for e in drive.events if isinstance(e, (Started, Began, Returned, Drained))]
    for key in keys:
        first_end = max(i for i, k in enumerate(order) if k == key)
        assert order.index(key) < first_end, f"{key} told as ended before it began"
    # what ended ok is in OUT once; a failure's and a death's records are not
    assert records(d) == ["linger4", "ok1", "ok5"]
    # the end rows say the same as the decisions
    ended = {e.key[0]: e.status for rows in drive.rows for _c, ends in rows.ends for e in ends}
    assert ended == drive.state.final


def test_a_stop_begins_nothing_more_and_gives_the_claimed_back(
    backend: tuple[Path, bool],
) -> None:
    d, calls = backend
    # quick tasks first: the run claims ahead at their pace, past the slow ones
    lines = [*(f"ok{n}" for n in range(1, 5)), "slow5", "slow6", *(f"ok{n}" for n in range(7, 13))]
    drive = Driver(d, calls, lines)
    try:
        drive.run(stop_when=lambda dr: (5, 1) in dr.begun())  # the stop: once slow5 began
    finally:
        drive.close()
    assert drive.started_after_stop == [], "a task was started after the stop"
    # a call is told as begun when its worker is free to begin it; a worker held before it
    # did hands it back at once, and the word is taken back: it never began
    handed = {k[0] for e in drive.events if isinstance(e, HandedBack) for k in e.keys}
    began = {k[0] for k in drive.begun()} - handed
    # a worker may begin the next call of its batch before it sees the hold: such a task
    # ran, and ends as any other; it is never also given back
    late = {
        e.key[0] for e in drive.events[drive.stop_at :] if isinstance(e, (Started, Began))
    } - handed
    assert not calls or not late - set(drive.state.final), late
    assert calls or not late, f"commands started after the stop: {late}"
    # what ran ends as it would have (a call finishes within the grace or is interrupted;
    # a command, told the signal, is interrupted): never failed or killed by the stop
    assert set(drive.state.final) == began
    assert set(drive.state.final.values()) <= {"ok", "interrupted"}, drive.state.final
    # slow5, told as begun when the stop came, ran to its end or was interrupted; or its
    # worker, held before it began it, handed it back (and it is given back below)
    assert drive.state.final.get(5) in ("ok", "interrupted") or 5 in handed, drive.state.final
    # the claimed rest never began and was given back for another run, each once
    released = [num for rows in drive.rows for num, _a in rows.releases]
    assert sorted(released) == sorted(drive.claimed - began), (released, drive.claimed)
    # and the ledger never says begun of a task given back
    told = {key[0] for rows in drive.rows for key, _pid, _start in rows.begins}
    assert not told & set(released), (told, released)
    assert released, "nothing was claimed ahead: the test proves nothing"
