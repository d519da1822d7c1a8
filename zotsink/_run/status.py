"""Reading the ledger back: where the tasks stand, and which array indices to resubmit."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from .._arrays import array_spec, chunk_of, split_spec
from .._core.fileio import pread_chunks, side_file_problem
from .._core.snapshot import snapshot
from .._ledger.format import iso_time, ledger_time
from .._ledger.pieces import out_file
from .._ledger.read import Snapshot
from .._ledger.relay import Chain
from .._ledger.view import FAILING, STATES, LedgerView
from ..errors import UsageError
from .alive import SCHEDULER_WAIT, Judge, forget_jobs, job_alive, scheduler_wait
from .failures import FailedTask, end_key
from .halting import WINDOW_MIN, systematic
from .logline import log_lines
from .relay import RETRY_FIRST, RETRY_MOST
from .runs import LiveRuns, live_runs
from .settings import recorded_array, recorded_max_attempts
from .tasks import Task, task_lines

__all__ = [
    "TO_RUN",
    "ChainStatus",
    "FailingAlike",
    "LedgerMissing",
    "StatusReport",
    "failed_tasks",
    "ledger_jobs",
    "ledger_missing",
    "ledger_time",
    "ledger_view",
    "out_of",
    "parse_states",
    "resubmit_specs",
    "task_status",
    "tasks_in",
]


class FailingAlike(NamedTuple):
    """The last tasks to end all failed alike (the same status, exit or signal): what a run
    halts on, and what a submission as it is would do to the tasks left."""

    tasks: int  # how many of the last to end (every task that ended, when fewer)
    status: str  # failed, killed or timeout
    exit: str  # the last one's exit code ("" when a signal ended it)
    signal: str

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class ChainStatus(NamedTuple):
    """A relay chain as ``status`` tells it (``run --relay``, ``add --relay``): its elements
    by the relay rows, confirmed with the scheduler (``gone``: the rows say queued or
    running, the scheduler has neither), its submissions, the last one that failed, why it
    ended; the rows' own words in :class:`~zotsink._ledger.relay.Chain`."""

    chain: Chain
    running: tuple[str, ...]
    queued: tuple[str, ...]
    gone: tuple[str, ...]

    @property
    def active(self) -> bool:
        return self.chain.active

    def to_dict(self) -> dict[str, Any]:
        d = self.chain.to_dict()
        d.update(running=list(self.running), queued=list(self.queued), gone=list(self.gone))
        retry = self.chain.retry_at(RETRY_FIRST, RETRY_MOST)
        d["next_try"] = iso_time(retry) if retry else None
        return d


def chain_status(chain: Chain, alive: Callable[[str], bool | None]) -> ChainStatus | None:
    """The chain of a ledger, its elements asked about (``alive``: the scheduler's word on
    a job); None for a ledger no relay wrote to."""
    if not chain.rows:
        return None
    running: list[str] = []
    queued: list[str] = []
    gone: list[str] = []
    for job, el in sorted(chain.open().items(), key=lambda kv: kv[1].at):
        if el.state == "exited":
            continue
        said = alive(job) if job else None
        if said is False:
            gone.append(job)
        elif el.state == "running":
            running.append(job)
        else:
            queued.append(job)
    return ChainStatus(chain, tuple(running), tuple(queued), tuple(gone))


