"""Random interleavings of claim, begin, end, release, kill and takeover across several runs
leave every task ok exactly once in the committed view, and no task held by two live runs.

Each run is a :class:`zotsink._run.ledger.Ledger` in a process of its own (spawned), told
what to do over a pipe: claim by the cursor, begin a claimed task (its process is the run's
own), end a begun one (its record appended to OUT through the writer, its end row naming
where), give back what it claimed, take over what a look finds free (the run's own
:class:`~zotsink._run.look.Looker`, judged by this host's pid table). A kill is a real
SIGKILL of that process (reaped at once, as a dead run is). Hypothesis picks the order.

Then the live runs end what they began and give back the rest, and one more run takes over
and claims until nothing is left; OUT is read back through :func:`zotsink.read_records`
(the committed view) and the ledger through :func:`zotsink.task_states`.
"""

from __future__ import annotations

import multiprocessing
import os
import zlib
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import zotsink

TASKS = 12
SETTINGS = {"format": "lines", "command": "model", "tasks": "tasks.txt"}
# takeovers and kills weigh more: they meet the claims of others, live and dead
KINDS = (
    "start",
    "claim",
    "begin",
    "end",
    "fail",
    "release",
    "kill",
    "kill",
    "takeover",
    "takeover",
)


def _run(path: str, tasks: str, out: str, conn: Connection) -> None:
    """One run: a ledger, a look, a writer of OUT; does what the pipe says, answers each."""
    import time

    from zotsink._core.writer import Writer
    from zotsink._ledger.format import Block
    from zotsink._run.alive import proc_start
    from zotsink._run.attempt import End
    from zotsink._run.ledger import Ledger
    from zotsink._run.look import Looker
    from zotsink._run.queue import Candidate
    from zotsink._run.usage import UNMEASURED

    ledger = Ledger(path, tasks=tasks, env={})
    view = ledger.open()
    ledger.record(SETTINGS, view.settings)
    looker = Looker(ledger, tasks=tasks, out=out, began=time.time(), max_attempts=None, rerun=False)
    writer = Writer(out, sync="none")
    me = (os.getpid(), proc_start(os.getpid()) or "")
    lines = {n: f"line{n}" for n in range(1, TASKS + 1)}
    conn.send("ready")
    while True:
        kind, arg = conn.recv()
        got: Any = None
        if kind == "claim":
            res = ledger.claim(arg, [], cursor=True, closed_lines=None)
            got = [(t.num, a) for t, a in res.tasks]
        elif kind == "takeover":
            found = looker.look(deep=True)
            free = [Candidate(*c) for c in found.free]
            if free:
                res = ledger.claim(len(free), free, cursor=False, closed_lines=None)
                got = [(t.num, a) for t, a in res.tasks]
            else:
                got = []
        elif kind == "begin":
            ledger.put(begins=[(arg, *me)])
            ledger.flush()
        elif kind in ("end", "fail"):
            num = arg[0]
            data = f"{lines[num]}\n".encode()
            writer.append(data, timeout=60)
            done = SimpleNamespace(
                blocks=[Block(writer.last_at, len(data), zlib.crc32(data))],
                ino=writer.last_ino,
                header=0,
            )
            status = "ok" if kind == "end" else "failed"
            code = "0" if kind == "end" else "1"
            end = End(arg, status, code, 0.01, 0.0, 1, len(data), True, UNMEASURED, "")  # type: ignore[arg-type]
            ledger.put(ends=[(done, [end])])
            ledger.flush()
        elif kind == "release":
            ledger.put(releases=arg)
            ledger.flush()
        elif kind == "close":
            ledger.close()
            writer.close()
            conn.send(None)
            return
        conn.send(got)


