"""``run_tasks`` and ``task_states``: the Python side of ``zotsink run`` and ``zotsink status``.

``run_tasks`` picks this array element's tasks, drops those the ledger says are ``ok``, and
hands the rest to the :class:`~zotsink._run.pool.Pool` with OUT, the log and the ledger
opened through the locked append path.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .._arrays import chunk_range, scheduler_index
from .._core.fileio import same_file
from .._core.header import make_encoder
from .._core.options import BATCH_BYTES, MAX_TIMEOUT, check_seconds, write_options
from .._core.outlet import Outcome, Outlet
from .._core.records import format_for
from .._core.sidefiles import side_mode
from .._core.stop import Stopper
from .._core.writer import Writer
from .._ledgerfile import read_ledger
from ..errors import UsageError
from .ledger import Ledger
from .pool import Pool, Progress, Tasking
from .settings import reconcile, recorded_max_attempts, run_settings
from .states import TaskState, given_up, read_begin, states_of
from .tasks import read_tasks
from .worker import call_spec, function_spec, refuse_nested_run

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


def _check_run_options(retries: int, grace: float, task_timeout: float | None) -> None:
    """run's own options, worded as the shared ones are (see write_options)."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise UsageError(f"retries (--retries) must be a whole number >= 0, not {retries!r}")
    check_seconds("grace", grace, MAX_TIMEOUT)
    if task_timeout is not None and check_seconds("task_timeout", task_timeout, MAX_TIMEOUT) == 0:
        raise UsageError("task_timeout (--task-timeout) must be more than 0 seconds, not 0")