class StatusReport(NamedTuple):
    """Counts by state, throughput and an ETA, the slowest tasks."""

    total: int
    counts: dict[str, int]  # every state of STATES, zero included
    rate: float | None  # tasks ended ok per second, from the first start to the last end
    eta: float | None  # seconds until every task is ok at that rate; None when none runs
    slowest: list[tuple[int, float, str]]  # (task number, seconds, task line)
    states: LedgerView  # where each task stands (state(num)), the runs, the control rows
    settings: dict[str, str] | None = None  # how the latest run was called (None: unknown)
    chunk: int = 1  # given, else recorded: what ``resubmit`` is in
    base: int = 1
    max_attempts: int | None = None  # given, else recorded: what made tasks given-up
    # whether tasks that never ran may still start: no run has begun yet, or the scheduler
    # still has a job of the ledger queued or running (or cannot say)
    waiting: bool = True
    # the median seconds of the tasks whose latest attempt ended: what "slow" is against
    median: float | None = None
    # what the scheduler left untold: "no answer in N s" (None: it answered, or none asked)
    scheduler: str | None = None
    # the live runs, the task list closed or open, a stop (None: not read)
    runs: LiveRuns | None = None
    # a --pull ledger: tasks are left, not chunks; runs that started tasks so far
    pull: bool = False
    runs_seen: int = 0
    # running tasks whose run's life nothing here can tell (another host, no scheduler)
    unknown: frozenset[int] = frozenset()
    # the scheduler's jobs that ran tasks of the ledger (CLUSTER:JOB where it names one)
    jobs: tuple[str, ...] = ()
    # a --follow ledger: its runs take the lines added to the task list while they live
    follow: bool = False
    # the last tasks to end all failed alike: fix the cause before submitting (None: not so)
    failing: FailingAlike | None = None
    # the relay chain (run --relay, add --relay); None: no relay wrote to the ledger
    relay: ChainStatus | None = None

    @property
    def all_ok(self) -> bool:
        return self.counts["ok"] == self.total

    @property
    def takers(self) -> int:
        """Live runs of a ``--pull`` ledger that will take the tasks left: neither stopping
        nor halting (a run whose tasks all failed alike halts). A chunked run takes only
        its chunk's."""
        if self.runs is None or self.failing is not None or not self.pull:
            return 0
        return sum(not r.stopping for r in self.runs.live)

    @property
    def submit(self) -> int:
        """How many more elements of a ``--pull`` job to submit for the tasks left: as many
        as ran before, never more than tasks are left; none while live runs take them, and
        none while the last tasks to end failed alike (the cause wants fixing first)."""
        left = self.to_run
        if not self.pull or not left or self.takers or self.failing is not None:
            return 0
        return min(left, max(self.runs_seen, 1))

    @property
    def settled(self) -> bool:
        """Nothing is running or claimed and nothing waits to start (a task that never ran
        waits only while a job of the ledger may still start it): watching can stop."""
        busy = self.counts["running"] + self.counts["claimed"]
        return not busy and (not self.counts["never"] or not self.waiting)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "counts": self.counts,
            "rate_per_hour": None if self.rate is None else round(self.rate * 3600, 3),
            "eta_seconds": None if self.eta is None else round(self.eta, 1),
            "slowest": [{"tasknum": n, "seconds": s, "key": k} for n, s, k in self.slowest],
            "not_ok": array_spec(n for n in self._nums() if _state(self.states, n) != "ok"),
            "given_up": array_spec(self.given_up()),
            "settings": self.settings,
            "chunk": self.chunk,
            "base": self.base,
            "max_attempts": self.max_attempts,
            "resubmit": self.resubmit(),
            "to_run": self.to_run,
            "scheduler": self.scheduler,
            "runs": None if self.runs is None else self.runs.to_dict(),
            "pull": self.pull,
            "follow": self.follow,
            "unknown": array_spec(self.unknown),
            "jobs": list(self.jobs),
            "failing_alike": None if self.failing is None else self.failing.to_dict(),
            "takers": self.takers,
            "submit": self.submit,
            "relay": None if self.relay is None else self.relay.to_dict(),
        }

    def _nums(self) -> Iterable[int]:
        return self.states.keys or ()

    @property
    def to_run(self) -> int:
        """How many tasks wait for a run: not ok, not given up, not running."""
        return sum(n for state, n in self.counts.items() if state in TO_RUN)

    def given_up(self) -> list[int]:
        """The tasks given up (see ``--max-attempts``)."""
        return [n for n in self._nums() if _state(self.states, n) == "given-up"]

    def resubmit(self) -> str:
        """The array indices (in ``chunk`` and ``base``) whose chunk holds a task to run
        again: not ok, not given up, not running."""
        return array_spec(
            chunk_of(n, self.chunk, self.base)
            for n in self._nums()
            if _state(self.states, n) in TO_RUN
        )


#: The states of a task that waits for a run (what ``status --waiting`` asks).
TO_RUN = frozenset(STATES) - {"ok", "given-up", "running", "claimed"}


def _state(states: LedgerView, num: int) -> str:
    return states.state(num)