class Run:
    """A run process as the model sees it: what it holds."""

    def __init__(self, ctx: Any, d: Path) -> None:
        self.conn, theirs = ctx.Pipe()
        args = (str(d / "out.txt.ledger"), str(d / "tasks.txt"), str(d / "out.txt"), theirs)
        self.proc = ctx.Process(target=_run, args=args)
        self.proc.start()
        theirs.close()
        assert self.conn.poll(120), "a run never got ready"
        assert self.conn.recv() == "ready"
        self.claimed: list[tuple[int, int]] = []  # claimed, not begun, in order
        self.begun: list[tuple[int, int]] = []

    def ask(self, kind: str, arg: Any = None) -> Any:
        self.conn.send((kind, arg))
        assert self.conn.poll(120), f"a run never answered {kind}"
        return self.conn.recv()

    def holds(self) -> set[int]:
        return {n for n, _a in self.claimed + self.begun}

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()  # reaped: a zombie's pid would still answer as alive
        self.conn.close()

    def close(self) -> None:
        self.ask("close")
        self.proc.join(60)
        self.conn.close()


class Model:
    """The runs, and what must hold at every step."""

    def __init__(self, d: Path) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.d = d
        self.live: list[Run] = []
        self.ok: set[int] = set()  # tasks whose latest end is ok

    def start(self) -> Run:
        run = Run(self.ctx, self.d)
        self.live.append(run)
        return run

    def got(self, run: Run, tasks: list[tuple[int, int]]) -> None:
        """A claim's tasks: none held by another live run, none ok already."""
        for num, attempt in tasks:
            others = [r for r in self.live if r is not run and num in r.holds()]
            assert not others, f"task {num} claimed while another live run holds it"
            assert num not in self.ok, f"task {num} claimed again after it ended ok"
            run.claimed.append((num, attempt))

    def step(self, kind: str, which: int, n: int) -> None:
        if kind == "start" or not self.live:
            if len(self.live) < 3:
                self.start()
            return
        run = self.live[which % len(self.live)]
        if kind == "claim":
            self.got(run, run.ask("claim", n))
        elif kind == "takeover":
            self.got(run, run.ask("takeover"))
        elif kind == "begin" and run.claimed:
            key = run.claimed.pop(0)
            run.ask("begin", key)
            run.begun.append(key)
        elif kind in ("end", "fail") and run.begun:
            key = run.begun.pop(0)
            run.ask(kind, key)
            if kind == "end":
                self.ok.add(key[0])
        elif kind == "release" and run.claimed:
            run.ask("release", list(run.claimed))
            run.claimed.clear()
        elif kind == "kill":
            run.kill()
            self.live.remove(run)

    def finish(self) -> None:
        """The live runs end what they began and give back the rest; a last run takes
        over and claims until nothing is left."""
        for run in self.live:
            for key in run.begun:
                run.ask("end", key)
                self.ok.add(key[0])
            run.begun.clear()
            if run.claimed:
                run.ask("release", list(run.claimed))
                run.claimed.clear()
        last = self.start()
        for _ in range(4 * TASKS):
            self.got(last, last.ask("takeover"))
            self.got(last, last.ask("claim", 5))
            if not last.claimed:
                break
            for key in last.claimed:
                last.ask("begin", key)
                last.ask("end", key)
                self.ok.add(key[0])
            last.claimed.clear()
        for run in self.live:
            run.close()
        self.live.clear()


steps = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 2), st.integers(1, 4)),
    min_size=4,
    max_size=24,
)


@settings(max_examples=20, deadline=None)
@given(steps)
def test_interleaved_runs_leave_every_task_ok_once(
    tmp_path_factory: Any, plan: list[tuple[str, int, int]]
) -> None:
    d = tmp_path_factory.mktemp("runs")
    lines = [f"line{n}" for n in range(1, TASKS + 1)]
    (d / "tasks.txt").write_text("".join(f"{x}\n" for x in lines))
    model = Model(d)
    try:
        # two runs hold claims from the start: the steps after meet them
        for _ in range(2):
            run = model.start()
            model.got(run, run.ask("claim", 2))
        for kind, which, n in plan:
            model.step(kind, which, n)
        model.finish()
    finally:
        for run in model.live:
            run.kill()
    view = [rec[0] for rec in zotsink.read_records(d / "out.txt")]
    assert Counter(view) == Counter(lines), view  # each task's records once
    states = zotsink.task_states(d / "tasks.txt", d / "out.txt.ledger")
    assert set(states.values()) == {"ok"}, states
