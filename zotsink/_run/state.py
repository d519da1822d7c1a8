"""A run's decisions, as one pure object: fed a turn's events, it returns instructions.

:class:`RunState` owns every decision of ``zotsink run`` once its options are checked:
which tasks to claim and when (through its :class:`~zotsink._run.queue.TaskQueue`), when
to start them, when an attempt has ended and how (:class:`Attempt`: its named phases and
its status, set only by its own methods), when a group commit is due
(:class:`~zotsink._run.commit.CommitGroup`), what the end rows say, retries, halting
(:class:`~zotsink._run.halting.Halting`), a stop signal and a second one, claims given
back, the look schedule (other runs' tasks, a followed list's growth), the workers a
``--call`` run needs, and the end of the run. It does no I/O: no clock (the time comes in
the events), no process, no file. :mod:`zotsink._run.pool` does the I/O and feeds it.

The flow of one task: claimed (:class:`~zotsink._run.events.Claimed`) -> started
(:class:`~zotsink._run.events.Start`; a command's ``begin`` row at once, a call's only if it
outlives a commit) -> ended (a command's exit and its pipes read; a call's return) ->
waits in the group -> committed (its records in OUT: :class:`~zotsink._run.events.Commit`)
-> its end row (:class:`~zotsink._run.events.Rows`, written with the next claim, or at once).
A claimed task never started is given back (a ``release`` row): at a stop, a halt, the
deadline, or when it waited longer than :data:`HOLD` once no line is left past the cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

from .attempt import Attempt, End
from .commit import BeginRows, CommitGroup
from .events import (
    SIGKILL,
    SIGTERM,
    STOPS,
    Began,
    Claim,
    Claimed,
    ClaimFailed,
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
    RelayChecked,
    Returned,
    Rows,
    Signal,
    Signalled,
    Spawn,
    Start,
    Started,
    StartFailed,
    StopWorkers,
    Submitted,
    Turn,
    Unloadable,
    WorkerGone,
    WorkerReady,
    WorkerStarted,
)
from .failures import alike_key
from .halting import Halting
from .queue import Candidate, TaskQueue
from .relay import Facts, Relay
from .tasks import Task
from .usage import UNMEASURED

__all__ = [
    "FAILING",
    "HALT_AFTER",
    "HOLD",
    "LOOK_FIRST",
    "LOOK_MOST",
    "STOP_SETTLE",
    "Plan",
    "Progress",
    "RunState",
]

#: End statuses that are the task's failure (``interrupted`` is no verdict on the task).
FAILING: Final = frozenset(("failed", "killed", "timeout", "oom"))
#: Tasks that could not start, before any did, after which run stops starting more.
HALT_AFTER: Final = 3
#: Seconds between two looks at the ledger: the first wait, and the longest.
LOOK_FIRST: Final = 0.05
LOOK_MOST: Final = 2.0
#: Seconds a task that died of a stop signal waits before its end is decided, for the run's
#: own stop signal to come (``scancel`` signals every process at once): it is then
#: interrupted by a stop, not killed by somebody.
STOP_SETTLE: Final = 2.0
#: Seconds a claimed task may wait to start behind slower tasks before it is given back,
#: for another run with a free slot to take.
HOLD: Final = 1.0


class Plan(NamedTuple):
    """How the tasks run: what the decisions need of the run's options."""

    calls: bool  # --call: functions in workers, not commands
    jobs: int
    retries: int = 0
    task_timeout: float | None = None
    grace: float = 30.0
    idle: float | None = None  # a followed list: end after this long with nothing to do
    task_time: float | None = None  # --task-time; else the mean of this run's tasks
    deadline: float | None = None  # start nothing expected to end after it (monotonic)
    commit_bytes: float = 65536
    hold: float = HOLD
    load_limit: float = 600.0  # seconds a worker may take to load the function
    max_attempts: int | None = None  # a task whose failures reach it is not retried
    call: str = ""  # the --call spec, for the words of a halt
    log: str = ""  # the log's path, where a traceback is