def _jobs(jobs: int | str, env: Mapping[str, str]) -> int:
    if jobs == "auto":
        cpus = env.get("SLURM_CPUS_PER_TASK", "")
        if cpus.isdigit() and int(cpus) > 0:
            return int(cpus)
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    try:
        n = int(jobs)
    except ValueError:
        raise UsageError(f"--jobs must be a number or auto, not {jobs!r}") from None
    if n < 1:
        raise UsageError(f"--jobs must be at least 1, not {n}")
    return n


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

    The ledger records the settings (:func:`~zotsink._run.settings.run_settings`); a run
    whose settings differ from the recorded ones raises :class:`UsageError` before any task
    starts, unless ``new_settings`` (:func:`~zotsink._run.settings.reconcile`).
    ``max_attempts`` (else the recorded one): a task whose failed, killed or timed-out
    attempts reached it is ``given-up`` and not started again.
    """
    refuse_nested_run()
    env = dict(os.environ if env is None else env)
    out = os.fspath(out)
    if function is not None:
        if call is not None:
            raise UsageError("give call or function, not both")
        call = function_spec(function)
    if call is not None:
        if command or shell:
            raise UsageError(
                "--call runs a Python function per task: give no CMD and no --shell with it"
            )
        call_spec(call)
    elif shell and command:
        raise UsageError("--shell runs each task line as a command: give no CMD with it")
    elif not shell and not command:
        raise UsageError(
            "give the command to run after --, --call FILE.py:FUNC, or --shell for a list "
            "of commands"
        )
    opts = write_options(
        format=format,
        columns=columns,
        kv=kv,
        stamp=stamp,
        lock=lock,
        sync=sync,
        timeout=timeout,
        batch_bytes=batch_bytes,
        flush_interval=flush_interval,
    )
    _check_run_options(retries, grace, task_timeout)
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise UsageError(
            f"max_attempts (--max-attempts) must be a whole number >= 1, not {max_attempts!r}"
        )
    njobs = _jobs(jobs, env)
    ledger_path = os.fspath(ledger) if ledger is not None else out + ".ledger"
    log_path = os.fspath(log) if log is not None else out + ".log"
    if len({os.path.abspath(p) for p in (out, ledger_path, log_path)}) < 3:
        raise UsageError("OUT, --ledger and --log must be three different files")
    named = (
        ("OUT", out, "OUT"),
        ("the ledger", ledger_path, "--ledger"),
        ("the log", log_path, "--log"),
    )
    for what, path, opt in named:
        if same_file(os.fspath(tasks), path):
            # `zotsink run tasks.txt tasks.txt -- CMD` would append to its own task list,
            # and the next array element would run the output as tasks
            raise UsageError(
                f"the task list {os.fspath(tasks)} is also {what}: give {opt} another name"
            )

    if index is None:
        index = scheduler_index(env)
    wanted = chunk_range(index, chunk, base) if index is not None else None
    todo, count = read_tasks(tasks, only=wanted)  # only the chunk's tasks become objects
    if wanted is not None and wanted.start > count:
        # an array submitted with too many elements (or the wrong --chunk/--base) must not
        # look like a finished run
        raise UsageError(
            f"array index {index} runs tasks {wanted.start}-{wanted.stop - 1}, but "
            f"{os.fspath(tasks)} has {count} lines: check the array range, --chunk {chunk} "
            f"and --base {base} (`zotsink missing TASKS --ledger LEDGER --array` gives the "
            "spec to submit)"
        )
    fmt = format_for(out, opts.format)
    template = make_encoder(out, fmt, opts.columns, opts.stamp, adopt=opts.kv is not None)
    book = Ledger(ledger_path, lock=opts.lock, timeout=opts.timeout, env=env, stopper=stopper)
    keys = {t.num: t.line for t in todo}
    states, seen, recorded = read_begin(
        ledger_path, keys, lock=opts.lock, timeout=opts.timeout, stopper=stopper
    )
    settings = run_settings(
        tasks,
        command,
        shell=shell,
        array=index is not None,
        chunk=chunk,
        base=base,
        format=fmt,
        columns=opts.columns,
        kv=opts.kv,
        stamp=opts.stamp,
        max_attempts=max_attempts,
        call=call,
    )
    try:
        settings = reconcile(
            recorded, settings, path=ledger_path, array=index is not None, new_settings=new_settings
        )
    except UsageError:
        book.close()
        raise
    max_attempts = recorded_max_attempts(settings)  # given, else recorded
    book.begin(
        keys,
        states,
        seen,
        rerun=rerun,
        settings=settings,
        recorded=recorded,
        max_attempts=max_attempts,
    )
    gave_up = {n for n, st in states.items() if given_up(st, max_attempts)}
    queue = deque(
        t for t in todo if (rerun or states[t.num].state != "ok") and t.num not in gave_up
    )

    def _outlet(writer: Writer) -> Outlet:
        return Outlet(
            writer,
            timeout=opts.timeout,
            batch_bytes=opts.batch_bytes,
            flush_interval=opts.flush_interval,
            stopper=stopper,
        )

    skipped = len(todo) - len(queue) - len(gave_up)
    runner = Pool(
        queue=queue,
        how=Tasking(tuple(command), shell, njobs, retries, task_timeout, grace, opts.kv, env, call),
        book=book,
        template=template,
        out=_outlet(Writer(out, lock=opts.lock, sync=opts.sync, header=template.header_line())),
        # the log is this user's own, as the ledger is: never through a link, never planted
        log=_outlet(
            Writer(
                log_path,
                lock=opts.lock,
                sync=opts.sync,
                side_file=True,
                mode=side_mode(out),
            )
        ),
        stopper=stopper,
        progress=progress,
    )
    try:
        runner.loop()
    finally:
        runner.close()
    o, lg, bk = runner.out.outcome(), runner.log.outcome(), book.outcome()
    return RunReport(
        selected=len(todo),
        skipped=skipped,
        started=runner.started,
        states=runner.final,
        records=o.records or 0,
        rejected=o.rejected,
        spilled=o.spilled + lg.spilled + bk.spilled,
        spill_paths=o.spill_paths + lg.spill_paths + bk.spill_paths,
        rejects_path=o.rejects_path,
        log_path=log_path,
        ledger_path=ledger_path,
        signal=stopper.signum if stopper is not None else None,
        error=o.error or lg.error or runner.ledger_error,
        outcomes=(o, lg, bk),
        elsewhere=runner.elsewhere - len(book.given_up),
        halted=runner.halted,
        given_up=len(gave_up | book.given_up),
        max_attempts=max_attempts,
    )
