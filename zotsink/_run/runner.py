"""``run_tasks`` and ``task_states``: the Python side of ``zotsink run`` and ``zotsink status``.

``run_tasks`` is a sequence of named steps: the option checks (:mod:`.options`), this array
element's tasks (:func:`_element_tasks`), the ledger's word on them and the recorded
settings, the queue of the tasks to run (:class:`~zotsink._run.queue.TaskQueue`), the
:class:`~zotsink._run.pool.Pool` with OUT and the log opened through the locked append path
(:func:`_pool`), and the report (:func:`_report`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

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
from .._ledgerfile import parse_row, read_ledger, row_blocks, rows_in
from ..errors import UsageError
from .alive import RUN_VAR, proc_start, run_mark
from .attempt import Output
from .failures import end_key
from .halting import Halting, systematic
from .ledger import Ledger
from .options import RunOptions, checked_options
from .pool import Pool, Progress, Tasking
from .queue import ChunkSource, FollowSource, PullSource, TaskQueue, TaskSource
from .settings import ended_ok_since_settings, reconcile, recorded_max_attempts, run_settings
from .states import TaskState, begin_scan, states_of
from .status import tasks_left
from .tasks import Task, read_tail, read_tasks, task_of
from .worker import refuse_nested_run

__all__ = ["RunReport", "run_tasks", "task_states"]


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
    stopped: bool = False  # `zotsink stop` ended the run
    left: int = 0  # then: its tasks that wait for a run (not ok, given up or running)

    def to_dict(self) -> dict[str, object]:
        d = self._asdict()
        d["states"] = {str(k): v for k, v in self.states.items()}
        d["spill_paths"] = list(self.spill_paths)
        d["error"] = None if self.error is None else str(self.error)
        d["outcomes"] = [o.to_dict() for o in self.outcomes]
        return d


def task_states(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> dict[int, TaskState]:
    """The state of every runnable task of ``tasks`` according to ``ledger``."""
    todo, _ = read_tasks(tasks)
    return states_of({t.num: t.line for t in todo}, read_ledger(ledger, lock=lock, timeout=timeout))


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
    )
    return _run(o)


def _run(o: RunOptions) -> RunReport:
    """A run, step by step."""
    opts = o.write
    fmt = format_for(o.out, opts.format)
    template = make_encoder(o.out, fmt, opts.columns, opts.stamp, adopt=opts.kv is not None)
    ledger = Ledger(
        o.ledger_path, lock=opts.lock, timeout=opts.timeout, env=o.env, stopper=o.stopper
    )
    source: TaskSource[Task]
    if o.follow:
        source = FollowSource(lambda at: read_tail(o.tasks, at), task_of)
    elif o.pull:
        source = PullSource(lambda: read_tasks(o.tasks)[0])
    else:
        source = ChunkSource(_element_tasks(o))
    queue = TaskQueue(source, given_up=ledger.gives_up, rerun=o.rerun, take_over=o.pull)
    selected = queue.refill()
    if o.deadline is not None:
        queue.deadline = time.monotonic() + (o.deadline - time.time())
        queue.task_time = o.task_time or 0.0
    begun = begin_scan(
        o.ledger_path,
        queue.keys,
        lock=opts.lock,
        timeout=opts.timeout,
        stopper=o.stopper,
        out=o.out,
    )
    states, seen, recorded, control = begun
    # -- the settings: recorded, compared -----------------------------------------------
    index, max_attempts, new_settings = o.index, o.max_attempts, o.new_settings
    settings = run_settings(
        o.tasks,
        o.command,
        shell=o.shell,
        array=index is not None,
        chunk=o.chunk,
        base=o.base,
        format=fmt,
        columns=opts.columns,
        kv=opts.kv,
        stamp=opts.stamp,
        max_attempts=max_attempts,
        call=o.call,
        array_job=job_id(o.env) if task_id(o.env) else "",
    )
    # where OUT is, for status and missing --ledger to check ok rows against OUT even when
    # no file of OUT's name is left (rotated away) or the ledger has a name of its own:
    # relative to the ledger, so that the two moved together still find each other
    settings["out"] = os.path.relpath(
        os.path.abspath(o.out), os.path.dirname(os.path.abspath(o.ledger_path))
    )
    if o.pull:
        # chunked and pull runs share a ledger: pull is not compared, only recorded (for
        # status and missing), and each task runs once either way
        settings["pull"] = "follow" if o.follow else "yes"
    try:
        settings = reconcile(
            recorded,
            settings,
            path=o.ledger_path,
            array=index is not None,
            new_settings=new_settings,
            # settings under which no task ended ok bind nobody (a typo in a first run)
            ended_ok=lambda: ended_ok_since_settings(
                o.ledger_path, lock=opts.lock, timeout=opts.timeout
            ),
        )
    except UsageError:
        ledger.close()
        raise
    max_attempts = recorded_max_attempts(settings)  # given, else recorded
    # -- begin: what the ledger said of this run's tasks --------------------------------
    ledger.begin(
        queue.keys,
        states,
        seen,
        rerun=o.rerun,
        settings=settings,
        recorded=recorded,
        max_attempts=max_attempts,
        control=control,
    )
    queue.learn(states)
    if control.closed and isinstance(source, FollowSource):
        source.close(control.closed_lines)
    halting = Halting(o.jobs, o.halt_after, again=systematic(_recent_ends(o.ledger_path), o.jobs))
    if halting.probing:
        queue.limit(1)
    pool = _pool(o, queue, ledger, template, halting)
    try:
        pool.loop()
    finally:
        pool.close()
    if o.follow:
        selected = len(queue.keys)
    return _report(o, selected, queue, pool, ledger, max_attempts)


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
    """The last ended tasks in the ledger's last rows, oldest first: each task's latest end
    row's status and what its failure is grouped by (its exit, signal and note: the ledger
    keeps no stderr). Empty when there is no ledger yet; a hint, not a count."""
    try:
        fd, st = open_regular(path)  # a FIFO planted at the name must not hang the start
    except OSError:
        return []
    if fd < 0:
        return []  # no ledger: the ledger's own writer says so, in its words
    try:
        size = st.st_size
        start = max(size - _RECENT_BYTES, 0)
        data = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    lines = [line for _n, _at, block in row_blocks((data,), start=start) for line in rows_in(block)]
    if start:
        lines = lines[1:]  # it may be the end of a row
    latest: dict[int, tuple[str, object]] = {}
    for line in lines:
        if not line.startswith(b"end\t"):
            continue  # only end rows are split
        row = parse_row(line)
        if row is None:
            continue
        latest.pop(row.tasknum, None)  # its latest end row, in the order it came
        why = end_key(row.status, row.exit, row.signal, row.note, row.key)
        latest[row.tasknum] = (row.status, why)
    return list(latest.values())


def _pool(
    o: RunOptions,
    queue: TaskQueue[Task],
    ledger: Ledger,
    template: Encoder,
    halting: Halting | None = None,
) -> Pool:
    """The pool, with OUT and the log opened through the locked append path."""
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
        Writer(
            o.log_path,
            lock=opts.lock,
            sync=opts.sync,
            side_file=True,
            mode=side_mode(o.out),
        )
    )
    env = o.env
    started = proc_start(os.getpid())
    if started is not None:  # every process of the run carries its mark (see .alive)
        env = {**env, RUN_VAR: run_mark(os.getpid(), started)}
    how = Tasking(
        o.command, o.shell, o.jobs, o.retries, o.task_timeout, o.grace, opts.kv, env, o.call
    )
    return Pool(
        queue=queue,
        how=how,
        ledger=ledger,
        output=Output(template, out, log, opts.kv),
        commit_bytes=opts.batch_bytes,
        stopper=o.stopper,
        progress=o.progress,
        idle=o.idle,
        task_time=o.task_time,
        halting=halting,
    )


def _report(
    o: RunOptions,
    selected: int,
    queue: TaskQueue[Task],
    pool: Pool,
    ledger: Ledger,
    max_attempts: int | None,
) -> RunReport:
    out, lg, bk = pool.output.out.outcome(), pool.output.log.outcome(), ledger.outcome()
    return RunReport(
        selected=selected,
        skipped=queue.skipped,
        started=pool.started,
        states=pool.final,
        records=out.records or 0,
        rejected=out.rejected,
        spilled=out.spilled + lg.spilled + bk.spilled,
        spill_paths=out.spill_paths + lg.spill_paths + bk.spill_paths,
        rejects_path=out.rejects_path,
        log_path=o.log_path,
        ledger_path=o.ledger_path,
        signal=o.stopper.signum if o.stopper is not None else None,
        error=out.error or lg.error or pool.ledger_error,
        outcomes=(out, lg, bk),
        elsewhere=queue.elsewhere,
        halted=pool.halted,
        given_up=len(queue.given_up),
        max_attempts=max_attempts,
        taken_over=queue.taken_over,
        unknown=len(queue.unknown),
        out_of_time=queue.out_of_time,
        idled_out=pool.idled_out,
        stopped=ledger.stopped,
        left=tasks_left(ledger, queue.keys) if ledger.stopped else 0,
    )