def ledger_view(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    max_attempts: int | None = None,
    wait_scheduler: float | None = SCHEDULER_WAIT,
) -> tuple[LedgerView, int | None]:
    """Where every runnable task of ``tasks`` stands according to ``ledger``: one pass
    over a snapshot, the task list's lines checked against what each claim names, OUT (as
    the latest run recorded it) checked for each ok task's piece, and the runs judged
    (this host's pid table, else the scheduler within ``wait_scheduler`` seconds); the
    max_attempts that applies (given, else recorded)."""
    keys, _ = task_lines(tasks)
    view = LedgerView(keys, pieces=True)
    with Snapshot(ledger, lock=lock, timeout=timeout) as snap:
        view.feed(snap.rows())
    view.verify()
    if max_attempts is None:
        max_attempts = recorded_max_attempts(view.settings)
    where = out_of(os.fspath(ledger), view.settings)
    found = out_file(where) if where is not None else None
    judge = Judge(wait=wait_scheduler)
    if where is None:
        view.settle(judge, max_attempts=max_attempts)
    else:
        view.settle(judge, max_attempts=max_attempts, out=found)
    return view, max_attempts


def ledger_jobs(
    ledger: str | os.PathLike[str], *, lock: str = "auto", timeout: float = 600.0
) -> list[str]:
    """The scheduler's jobs whose runs wrote to ``ledger``, in the order they first did
    (``CLUSTER:JOB`` where the scheduler names a cluster); no scheduler is asked."""
    view = LedgerView()
    with Snapshot(ledger, lock=lock, timeout=timeout) as snap:
        view.feed(snap.rows())
    return list(dict.fromkeys(r.job for r in view.runs if r.job))


def out_of(ledger: str, settings: Mapping[str, str] | None) -> str | None:
    """OUT, for the check of ok ends: the file the latest run recorded (relative to the
    ledger), whether a file of that name exists or not (a rotated OUT's tasks are lost);
    else, for a ledger of an older release, the file the ledger is beside (when it exists);
    None: nothing to check against."""
    recorded = (settings or {}).get("out")
    if recorded:
        return os.path.join(os.path.dirname(os.path.abspath(ledger)), recorded)
    beside = ledger[: -len(".ledger")] if ledger.endswith(".ledger") else ""
    return beside if beside and os.path.lexists(beside) else None


def task_status(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    slowest: int = 5,
    chunk: int | None = None,
    base: int | None = None,
    max_attempts: int | None = None,
    fresh: bool = False,
    lock: str = "auto",
    timeout: float = 600.0,
    wait_scheduler: float = SCHEDULER_WAIT,
) -> StatusReport:
    """Where every runnable task of ``tasks`` stands according to ``ledger``; ``chunk``,
    ``base`` and ``max_attempts`` default to the ledger's recorded settings. ``fresh``:
    the scheduler is asked again about jobs this process asked about before (a watch).
    The scheduler gets ``wait_scheduler`` seconds in all to say which jobs still run; what
    it has not said by then counts as it last said (else as running), and ``scheduler``
    says so."""
    if fresh:
        forget_jobs()
    with scheduler_wait(wait_scheduler) as late:
        view, max_attempts = ledger_view(
            tasks,
            ledger,
            lock=lock,
            timeout=timeout,
            max_attempts=max_attempts,
            wait_scheduler=None,
        )
        counts = view.counts()
        jobs = sorted({r.job for r in view.runs if r.job})
        # Runs without a scheduler (no job id) that are all gone leave nothing to wait
        # for; a job the scheduler cannot answer about may still start tasks.
        waiting = not view.runs or (
            counts["never"] > 0 and any(job_alive(j) is not False for j in jobs)
        )
        pull = (view.settings or {}).get("pull", "")
        runs = live_runs(view, Judge(wait=None))
        relay = chain_status(view.chain, job_alive)
    total = len(view.keys or ())
    first, last = view.first_time, view.last_time
    span = last - first if view.runs and last > first else 0.0
    rate = counts["ok"] / span if span > 0 and counts["ok"] else None
    # an ETA only while something runs: a rate says nothing of tasks nobody is running
    running = counts["running"] + counts["claimed"]
    eta = (total - counts["ok"]) / rate if rate and running else None
    chunk, base = recorded_array(view.settings, chunk, base, path=os.fspath(ledger))
    return StatusReport(
        total=total,
        counts=counts,
        rate=rate,
        eta=eta,
        slowest=view.slowest(slowest),
        median=view.median_seconds() if slowest else None,
        states=view,
        settings=view.settings,
        chunk=chunk,
        base=base,
        max_attempts=max_attempts,
        waiting=waiting,
        scheduler=f"no answer in {wait_scheduler:g} s" if late else None,
        runs=runs,
        pull=bool(pull),
        runs_seen=len(view.runs),
        unknown=frozenset(view.unknown),
        jobs=tuple(jobs),
        follow=pull == "follow",
        failing=failing_alike(view, counts),
        relay=relay,
    )


