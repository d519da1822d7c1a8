"""``run_tasks`` and ``task_states``: the Python side of ``zotsink run`` and ``zotsink status``.

``run_tasks`` is a sequence of named steps: the option checks (:mod:`.options`), this array
element's tasks (:func:`_element_tasks`), the ledger's word on them and the recorded
settings, the queue of the tasks to run (:class:`~zotsink._run.queue.TaskQueue`), the
:class:`~zotsink._run.pool.Pool` with OUT and the log opened through the locked append path
(:func:`_pool`), and the report (:func:`_report`).
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from .._arrays import chunk_range
from .._core.fileio import open_regular
from .._core.header import make_encoder
from .._core.options import BATCH_BYTES, write_options
from .._core.outlet import Outcome, Outlet
from .._core.records import Encoder, format_for
from .._core.sidefiles import side_mode
from .._core.stamp import job_id, task_id
from .._core.stop import Stopper
from .._core.writer import Writer
from .._ledger.format import parse_end_items, parse_notes
from .._ledger.pieces import out_file
from .._ledger.read import Snapshot, last_rows
from .._ledger.relay import join_note
from .._ledger.view import LedgerView, State
from ..errors import UsageError, ZotsinkError
from .alive import RUN_VAR, SCHEDULER_WAIT, Judge, proc_start, run_mark
from .calls import Calls, signame
from .commands import Commands
from .failures import end_key
from .halting import Halting, systematic
from .ledger import Ledger
from .look import Looker
from .options import RunOptions, checked_options
from .output import Output
from .pool import Pool
from .queue import Candidate, Mode, TaskQueue
from .relay import Relay, RelayPlan
from .settings import ended_ok_since_settings, reconcile, recorded_max_attempts, run_settings
from .state import Plan, Progress, RunState
from .status import TO_RUN
from .successor import RELAY_VAR, Desk, relay_backend
from .tasks import Task, read_tasks, task_lines
from .worker import refuse_nested_run

#: Seconds a --call worker may take to load the function without --task-timeout (an
#: import that hangs, a lock on a shared filesystem): then the run stops, and says why.
LOAD_TIMEOUT = 600.0

__all__ = ["RELAY_MAX_ATTEMPTS", "RunReport", "run_tasks", "task_states"]


class RunReport(NamedTuple):
    """What one ``run`` did."""

    selected: int  # tasks chosen by --index/--chunk (all runnable tasks without an index)
    skipped: int  # already ok in the ledger
    started: int  # attempts started
    states: dict[int, str]  # the final state of every task this run started
    records: int  # appended to OUT
    rejected: int  # refused lines, in OUT.rejects
    spilled: int  # records saved to spill files
    spill_paths: tuple[str, ...]
    rejects_path: str | None
    log_path: str
    ledger_path: str
    signal: int | None  # the stop signal, if one came
    error: Exception | None  # the first LockError/WriteError/HeaderMismatch, if any
    outcomes: tuple[Outcome, ...] = ()  # OUT's, the log's and the ledger's
    elsewhere: int = 0  # tasks not started: another run finished or is running them
    halted: str | None = None  # why run stopped starting tasks early (a command that cannot start)
    given_up: int = 0  # tasks not started: they failed max_attempts times
    max_attempts: int | None = None  # the limit that applied (given, else recorded)
    taken_over: int = 0  # tasks of dead runs this run ran (--pull)
    unknown: int = 0  # left running in runs nobody can tell are alive or dead (--pull)
    out_of_time: bool = False  # tasks left to other runs: they would end after the deadline
    idled_out: bool = False  # a followed list gave nothing for --idle seconds
    stopped_by_row: bool = False  # `zotsink stop` told it to claim nothing more
    passed: tuple[int, ...] = ()  # lines of the list with a NUL byte: no task
    # tasks it was to run that wait for a run with no verdict as it ends, held by no run
    # that lives: never begun, lost, interrupted (a stop, a signal, a halt or a deadline
    # leaves tasks on purpose, and says so)
    left: tuple[int, ...] = ()
    # after `zotsink stop`: its chunk's tasks, or the list's for a pull run, that wait for
    # a run (not ok, not given up, not running)
    to_run: int | None = None
    # --relay: the jobs it submitted, its failed submissions' messages, what its chain
    # checks decided (each change once)
    relay: dict[str, list[str]] | None = None

    def to_dict(self) -> dict[str, object]:
        d = self._asdict()
        d["states"] = {str(k): v for k, v in self.states.items()}
        d["spill_paths"] = list(self.spill_paths)
        d["passed"] = list(self.passed)
        d["error"] = None if self.error is None else str(self.error)
        d["outcomes"] = [o.to_dict() for o in self.outcomes]
        return d


def task_states(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> dict[int, State]:
    """The state of every runnable task of ``tasks`` according to ``ledger``."""
    todo, _ = read_tasks(tasks)
    keys = {t.num: t.line for t in todo}
    view = LedgerView(keys)
    with Snapshot(ledger, lock=lock, timeout=timeout) as snap:
        view.feed(snap.rows())
    view.verify()
    view.settle(Judge(wait=SCHEDULER_WAIT))
    return {n: view.state(n) for n in keys}


def run_tasks(
    tasks: str | os.PathLike[str],
    out: str | os.PathLike[str],
    command: Sequence[str] = (),
    *,
    call: str | None = None,
    function: Callable[[str], Any] | None = None,
    index: int | None = None,
    chunk: int = 1,
    base: int = 1,
    jobs: int | str = 1,
    shell: bool = False,
    rerun: bool = False,
    retries: int = 0,
    task_timeout: float | None = None,
    grace: float = 30.0,
    max_attempts: int | None = None,
    halt_after: int | None = None,
    new_settings: bool = False,
    ledger: str | os.PathLike[str] | None = None,
    log: str | os.PathLike[str] | None = None,
    format: str | None = None,
    columns: Sequence[str] | None = None,
    kv: str | None = None,
    stamp: Sequence[str] = (),
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
    batch_bytes: int = BATCH_BYTES,
    flush_interval: float = 1.0,
    env: Mapping[str, str] | None = None,
    stopper: Stopper | None = None,
    progress: Callable[[Progress], None] | None = None,
    pull: bool = False,
    follow: bool = False,
    idle: float | None = None,
    deadline: str | float | None = None,
    task_time: float | None = None,
    relay: int | None = None,
    relay_script: str | os.PathLike[str] | None = None,
    max_relays: int | None = None,
) -> RunReport:
    """Run the tasks of this array element (see ``zotsink run --help``); a :class:`RunReport`.

    ``index`` None takes the scheduler's array index from ``env``; with none there, every
    task runs. ``command`` gets the task line for each ``{}`` in it, else as its last
    argument; with ``shell`` the task line itself runs under ``/bin/sh -c``.

    ``function`` (or ``call``, ``"FILE.py:FUNC"`` or ``"package.module:FUNC"``) instead of a
    command: ``jobs`` worker processes import it once and call it with each task's line (no
    newline). It returns the task's records: None, a str of lines, a mapping (one record by
    column name) or an iterable of those. What it prints goes to the log; an exception
    fails the task (its traceback in the log); a worker that dies kills its task and is
    replaced. ``function`` must be importable by name: defined at the top level of a module
    or of the script being run.

    ``progress`` is called about twice a second with a :class:`Progress`.

    ``pull``: the array index is ignored; the run claims the next tasks not done of the
    whole list, in batches sized by its rate, until none is left, then waits for the tasks
    running in other runs and runs those whose run is dead (this host: its process and
    every process it started gone; another host: the scheduler says its element ended).
    ``follow`` (implies ``pull``): lines appended to ``tasks`` while the run is live are
    new tasks; the run ends when the list is closed and all is done, or after ``idle``
    seconds with nothing to do. ``deadline`` (seconds from now, or an ISO time; else the
    scheduler's end of the job, for a pull run): no task is started that is expected (at
    ``task_time`` seconds, else the mean so far) to end after it.

    The ledger records the settings (:func:`~zotsink._run.settings.run_settings`); a run
    whose settings differ from the recorded ones, under which a task ended ok, raises
    :class:`UsageError` before any task starts, unless ``new_settings``
    (:func:`~zotsink._run.settings.reconcile`).
    ``max_attempts`` (else the recorded one): a task whose failed, killed
    or timed-out attempts reached it is ``given-up`` and not started again.

    ``halt_after``: claim nothing more after that many failed tasks in this run (0: never
    halt); None: halt when the first tasks all fail alike (see :mod:`zotsink._run.halting`).

    ``relay`` (a pull run in a batch job): keep N elements of the list's chain queued or
    running while work waits, each submitting one successor at a time (``relay_script``,
    else this job's own script), at most ``max_relays`` in all; the last element to leave
    with work left hands its place on (see :mod:`zotsink._run.relay`). ``max_attempts``
    defaults to :data:`RELAY_MAX_ATTEMPTS` there, unless the ledger records one: a task
    that always fails must not keep a chain alive.
    """
    refuse_nested_run()
    o = checked_options(
        tasks,
        out,
        command,
        call=call,
        function=function,
        index=index,
        chunk=chunk,
        base=base,
        jobs=jobs,
        shell=shell,
        rerun=rerun,
        retries=retries,
        task_timeout=task_timeout,
        grace=grace,
        max_attempts=max_attempts,
        halt_after=halt_after,
        new_settings=new_settings,
        ledger=ledger,
        log=log,
        write=write_options(
            format=format,
            columns=columns,
            kv=kv,
            stamp=stamp,
            lock=lock,
            sync=sync,
            timeout=timeout,
            batch_bytes=batch_bytes,
            flush_interval=flush_interval,
        ),
        env=dict(os.environ if env is None else env),
        stopper=stopper,
        progress=progress,
        pull=pull or follow,
        follow=follow,
        idle=idle,
        deadline=deadline,
        task_time=task_time,
        relay=relay,
        relay_script=relay_script,
        max_relays=max_relays,
    )
    return _run(o)


def _run(o: RunOptions) -> RunReport:
    """A run, step by step."""
    opts = o.write
    fmt = format_for(o.out, opts.format)
    template = make_encoder(o.out, fmt, opts.columns, opts.stamp, adopt=opts.kv is not None)
    mode: Mode = "follow" if o.follow else "pull" if o.pull else "chunk"
    ledger = Ledger(
        o.ledger_path,
        tasks=o.tasks,
        lock=opts.lock,
        timeout=opts.timeout,
        env=o.env,
        stopper=o.stopper,
    )
    try:
        judge = Judge(wait=SCHEDULER_WAIT)
        view = ledger.open(judge)
        try:
            max_attempts = _settings(o, fmt, ledger, view)
        except UsageError as e:  # other settings than the recorded ones, another list
            if o.pull:
                _refused(ledger, e)
            raise
    except BaseException:
        ledger.close()
        raise
    queue = TaskQueue(mode, rerun=o.rerun)
    scope = {t.num: t.line for t in _element_tasks(o)} if mode == "chunk" else None
    looker = Looker(
        ledger,
        tasks=o.tasks,
        out=o.out,
        began=time.time(),
        max_attempts=max_attempts,
        rerun=o.rerun,
        scope=scope,
    )
    selected = 0
    ok_before = _ok_in_out(ledger, o.out)  # a pull run's tasks ok already
    if scope is not None:
        selected = len(scope)
        looker.verify(view)  # an edited list: another line's history says nothing
        first = looker.look(deep=True, wait=SCHEDULER_WAIT)
        queue.add(Candidate(*c) for c in first.free)
        queue.learn((), first.held)
        queue.settle_chunk(len(looker.ok), looker.given_up, len(looker.elsewhere))
    if view.control.closed:
        queue.close()
    halting = Halting(o.jobs, o.halt_after, again=systematic(_recent_ends(o.ledger_path), o.jobs))
    if halting.probing:
        queue.limit(1)
    relay = _relay(o, ledger, view) if o.relay is not None else None
    pool = _pool(o, queue, ledger, looker, template, halting, max_attempts, relay)
    try:
        pool.loop()
    finally:
        pool.close()
    with contextlib.suppress(ZotsinkError):
        ledger.look()
    if scope is None:
        # a pull run's share of the whole list: every task some run claimed by the end,
        # and those ok when it began
        selected = max(view.known(), queue.total)
        queue.settle_chunk(min(ok_before, selected), (), 0)
    ending = _ending(o, ledger, scope, max_attempts, pool.state, ok_before)
    return _report(o, selected, queue, pool, ledger, max_attempts, ending, relay)


#: ``--max-attempts`` of a relay run when neither given nor recorded: a task that fails
#: alike in every element is given up, and is no work that keeps the chain alive.
RELAY_MAX_ATTEMPTS: Final = 3


def _relay(o: RunOptions, ledger: Ledger, view: LedgerView) -> Relay:
    """A relay run's decisions: it joins its list's chain (with its first append), and a
    stop that came while the successor it is was queued is for it too."""
    assert o.relay is not None
    by = o.env.get(RELAY_VAR, "")
    run, dot, ticket = by.rpartition(".")
    if dot:
        at = view.chain.decided_at(run, ticket)
        if at is not None:
            ledger.stopped_since(at)
    ledger.join(join_note(o.relay, o.max_relays, by if dot else ""))
    plan = RelayPlan(o.relay, o.max_relays, ledger.job_key, ledger.run_id)
    return Relay(plan, now=time.monotonic())


def _refused(ledger: Ledger, e: UsageError) -> None:
    """A pull run in a batch job refused for its settings (a runner a cron line or a chain
    submitted) says so in the ledger too: a job's output is often /dev/null, and ``status``
    shows it. Nothing when that fails as well."""
    if not ledger.job_key:
        return
    with contextlib.suppress(ZotsinkError, OSError):
        ledger.refused(str(e))


class _Ending(NamedTuple):
    """What the ledger says of a run's tasks as it ends (see :func:`_ending`)."""

    left: tuple[int, ...] = ()
    to_run: int | None = None
    elsewhere: int | None = None  # a pull run's: done or held by other runs since it began
    unknown: int = 0


def _ending(
    o: RunOptions,
    ledger: Ledger,
    scope: Mapping[int, str] | None,
    max_attempts: int | None,
    state: RunState,
    ok_before: int,
) -> _Ending:
    """What a run leaves as it ends, from its view of the ledger judged now: its chunk's
    tasks, or a pull run's below the cursor that are not ok (found at C speed).

    ``left``: those that wait for a run with no verdict (never begun, lost, interrupted)
    and that no run holds that lives or that nothing can tell of, unless the run ended
    early on purpose (a stop signal, a halt, its deadline: each says so itself); after
    ``zotsink stop``, ``to_run`` counts instead what of its chunk, or of the whole list,
    waits for a run. ``unknown``: tasks held by runs nothing here can tell of. A pull run's
    ``elsewhere``: tasks other runs ended ok since it began, or hold."""
    view = ledger.view
    judge = Judge(wait=SCHEDULER_WAIT)
    if scope is not None:
        nums = [n for n in scope if view.state(n) != "ok"]
    else:
        nums = view.unsettled(ledger.cursor.next)
    view.settle(judge, max_attempts=max_attempts, nums=nums)
    unknown = sum(1 for n in nums if n in view.unknown)
    elsewhere = None
    if scope is None:
        me = view.run_index.get(ledger.run_id, -2)
        held = sum(
            1 for n in nums if view.owner[n] != me and view.state(n) in ("claimed", "running")
        )
        mine_ok = sum(1 for s in state.final.values() if s == "ok")
        elsewhere = max(view.ok_count() - ok_before - mine_ok, 0) + held
    if state.stopped_by_row:
        keys = scope if scope is not None else task_lines(o.tasks)[0]
        view.settle(judge, max_attempts=max_attempts, nums=keys)
        waiting = sum(1 for n in keys if view.state(n) in TO_RUN)
        return _Ending((), waiting, elsewhere, unknown)
    cut_short = (
        (o.stopper is not None and o.stopper.signum is not None)
        or state.halted is not None
        or state.queue.out_of_time
    )
    left = () if cut_short else tuple(sorted(n for n in nums if view.state(n) in _NO_VERDICT))
    return _Ending(left, None, elsewhere, unknown)


#: The states of a task no run gave a verdict on and none runs: it waits for a run.
_NO_VERDICT: Final = frozenset({"never", "lost", "interrupted"})


def _ok_in_out(ledger: Ledger, out: str) -> int:
    """How many tasks are ok with their records still in OUT (all that are ok, unless OUT
    was renamed, replaced, emptied or cut since: then the ledger is read anew for the parts
    of OUT they claim)."""
    found = out_file(out)
    if ledger.view.out_holds(found):
        return ledger.view.ok_count()
    view = ledger.whole_view()
    nums = view.ok_tasks(len(view.code))
    view.settle(None, nums=nums, out=found)
    return sum(1 for n in nums if view.state(n) == "ok")


def _settings(o: RunOptions, fmt: str, ledger: Ledger, view: LedgerView) -> int | None:
    """This run's settings, checked against the ledger's recorded ones (see
    :func:`~zotsink._run.settings.reconcile`) and given to the ledger; the max_attempts that
    applies (given, else recorded)."""
    opts = o.write
    given = o.max_attempts
    if given is None and o.relay is not None and recorded_max_attempts(view.settings) is None:
        given = RELAY_MAX_ATTEMPTS
    settings = run_settings(
        o.tasks,
        o.command,
        shell=o.shell,
        array=o.index is not None,
        chunk=o.chunk,
        base=o.base,
        format=fmt,
        columns=opts.columns,
        kv=opts.kv,
        stamp=opts.stamp,
        max_attempts=given,
        call=o.call,
        array_job=job_id(o.env) if task_id(o.env) else "",
    )
    # where OUT is, for status and missing --ledger to check ok rows against OUT even when
    # no file of OUT's name is left (rotated away) or the ledger has a name of its own:
    # relative to the ledger, so that the two moved together still find each other
    here = os.path.dirname(os.path.abspath(o.ledger_path))
    settings["out"] = os.path.relpath(os.path.abspath(o.out), here)
    # the task list, found the same way: one OUT holds the records of one list's tasks
    settings["list"] = os.path.relpath(os.path.abspath(o.tasks), here)
    if o.pull:
        # chunked and pull runs share a ledger: pull is not compared, only recorded (for
        # status and missing), and each task runs once either way
        settings["pull"] = "follow" if o.follow else "yes"
    recorded = view.settings
    _one_list(o, recorded, here)
    settings = reconcile(
        recorded,
        settings,
        path=o.ledger_path,
        array=o.index is not None,
        new_settings=o.new_settings,
        # settings under which no task ended ok bind nobody (a typo in a first run)
        ended_ok=lambda: ended_ok_since_settings(view),
    )
    ledger.record(settings, recorded)
    return recorded_max_attempts(settings)


def _one_list(o: RunOptions, recorded: Mapping[str, str] | None, here: str) -> None:
    """Refuse a run of another task list into an OUT that holds a list's records: task N
    of the ledger is line N of one list, and the committed view of OUT would show the new
    list's tasks in place of the old ones' (their records hidden, ``status`` of the old list
    fooled). The recorded list is the one its runs recorded (relative to the ledger); one
    that is gone or renamed since cannot be told from this one, and is let be, as is a copy
    of it byte for byte (a list staged to a node's own disk)."""
    named = (recorded or {}).get("list")
    if not named:
        return
    theirs = os.path.join(here, named)
    try:
        same = os.path.samefile(theirs, o.tasks) or _same_bytes(theirs, o.tasks)
    except OSError:
        return  # gone, or renamed: nothing to tell this list from
    if not same:
        raise UsageError(
            f"{o.out} holds the records of the tasks of {os.path.relpath(theirs)} (its ledger "
            f"{o.ledger_path} says so), and this run's task list is {o.tasks}: task N is line "
            "N of one list, so the records of the first would vanish from the committed view. "
            "Give this list an OUT of its own (or add its lines to the first list: `zotsink "
            f"add {os.path.relpath(theirs)} < {o.tasks}`)",
            path=o.ledger_path,
        )


def _same_bytes(a: str, b: str) -> bool:
    """Whether two files hold the same bytes."""
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def _element_tasks(o: RunOptions) -> list[Task]:
    """The tasks of this array element's chunk (every runnable one without an index)."""
    wanted = chunk_range(o.index, o.chunk, o.base) if o.index is not None else None
    todo, count = read_tasks(o.tasks, only=wanted)  # only the chunk's tasks become objects
    if wanted is not None and wanted.start > count:
        # an array submitted with too many elements (or the wrong --chunk/--base) must not
        # look like a finished run
        raise UsageError(
            f"array index {o.index} runs tasks {wanted.start}-{wanted.stop - 1}, but "
            f"{o.tasks} has {count} lines: check the array range, --chunk {o.chunk} "
            f"and --base {o.base} (`zotsink missing TASKS --ledger LEDGER --array` gives the "
            "spec to submit)"
        )
    return todo


#: Bytes at the ledger's end read for the last ended tasks (see _recent_ends).
_RECENT_BYTES = 1 << 18


def _recent_ends(path: str) -> list[tuple[str, object]]:
    """The last ended tasks in the ledger's last rows, oldest first: each task's latest end's
    status and what its failure is grouped by (its exit or signal and its note: the ledger
    keeps no stderr). Empty when there is no ledger yet; a hint, not a count."""
    try:
        fd, st = open_regular(path)  # a FIFO planted at the name must not hang the start
    except OSError:
        return []
    if fd < 0:
        return []  # no ledger: the ledger's own writer says so, in its words
    try:
        rows = last_rows(fd, st.st_size, _RECENT_BYTES)
    finally:
        os.close(fd)
    latest: dict[int, tuple[str, object]] = {}
    for row in rows:
        if row.kind != "end":
            continue
        notes = parse_notes(row.fields["notes"])
        for it in parse_end_items(row.fields["items"]):
            latest.pop(it.num, None)  # its latest end, in the order it came
            note = notes.get(f"{it.num}.{it.attempt}", "")
            latest[it.num] = (it.status, end_key(it.status, it.code, note)[1])
    return list(latest.values())


def _pool(
    o: RunOptions,
    queue: TaskQueue,
    ledger: Ledger,
    looker: Looker,
    template: Encoder,
    halting: Halting,
    max_attempts: int | None,
    relay: Relay | None = None,
) -> Pool:
    """The pool: the decisions, the backend, OUT and the log through the locked append path."""
    opts = o.write

    def _outlet(writer: Writer) -> Outlet:
        return Outlet(
            writer,
            timeout=opts.timeout,
            batch_bytes=opts.batch_bytes,
            flush_interval=opts.flush_interval,
            stopper=o.stopper,
        )

    out = _outlet(Writer(o.out, lock=opts.lock, sync=opts.sync, header=template.header_line()))
    # the log is this user's own, as the ledger is: never through a link, never planted
    log = _outlet(
        Writer(o.log_path, lock=opts.lock, sync=opts.sync, side_file=True, mode=side_mode(o.out))
    )
    output = Output(template, out, log, opts.kv)
    env = o.env
    started = proc_start(os.getpid())
    if started is not None:  # every process of the run carries its mark (see .alive)
        env = {**env, RUN_VAR: run_mark(os.getpid(), started)}
    poller = select.poll()
    load_limit = LOAD_TIMEOUT if o.task_timeout is None else o.task_timeout
    backend: Commands | Calls
    if o.call is not None:
        backend = Calls(
            o.call, jobs=o.jobs, env=env, output=output, poller=poller, load_limit=load_limit
        )
    else:
        backend = Commands(
            o.command, shell=o.shell, jobs=o.jobs, env=env, output=output, poller=poller
        )
    now = time.monotonic()
    deadline = None if o.deadline is None else now + (o.deadline - time.time())
    plan = Plan(
        calls=o.call is not None,
        jobs=o.jobs,
        retries=o.retries,
        task_timeout=o.task_timeout,
        grace=o.grace,
        idle=o.idle,
        task_time=o.task_time,
        deadline=deadline,
        commit_bytes=opts.batch_bytes,
        load_limit=load_limit,
        call=o.call or "",
        log=o.log_path,
        max_attempts=max_attempts,
    )
    state = RunState(plan, queue, halting=halting, relay=relay, now=now, signame=signame)
    desk = None
    if relay is not None:
        desk = Desk(
            ledger,
            relay.plan,
            backend=relay_backend(o.env, o.relay_script),
            env=o.env,
            script=o.relay_script,
            lock=opts.lock,
            timeout=opts.timeout,
        )
    return Pool(
        state=state,
        backend=backend,
        poller=poller,
        ledger=ledger,
        looker=looker,
        output=output,
        stopper=o.stopper,
        progress=o.progress,
        desk=desk,
    )


def _report(
    o: RunOptions,
    selected: int,
    queue: TaskQueue,
    pool: Pool,
    ledger: Ledger,
    max_attempts: int | None,
    ending: _Ending,
    relay: Relay | None = None,
) -> RunReport:
    state = pool.state
    relayed = None
    if relay is not None:
        relayed = {
            "submitted": list(relay.submitted),
            "failures": list(relay.failures),
            "said": list(relay.said),
        }
    out, lg, bk = pool.output.out.outcome(), pool.output.log.outcome(), ledger.outcome()
    return RunReport(
        selected=selected,
        skipped=queue.skipped,
        started=state.started,
        states=state.final,
        records=out.records or 0,
        rejected=out.rejected,
        spilled=out.spilled + lg.spilled + bk.spilled,
        spill_paths=out.spill_paths + lg.spill_paths + bk.spill_paths,
        rejects_path=out.rejects_path,
        log_path=o.log_path,
        ledger_path=o.ledger_path,
        signal=o.stopper.signum if o.stopper is not None else None,
        error=out.error or lg.error or state.error or pool.ledger_error,
        outcomes=(out, lg, bk),
        elsewhere=queue.elsewhere if ending.elsewhere is None else ending.elsewhere,
        halted=state.halted,
        given_up=len(queue.given_up),
        max_attempts=max_attempts,
        taken_over=queue.taken_over,
        unknown=ending.unknown,
        out_of_time=queue.out_of_time,
        idled_out=state.idled_out,
        stopped_by_row=state.stopped_by_row,
        passed=tuple(state.passed),
        left=ending.left,
        to_run=ending.to_run,
        relay=relayed,
    )