class Progress(NamedTuple):
    """Where a run stands, for a progress line."""

    total: int  # tasks this run claimed or was given
    done: int  # attempts ended, whatever their status
    failed: int  # of them not ok
    running: int
    seconds: float  # since the run began


class RunState:
    """The decisions of one run (see the module's docstring)."""

    def __init__(
        self,
        plan: Plan,
        queue: TaskQueue,
        *,
        halting: Halting | None = None,
        relay: Relay | None = None,
        now: float = 0.0,
        signame: Callable[[int], str] = str,
    ) -> None:
        self.plan = plan
        self.queue = queue
        self.halting = halting
        self.relay = relay  # --relay: the chain's decisions (see .relay)
        self._signame = signame
        self.began = now
        self.now = now
        self.free = 0
        self.live: dict[Key, Attempt] = {}  # started (or sent) and not ended
        self.settling: dict[Key, float] = {}  # died of a stop signal: until when
        self.size: dict[Key, int] = {}  # records held by an ended attempt, bytes
        self.group = CommitGroup(plan.commit_bytes)
        self._committing: dict[Key, Attempt] | None = None  # a commit under way
        self._ends: list[tuple[Any, list[End]]] = []  # end groups to write
        self._begins = BeginRows()  # begin rows to write
        self._releases: list[Key] = []
        self.left_behind = 0  # tasks given back at a stop, a halt or the deadline
        self._workers: list[tuple[int, str]] = []
        self._claiming = False
        self._looking = False
        self._peeking = False  # the look under way is a peek (see _peek)
        self._peek_at = now
        self.tries: dict[int, int] = {}  # attempts started in this run, per task
        self.failures: dict[int, int] = {}  # failed attempts of the tasks it claimed, so far
        self.final: dict[int, str] = {}  # each task's last status in this run
        self.start_failures = 0
        self.halted: str | None = None
        self.stopping = False
        self.stopped_by_row = False  # `zotsink stop`
        self.signals_seen = 0
        self.error: Exception | None = None
        self.done = 0
        self.failed = 0
        self.started = 0
        self.seconds = 0.0  # own time of this run's ended attempts, for their mean
        self.look_wait = LOOK_FIRST
        self.look_at = now
        self.idle_since = now
        self.idled_out = False
        self.passed: list[int] = []  # lines with a NUL byte the cursor passed by
        # workers (--call)
        self.workers = 0  # alive
        self.loaded = 0  # alive and loaded
        self.spawning = 0  # asked for and not yet started
        self.held = False
        self.unknown = 0  # tasks held in runs whose life nobody can tell (the last look's)
        self._asked: list[Candidate] = []  # the claim under way's tasks by name
        self._looked_once = False
        self._asked = False  # a look waited for the scheduler's word on the unknown tasks
        self._settling: dict[Key, Attempt] = {}
        self._last_lines: dict[Key, str] = {}
        self._out: list[Any] = []
        self._dispatch: dict[type, Callable[[Any], None]] = {
            Turn: self._turn,
            Signalled: self._signalled,
            Started: self._started,
            StartFailed: self._start_failed,
            Began: self._began,
            Exited: self._exited,
            Drained: self._drained,
            Returned: self._returned,
            HandedBack: self._handed_back,
            WorkerStarted: self._worker_started,
            WorkerReady: self._worker_ready,
            WorkerGone: self._worker_gone,
            Unloadable: self._unloadable,
            Claimed: self._claimed,
            ClaimFailed: self._claim_failed,
            Committed: self._committed,
            Looked: self._looked,
            RelayChecked: self._relay_checked,
            Submitted: self._relay_answered,
        }

    # -- the one entry point ------------------------------------------------------------------
    def handle(self, events: Iterable[Any]) -> list[Any]:
        """Take a turn's events; what to do now, in order."""
        out: list[Any] = []
        self._out = out
        for ev in events:
            self._dispatch[type(ev)](ev)
        now = self.now
        self._tend(now)
        self._settle(now)
        if self.queue.stopped:
            self._release()
        self._commit(now)
        self._claim(now)
        self._start(now)
        # after the starts (a slot a slow task just left takes the next one rather than
        # give it back to claim it again): what waited too long (TaskQueue.lapsed)
        stale = self.queue.lapsed(now, self.plan.hold) if self.plan.hold > 0 else []
        if stale:
            self._releases.extend((t.num, a) for t, a in stale)
            # given back for a run that idles; if none takes them, this run does once
            # its slots free: it looks again before it ends
            self._looked_once = False
        self._tend_workers()
        # rows no claim carries are written now: a run waiting on others' tasks must see
        # their ends, as they must see this run's; a look after them sees them too (the
        # tasks this run just gave back among them)
        self._flush_rows()
        self._peek(now)
        self._look(now)
        over = self._finished()
        if self.relay is not None:
            # a relay run ends once its chain is told (and its place handed on)
            out += self.relay.turn(now, self._facts(over))
            over = over and self.relay.done
        if over:
            if self.plan.calls:
                out.append(StopWorkers())
            out.append(Done())
        return out

    # -- events ----------------------------------------------------------------------------------
    def _turn(self, ev: Turn) -> None:
        self.now = ev.now
        self.free = ev.free

    def _signalled(self, ev: Signalled) -> None:
        if self.stopping:
            if ev.count > self.signals_seen:
                self._hurry()
            return
        self.stopping = True
        self.signals_seen = ev.count
        self.queue.stop()
        for a in self.live.values():
            if not self.plan.calls and a.phase in ("running", "terminating"):
                # a function is left to finish its call; a command decides for itself
                self._out.append(Signal(a.key, ev.signum))
            a.stop(self.now, self.plan.grace)

    def _hurry(self) -> None:
        """A second stop signal: the grace ends now; what still runs is killed."""
        self.signals_seen += 1
        for a in self.live.values():
            if a.phase in ("running", "terminating"):
                self._out.append(Signal(a.key, SIGKILL))
                a.killed()

    def _started(self, ev: Started) -> None:
        a = self.live.get(ev.key)
        if a is None:
            return
        a.began(self.now, ev.pid, ev.start)
        self._begins.add(ev.key, ev.pid, ev.start, self.now)
        self.queue.ran()
        if self.plan.task_timeout is not None:
            a.limit(a.started + self.plan.task_timeout)
        if self.stopping:
            a.stop(self.now, self.plan.grace)

    def _start_failed(self, ev: StartFailed) -> None:
        a = self.live.get(ev.key)
        if a is None:
            return
        a.note(ev.why)
        a.exited(self.now, 127, UNMEASURED)
        a.drained()
        if ev.own or self.queue.has_run:
            return  # this task's line is at fault, not the command: it fails alone
        self.start_failures += 1
        if self.start_failures >= HALT_AFTER:
            # a mistyped command fails every task the same way: stop, and say why
            self._halt(
                f"the first {self.start_failures} tasks could not start ({ev.why}); "
                "nothing more was started: fix the command and run again"
            )

    def _began(self, ev: Began) -> None:
        a = self.live.get(ev.key)
        if a is None or a.phase != "sent":
            return
        a.began(self.now, ev.pid, ev.start)
        # a call that runs on past the commit window is told as begun, in its worker
        self._begins.add(ev.key, ev.pid, ev.start, self.now)
        if self.plan.task_timeout is not None:
            a.limit(a.started + self.plan.task_timeout)
        if self.stopping:
            a.stop(self.now, self.plan.grace)

    def _exited(self, ev: Exited) -> None:
        a = self.live.get(ev.key)
        if a is not None and a.phase not in ("exited", "ended"):
            a.exited(self.now, ev.code, ev.usage)

    def _drained(self, ev: Drained) -> None:
        a = self.live.get(ev.key)
        if a is not None:
            self.size[ev.key] = ev.size
            self._last_lines[ev.key] = ev.last
            a.drained()

    def _returned(self, ev: Returned) -> None:
        a = self.live.get(ev.key)
        if a is None:
            return
        if a.phase == "sent":  # it began and ended between two looks
            a.began(self.now - (ev.seconds or 0.0), 0, "")
        if ev.why:
            a.note(ev.why)
        self.size[ev.key] = ev.size
        self._last_lines[ev.key] = ev.last
        a.returned(self.now, ev.code, ev.seconds, ev.usage, died=ev.died)
        if not ev.died:
            self.queue.ran()

    def _handed_back(self, ev: HandedBack) -> None:
        back = []
        for key in ev.keys:
            a = self.live.pop(key, None)
            if a is None:
                continue
            # a call told as begun when it was sent, handed back unbegun: no begin row
            self._begins.drop(key)
            self.started -= 1
            self.tries[key[0]] -= 1
            back.append((a.task, key[1], a.claimed_at))
        if not back:
            return
        if self.queue.stopped:
            self._releases.extend((t.num, att) for t, att, _c in back)
            self.left_behind += len(back)
        else:
            self.queue.give_back(back)

    def _worker_started(self, ev: WorkerStarted) -> None:
        self.spawning = max(self.spawning - 1, 0)
        self.workers += 1
        self._workers.append((ev.pid, ev.start))

    def _worker_ready(self, ev: WorkerReady) -> None:
        self.loaded += 1

    def _worker_gone(self, ev: WorkerGone) -> None:
        self.workers = max(self.workers - 1, 0)
        if ev.loaded:
            self.loaded = max(self.loaded - 1, 0)
        elif self.halted is None and not self.stopping:
            self._unloadable(Unloadable(f"its worker died while loading it (exit {ev.code})"))

    def _unloadable(self, ev: Unloadable) -> None:
        if self.halted is None:
            text = ev.text.strip()
            last = text.splitlines()[-1] if text else "no reason given"
            self._halt(
                f"cannot load --call {self.plan.call}: {last}; nothing was started: fix it "
                f"and run again (the traceback is in {self.plan.log})"
            )

    def _claimed(self, ev: Claimed) -> None:
        self._claiming = False
        self.passed.extend(ev.passed)
        if ev.stopped:
            self.stopped_by_row = True
            self.queue.stop()
        got = {t.num for t, _a in ev.tasks}
        kept = {c.task.num for c in ev.rest}
        dropped = [c for c in self._asked if c.task.num not in got and c.task.num not in kept]
        taken = sum(1 for c in self._asked if c.task.num in got and c.taken)
        for c in self._asked:
            if c.failures and c.task.num in got:
                self.failures[c.task.num] = c.failures
        self.queue.claimed(
            ev.tasks, dropped, self.now, drained=ev.drained, taken_over=taken, rest=ev.rest
        )
        if ev.tasks:
            self.look_wait = LOOK_FIRST
        elif dropped:
            # another run took them first: many runs must not take the lock in turns for
            # tasks one of them gets
            self.look_wait = min(self.look_wait * 2, LOOK_MOST)
        if self._asked:
            self._looked_once = False  # tasks found by a look: look again before the end
        self._asked = []

    def _claim_failed(self, ev: ClaimFailed) -> None:
        self._claiming = False
        self.queue.unasked()
        self._asked = []
        self.error = self.error or ev.error
        self.queue.stop()
        self.stopping = True

    def _committed(self, ev: Committed) -> None:
        attempts = self._committing or {}
        self._committing = None
        ends: list[End] = []
        for p in ev.placed:
            a = attempts.get(p.key)
            if a is None:
                continue
            ends.append(self._end(a, p))
        self._ends.append((ev, ends))

    def _relay_checked(self, ev: RelayChecked) -> None:
        if self.relay is not None:
            self._out += self.relay.checked(ev)

    def _relay_answered(self, ev: Submitted) -> None:
        if self.relay is not None:
            self._out += self.relay.answered(ev)

    def _facts(self, over: bool) -> Facts:
        """What the relay is told of this run: tasks it knows wait (found free, claimed and
        not started), and, once it would end, why."""
        q = self.queue
        if not over:
            return Facts(q.pending > 0 or q.claimed_count > 0)
        # what it found free and has not run, what it gave back, what a stop interrupted
        # (counted once the run would end: the final statuses are one per task it ran)
        interrupted = sum(1 for status in self.final.values() if status == "interrupted")
        waiting = q.pending > 0 or q.claimed_count > 0 or self.left_behind + interrupted > 0
        if self.error is not None:
            return Facts(waiting, "error")
        if self.stopped_by_row:
            return Facts(waiting, "stopped")
        if self.halted is not None:
            return Facts(waiting, "halted", self.halted)
        # a followed list still open, with no --idle to end on: lines are to come
        kept = q.mode == "follow" and not q.closed and self.plan.idle is None
        if self.stopping:
            return Facts(waiting, "signal", open_list=kept)
        if q.out_of_time:
            return Facts(waiting, "deadline", open_list=kept)  # the list's lines: checked too
        return Facts(waiting, "idle" if self.idled_out else "done", given_up=len(q.given_up))

    def _looked(self, ev: Looked) -> None:
        self._looking = False
        now = self.now
        if ev.error is not None:
            self.error = self.error or ev.error
            self.queue.stop()
            return
        if ev.stopped:
            self.stopped_by_row = True
            self.queue.stop()
        if ev.closed:
            self.queue.close()
        if self._peeking:
            self._peeking = False
            if not ev.grew:
                self.queue.drain()  # the tasks waiting past the hold are given back now
            return
        came = self.queue.learn([Candidate(*c) for c in ev.free], ev.held)
        if ev.grew:
            self.queue.grew()
            came += 1
        self.unknown = ev.unknown
        if came or self.live:
            self.idle_since = now
        # tasks a look found (given back by runs behind slow tasks) are claimed at once,
        # and the claim says how soon to look again; a look that found none backs off
        if not came:
            self.look_wait = min(self.look_wait * 2, LOOK_MOST)
        if self.plan.idle is not None and now - self.idle_since >= self.plan.idle:
            self.idled_out = True  # nothing to do for --idle seconds: make way
        self.look_at = now + self.look_wait

    # -- decisions -------------------------------------------------------------------------------
    def _halt(self, why: str) -> None:
        self.halted = why
        self.queue.stop()

    def _tend(self, now: float) -> None:
        for a in list(self.live.values()):
            step = a.step(now)
            if step is None:
                continue
            if step == "end":
                self._ended(a, now)
            elif step == "drain":
                a.note("its output stayed open after it exited (a background process?)")
                self._out.append(Drain(a.key))
            elif step == "term":
                self._out.append(Signal(a.key, SIGTERM))
                a.terminated(now)
            elif step == "kill":
                self._out.append(Signal(a.key, SIGKILL))
                a.killed()

    def _ended(self, a: Attempt, now: float) -> None:
        del self.live[a.key]
        if a.ended_by is None and -a.code in STOPS:
            if self.stopping:
                # died of a stop signal as the run was stopped (scancel signals every
                # process of the job at once: the task's death may be read first)
                a.interrupted()
            else:
                self.settling[a.key] = now + STOP_SETTLE
                self._settling[a.key] = a
                return
        self._group(a, now)

    def _settle(self, now: float) -> None:
        """Attempts that died of a stop signal: interrupted when the run was stopped too,
        killed when no stop came in their moment."""
        for key, until in list(self.settling.items()):
            a = self._settling[key]
            if self.stopping:
                a.interrupted()
            elif now < until:
                continue
            del self.settling[key]
            del self._settling[key]
            self._group(a, now)

    def _group(self, a: Attempt, now: float) -> None:
        self._begins.drop(a.key)
        self.group.add(a, now, a.own_time(), self.size.pop(a.key, 0))
        self.done += 1
        self.idle_since = now
        self.seconds += a.own_time()
        status = a.status
        self.failed += status != "ok"
        self._judge(a, status)

    def _judge(self, a: Attempt, status: str) -> None:
        """Whether the tasks' failures call for a halt (see .halting)."""
        last = self._last_lines.pop(a.key, "")
        if self.halting is None or self.halted is not None or self.stopping:
            return
        key = alike_key(status, last, a.task.line)[1] if status != "ok" else None
        why = self.halting.end(status, key, last)
        if why is not None:
            self._halt(
                f"halted: {why}; nothing more was claimed: the tasks not started stay to "
                "resubmit once the cause is fixed (--halt-after 0: never halt)"
            )
        elif not self.halting.probing:
            self.queue.limit(None)

    def _commit(self, now: float) -> None:
        if self._committing is not None or not self.group.attempts:
            return
        claim_due = self.queue.claim_due(self.free, self._idle()) and not self._claiming
        # alone: nothing runs and nothing will start to share the append (between two quick
        # tasks nothing runs for a moment: that is no reason to take the lock alone)
        alone = not self.live and not self.queue.has_work
        if not (claim_due or self.group.due(now, alone=alone, hurry=self.stopping)):
            return
        attempts = self.group.take()
        self._committing = {a.key: a for a in attempts}
        self._out.append(Commit([a.key for a in attempts]))

    def _end(self, a: Attempt, p: Placed) -> End:
        status = a.status
        notes = [*a.notes, *p.notes]
        if p.lost:
            status = "failed"  # its records could not all be held: none may be claimed
        elif p.offset < 0 and p.size and status == "ok":
            # Not in OUT: no row may claim them; the task runs again on the next run
            status = "failed"
        elif status == "ok" and p.refused and not p.records:
            # every line refused (key:value output without --kv, a wrong field count):
            # nothing of the task is in OUT, so it is not done
            status = "failed"
            notes.append(f"every line it printed ({p.refused}) was refused, none kept")
        num, attempt = a.key
        self.final[num] = status
        if status in FAILING:
            failed = self.failures[num] = self.failures.get(num, 0) + 1
            limit = self.plan.max_attempts
            if limit is not None and failed >= limit:
                self.queue.give_up(num)  # failed max_attempts times: not tried again
            elif self.tries.get(num, 0) <= self.plan.retries and not self.stopping:
                self.queue.retry(a.task, attempt)
        code = a.code
        wait = a.started - a.claimed_at if a.claimed_at >= 0 else None
        return End(
            a.key,
            status,
            str(code) if code >= 0 else self._signame(-code),
            a.own_time(),
            max(wait, 0.0) if wait is not None else None,
            p.records,
            p.size,
            p.offset >= 0,
            a.usage,
            "; ".join(notes),
        )

    def _claim(self, now: float) -> None:
        if self._claiming or self.queue.stopped or self.halted is not None:
            return
        if self._committing is not None:
            return  # the claim waits for the commit under way: its ends go with it
        committed = bool(self._ends)
        if not (self.queue.claim_due(self.free, self._idle()) or committed):
            return
        want = self.queue.to_claim(self.free, self.group.window, now)
        if want <= 0:
            return
        if self.plan.deadline is not None and now + self._task_time() > self.plan.deadline:
            self.queue.time_out()  # another run will start what is left
            return
        self._asked = self.queue.ask(want)
        self._claiming = True
        self._out.append(self._rows(now=False))
        self._out.append(Claim(want, list(self._asked)))

    def _task_time(self) -> float:
        given = self.plan.task_time
        if given is not None:
            return given
        return self.seconds / self.done if self.done else 0.0

    def _start(self, now: float) -> None:
        if self.halted is not None:
            return
        batch: list[tuple[Task, int]] = []
        free = self.free
        while free > 0:
            if self.plan.deadline is not None and now + self._task_time() > self.plan.deadline:
                self.queue.time_out()  # judged at the begin: it would not finish
                left = self.queue.release()
                self._releases.extend((t.num, a) for t, a in left)
                self.left_behind += len(left)
                break
            claimed = self.queue.next()
            if claimed is None:
                break
            task, attempt, claimed_at = claimed
            self.tries[task.num] = self.tries.get(task.num, 0) + 1
            a = Attempt(task, attempt, claimed_at, now)
            if self.plan.calls:
                a.sent()
            self.live[a.key] = a
            self.started += 1
            batch.append((task, attempt))
            free -= 1
        if batch:
            self.free = free
            self._out.append(Start(batch))

    def _release(self) -> None:
        """Tasks claimed but not started, after a stop or a halt: given back."""
        if self.plan.calls and not self.held:
            self.held = True
            self._out.append(Hold())
        released = self.queue.release()
        if released:
            self._releases.extend((t.num, a) for t, a in released)
            self.left_behind += len(released)

    def _idle(self) -> bool:
        """Nothing runs: a claim need not wait for a free slot (a function's tasks wait for
        a worker that loaded it: one that cannot load it claims nothing)."""
        return not self.live and not self.plan.calls

    def _flush_rows(self) -> None:
        """Rows no claim carries now: ends and releases at once (runs waiting on these tasks
        read them); begins with the next append, or once the oldest has waited a commit
        window (a task that outlives its run is known by its own process from then on);
        workers with whatever goes first."""
        if self._claiming:
            return
        if self._ends or self._releases or self._begins.due(self.now):
            self._out.append(self._rows(now=True))

    def _rows(self, *, now: bool) -> Rows:
        rows = Rows(
            begins=self._begins.take(self.now),
            ends=self._ends,
            releases=self._releases,
            workers=self._workers,
            now=now,
        )
        self._ends, self._releases, self._workers = [], [], []
        return rows

    def _looking_now(self) -> bool:
        """Whether the run waits on the ledger or the list: tasks of other runs that may
        die, or a list that may grow or be closed."""
        q = self.queue
        if q.stopped or q.out_of_time or self.halted is not None:
            return False
        if q.waits_on_others:
            return not self.idled_out
        if q.has_work:
            return False
        if self.unknown and not self._asked and not self.idled_out:
            return True  # tasks of runs nobody could tell about: ask, once, before the end
        if q.mode == "follow":
            # a followed list ends once closed and every line was taken
            return not self.idled_out and not (q.closed and q.drained)
        # a pull run whose cursor is drained looks once for tasks to take over
        return q.cursor and not self._looked_once

    def _peek(self, now: float) -> None:
        """A peek (see TaskQueue.peek_due), one a quarter of the hold at most."""
        hold = self.plan.hold
        if hold <= 0 or self._looking or self._claiming or now < self._peek_at:
            return
        if self.queue.peek_due(now, hold):
            self._looking = self._peeking = True
            self._peek_at = now + hold / 4
            self._out.append(Look(deep=False))

    def _look(self, now: float) -> None:
        if self._looking or not self._looking_now() or now < self.look_at:
            return
        self._looking = True
        self._looked_once = True
        ask = bool(self.unknown) and not self._asked and not self.queue.has_work
        self._asked = self._asked or ask
        self._out.append(Look(deep=True, ask=ask))

    def _tend_workers(self) -> None:
        if not self.plan.calls or self.halted is not None or self.stopping:
            return
        want = self.plan.jobs if self.queue.has_work else 0
        short = want - self.workers - self.spawning
        if short > 0:
            self.spawning += short
            self._out.append(Spawn(short))

    def _finished(self) -> bool:
        if self.live or self.settling or self.group.attempts or self._committing:
            return False
        if self.queue.claimed_count or self._claiming or self._looking:
            return False
        if self._looking_now():
            return False
        # tasks left and none running: a claim comes first, or a worker still loads
        return not (self.queue.has_work and self.halted is None and not self.stopping)

    # -- reports -----------------------------------------------------------------------------
    def progress(self) -> Progress:
        return Progress(
            self.queue.total,
            self.done,
            self.failed,
            sum(1 for a in self.live.values() if a.phase != "sent"),
            self.now - self.began,
        )

    def wake(self) -> float | None:
        """When the next decision is due by time alone (None: only events will tell)."""
        due = [a.deadline for a in self.live.values() if a.deadline is not None]
        due += list(self.settling.values())
        w = self.group.wait(self.now)
        if w is not None:
            due.append(self.now + w)
        if self._looking_now() and not self._looking:
            due.append(self.look_at)
        if self.queue.claimed_count and self.plan.hold > 0:
            due.append(self.now + self.plan.hold)
        begins = self._begins.next_due()
        if begins is not None:
            due.append(begins)
        if self.relay is not None:
            check = self.relay.wake()
            if check is not None:
                due.append(check)
        return min(due) if due else None