def failing_alike(view: LedgerView, counts: Mapping[str, int]) -> FailingAlike | None:
    """Whether the last tasks to end all failed alike, as a run halts on them (see
    :mod:`~zotsink._run.halting`): the last :data:`~zotsink._run.halting.WINDOW_MIN` of them,
    or every task of the list, when each ran and fewer ended. Read only when tasks failed
    and some wait for a run."""
    failed = sum(counts[state] for state in (*FAILING, "given-up"))
    if not failed or not sum(counts[state] for state in TO_RUN):
        return None
    last_ends = view.last_ended(WINDOW_MIN)
    keys = view.keys or {}
    ends = [(s, end_key(s, code, note, keys.get(n, ""))) for n, s, code, note in last_ends]
    if len(ends) < WINDOW_MIN:
        # fewer ended: alike only when every task ended, each failing as the others did
        unjudged = ("never", "running", "claimed", "lost", "interrupted")
        every = bool(ends) and not any(counts[s] for s in unjudged)
        if not every or len(set(ends)) > 1 or ends[0][0] not in FAILING:
            return None
    elif not systematic(ends, 1):
        return None
    _n, status, code, _note = last_ends[-1]
    signal = code if code.startswith("SIG") else ""
    return FailingAlike(len(ends), status, "" if signal else code, signal)


def parse_states(spec: str | Iterable[str] | None) -> frozenset[str]:
    """``--state`` values; None means every state but ok and given-up (a task to run
    again). ``running/lost`` names both."""
    if spec is None:
        return frozenset(STATES) - {"ok", "given-up"}
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    out: set[str] = set()
    for name in (n.strip() for n in names):
        if not name:
            continue
        parts = name.split("/") if name == "running/lost" else [name]
        bad = [p for p in parts if p not in STATES]
        if bad:
            raise UsageError(f"unknown task state {bad[0]!r}: choose from {','.join(STATES)}")
        out.update(parts)
    if not out:
        raise UsageError("--state names no state")
    return frozenset(out)


class LedgerMissing(NamedTuple):
    """What ``missing --ledger`` prints: the tasks in the states asked for, or the array
    specs of their chunks, and the given-up tasks it leaves out."""

    tasks: list[Task]
    specs: list[tuple[str, int]]  # (spec, base) of the chunks holding ``tasks``
    given_up: list[int]  # left out unless asked for by --state given-up
    chunk: int  # given, else recorded
    base: int
    max_attempts: int | None
    pull: bool = False  # a --pull ledger: ``specs`` is the elements to submit, 1-N


def ledger_missing(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    states: Sequence[str] | str | None = None,
    chunk: int | None = None,
    base: int | None = None,
    max_array: int | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> LedgerMissing:
    """The runnable tasks of ``tasks`` whose state is one of ``states`` (default: not ok and
    not given up), and the array specs of their chunks, in one pass over ``ledger``.

    ``chunk`` and ``base`` default to the ones the ledger's latest run recorded (else 1),
    so that the specs select the chunks the job script runs. ``max_array`` (the site's
    MaxArraySize) splits the specs so that no index reaches it; see
    :func:`~zotsink._arrays.split_spec`.
    """
    if chunk is not None and chunk < 1:
        raise UsageError(f"--chunk must be at least 1, not {chunk}")
    if max_array is not None and max_array < 1:
        raise UsageError(f"--max-array must be at least 1, not {max_array}")
    wanted = parse_states(states)
    path = os.fspath(ledger)
    if not os.path.lexists(path):
        # Before any run every task is missing; a mistyped path must not say so.
        raise UsageError(
            f"the ledger {path} does not exist: check the path (`zotsink run` writes "
            "OUT.ledger beside OUT, or the file given with --ledger)"
        )
    found, max_attempts = ledger_view(tasks, ledger, lock=lock, timeout=timeout)
    keys = found.keys or {}
    chunk, base = recorded_array(found.settings, chunk, base, path=path)
    picked = [Task(n, line) for n, line in keys.items() if found.state(n) in wanted]
    given_up = [] if "given-up" in wanted else [n for n in keys if found.state(n) == "given-up"]
    pull = bool((found.settings or {}).get("pull"))
    if pull:
        # any element takes any task: as many as ran before, never more than tasks left
        n = min(
            len(picked),
            max(len(found.runs), 1),
            max(max_array - 1, 1) if max_array else len(picked),
        )
        specs = [("1" if n == 1 else f"1-{n}", 1)] if n > 0 else []
    else:
        chunks = sorted({chunk_of(t.num, chunk, 1) for t in picked})
        specs = split_spec(chunks, base, max_array)
    return LedgerMissing(
        tasks=picked,
        specs=specs,
        given_up=given_up,
        chunk=chunk,
        base=base,
        max_attempts=max_attempts,
        pull=pull,
    )


def tasks_in(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    states: Sequence[str] | str | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> list[Task]:
    """The runnable tasks of ``tasks`` whose state is one of ``states`` (default: not ok
    and not given up)."""
    return ledger_missing(tasks, ledger, states=states, lock=lock, timeout=timeout).tasks


def resubmit_specs(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    states: Sequence[str] | str | None = None,
    chunk: int | None = None,
    base: int | None = None,
    max_array: int | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> list[tuple[str, int]]:
    """Array specs (with the base each runs under) whose chunks hold tasks in ``states``
    (see :func:`ledger_missing`; ``chunk`` and ``base`` default to the recorded ones)."""
    return ledger_missing(
        tasks,
        ledger,
        states=states,
        chunk=chunk,
        base=base,
        max_array=max_array,
        lock=lock,
        timeout=timeout,
    ).specs


#: Bytes of a log line kept for the report: the head says what went wrong.
_LINE_HEAD = 2000


def failed_tasks(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    log: str | os.PathLike[str],
    *,
    last: int = 5,
    lock: str = "auto",
    timeout: float = 600.0,
) -> tuple[list[FailedTask], str | None]:
    """Each task of ``tasks`` whose latest attempt failed (see :class:`FailedTask`), with
    the ``last`` lines of that attempt's stderr from ``log``; and a note when the log
    cannot tell them (it does not exist), else None.

    The log is read as a snapshot under its shared lock (``timeout``), only when it is this
    user's own regular file, in blocks: what is kept is the last lines of the failed
    attempts alone, however large the log. Lines of an older log carry no attempt: they
    count for the task's latest attempt.
    """
    view, _max = ledger_view(tasks, ledger, lock=lock, timeout=timeout)
    keys = view.keys or {}
    found: dict[int, FailedTask] = {}
    for n in keys:
        state = view.state(n)
        if state not in FAILING and state != "given-up":
            continue
        got = view.latest_fail(n)
        if got is None:
            continue
        item = got[0]
        code = item.code
        numeric = code.lstrip("-").isdigit()
        found[n] = FailedTask(
            tasknum=n,
            line=keys[n],
            state=state,
            status=item.status,
            attempt=item.attempt,
            exit=code if numeric else "",
            signal="" if numeric else code,
            seconds=item.seconds / 1e6,
            stderr=[],
        )
    if not found or last <= 0:
        return list(found.values()), None
    tails = {n: deque[bytes](maxlen=last) for n in found}
    note = _read_log(os.fspath(log), found, tails, lock=lock, timeout=timeout)
    out = [
        t._replace(stderr=[x.decode("utf-8", "replace") for x in tails[t.tasknum]])
        for t in found.values()
    ]
    return out, note


def _read_log(
    path: str,
    found: Mapping[int, FailedTask],
    tails: Mapping[int, Any],
    *,
    lock: str,
    timeout: float,
) -> str | None:
    if not os.path.lexists(path):
        return f"no log at {path}: the tasks' stderr is not shown (give --log PATH)"
    fd, size = snapshot(path, lock=lock, timeout=timeout)
    try:
        # the rule the log is written by (a group may share it, nobody may plant it)
        problem = side_file_problem(os.fstat(fd), path, own=False)
        if problem:
            raise UsageError(
                f"the log {path} is not to be trusted ({problem}); give --log the log "
                "`zotsink run` wrote",
                path=path,
            )
        for parsed in log_lines(pread_chunks(fd, size, 1 << 20), _LINE_HEAD):
            task = found.get(parsed.tasknum)
            if task is not None and parsed.attempt in (None, task.attempt):
                tails[parsed.tasknum].append(parsed.text)
    finally:
        os.close(fd)
    return None
