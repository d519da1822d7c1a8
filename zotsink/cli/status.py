"""``zotsink status``: where the tasks of a task list stand, read from the ledger."""

from __future__ import annotations

import shlex
import sys
import time
from typing import TYPE_CHECKING, Final

import click

from ._common import (
    CONTEXT,
    counted,
    end_at_stop_signals,
    json_option,
    print_json,
    read_lock_options,
    run_api,
    stdout_closed,
)
from .status_words import advice_lines, by_table, duration, progress_bar, status_lines

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from .. import Advice, FailedTask, FailureGroup, StatusReport


@click.command("status", context_settings=CONTEXT)
@click.argument("tasks", type=click.Path(dir_okay=False))
@click.argument("out", type=click.Path(), required=False)
@click.option("--ledger", type=click.Path(), help="The ledger [default: OUT.ledger].")
@click.option(
    "--failed",
    is_flag=True,
    help="The failed, killed, timed-out or given-up tasks, grouped by the last line of their "
    "stderr: how many, which tasks, and the first one's line, attempt, exit or signal, "
    "seconds and last stderr lines from the log (a traceback's last frame whole).",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="With --failed: each task, not one of each group of tasks that failed alike.",
)
@click.option(
    "--log",
    type=click.Path(),
    help="With --failed: the tasks' log [default: OUT.log, or the ledger's name with .log].",
)
@click.option(
    "--last",
    type=click.IntRange(0),
    default=5,
    show_default=True,
    metavar="N",
    help="With --failed: stderr lines shown per task (a traceback's last frame and its "
    "exception are shown whole).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write one self-contained page to FILE (inline SVG, no script, no network): the "
    "counts, a timeline of the attempts per host and array element, a histogram of task "
    "times, the failures grouped and the slowest tasks.",
)
@click.option(
    "--refresh",
    type=click.FloatRange(0.1),
    metavar="S",
    help="With --html: write the page again every S seconds until nothing runs or waits to "
    "run (each time whole: a new file renamed over FILE); Ctrl-C or SIGTERM stops.",
)
@click.option(
    "--advise",
    is_flag=True,
    help="What to ask the scheduler for next time, from what the attempts used: memory per "
    "element (the 95th percentile of the peaks x --jobs x 1.25), CPUs, and time for "
    "--tasks-per-element tasks; the directives on stdout, how they were reached on stderr.",
)
@click.option(
    "--scheduler",
    type=click.Choice(["slurm", "sge", "pbs"]),
    default="slurm",
    show_default=True,
    help="With --advise: the directives' form (#SBATCH, Grid Engine #$, #PBS).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1),
    metavar="N",
    help="With --advise: tasks an element runs at a time [default: the recorded --jobs, else "
    "the most an element ran at a time].",
)
@click.option(
    "--tasks-per-element",
    type=click.IntRange(1),
    metavar="N",
    help="With --advise: tasks an element runs in all [default: the recorded --chunk, else "
    "the most an element ran].",
)
@click.option(
    "--by",
    type=click.Choice(["host", "job", "element"]),
    help="A table of the attempts per host, array job or array element (JOB[INDEX]): "
    "attempts, ok, not ok, running, mean and longest seconds.",
)
@click.option(
    "--waiting",
    is_flag=True,
    help="Print nothing; exit 0 when tasks wait for a run (not ok, not given up, not "
    "running), 1 when none does: the test of a cron line that submits a runner.",
)
@click.option(
    "--job-ids",
    "list_jobs",
    is_flag=True,
    help="Print the scheduler's jobs whose runs wrote to the ledger, one per line "
    "(CLUSTER:JOB where the scheduler names a cluster), and nothing else; no scheduler is "
    "asked: for a script that checks them before it resubmits.",
)
@json_option
@click.option("--watch", is_flag=True, help="Redraw a progress bar until nothing runs or waits.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1),
    default=2.0,
    show_default=True,
    help="Seconds between redraws with --watch.",
)
@click.option("--slowest", type=click.IntRange(0), default=5, show_default=True, metavar="N")
@click.option(
    "--chunk",
    type=click.IntRange(1),
    help="Tasks per array index, for the indices to resubmit [default: the recorded one].",
)
@click.option(
    "--base", type=int, help="The index of the first chunk [default: the recorded one, else 1]."
)
@read_lock_options
@end_at_stop_signals()
def status_cmd(
    tasks: str,
    out: str | None,
    ledger: str | None,
    failed: bool,
    show_all: bool,
    log: str | None,
    last: int,
    html_path: str | None,
    refresh: float | None,
    advise: bool,
    scheduler: str,
    jobs: int | None,
    tasks_per_element: int | None,
    by: str | None,
    waiting: bool,
    list_jobs: bool,
    as_json: bool,
    watch: bool,
    interval: float,
    slowest: int,
    chunk: int | None,
    base: int | None,
    lock: str,
    timeout: float,
) -> None:
    """Counts by state of the tasks of TASKS, the rate, an ETA and the slowest tasks.

    \b
    The ledger is OUT.ledger (or --ledger PATH). States: ok, failed, killed,
    timeout, interrupted, given-up (failed --max-attempts times), running (a
    start and no end yet: running, or claimed by a run to start next), lost (a
    start whose run process is gone), never (no row). With a chunked run's
    settings recorded in the ledger, the array indices to resubmit (in the
    recorded --chunk and --base, unless given).
    Also the live runs (host, job, pid, tasks done, rate), whether the task list
    is closed (`zotsink close`), and a stop the runs are finishing (`zotsink stop`).
    Exit codes: 0 every task ok, 1 otherwise, 2 usage; with --waiting 0 when
    tasks wait for a run, 1 when none does.
    """
    from .. import task_status

    if out is not None and ledger is not None:
        raise click.UsageError(f"give OUT ({out}) or --ledger PATH ({ledger}), not both")
    if out is None and ledger is None:
        raise click.UsageError(_no_ledger(tasks))
    path = ledger if ledger is not None else f"{out}.ledger"
    where = shlex.join([tasks, out] if out is not None else [tasks, "--ledger", path])
    release = f"zotsink release {where}"
    if list_jobs:
        from .. import ledger_jobs

        jobs = run_api(lambda: ledger_jobs(path, lock=lock, timeout=timeout))
        click.echo("".join(f"{job}\n" for job in jobs), nl=False)
        return
    if refresh is not None and html_path is None:
        raise click.UsageError("--refresh S rewrites the --html FILE page: give --html FILE too")
    if not advise and (jobs is not None or tasks_per_element is not None):
        raise click.UsageError("--jobs and --tasks-per-element size the advice: give --advise")

    def read(**wait: float) -> StatusReport:
        return run_api(
            lambda: task_status(
                tasks,
                path,
                slowest=slowest,
                chunk=chunk,
                base=base,
                fresh=watch,
                lock=lock,
                timeout=timeout,
                **wait,
            )
        )

    report = read()
    if waiting:
        if not report.to_run and report.unknown:
            # nothing waits for a run, yet tasks are held by runs nobody can tell of: a
            # submitter that resubmits on this exit would wait for ever without a word
            click.echo(
                f"zotsink: {counted(len(report.unknown), 'task')} held by runs whose life "
                f"nothing here can tell: `zotsink status {where}` names them and how to "
                "release a run that is gone",
                err=True,
            )
        sys.exit(0 if report.to_run else 1)
    if watch:
        report = _watch(read, interval, report)
    said = _said(report, as_json, release)
    if failed or html_path is not None or by is not None or advise:
        # each of these reads the ledger again: the tally (a few bytes per task, and the
        # task list) is let go first, so that one is in memory at a time
        report = report._replace(states={})
    listed: list[dict[str, Any]] | None = None
    grouped: list[dict[str, Any]] = []
    by_rows: list[dict[str, Any]] = []
    if log is None:
        log = f"{out}.log" if out is not None else _log_beside(path)

    def failures() -> tuple[list[FailedTask], str | None]:
        from .. import failed_tasks, failure_tail

        # more lines than shown: a traceback's last frame is shown whole (failure_tail)
        read_lines = max(last, TAIL_READ) if last else 0
        found, note = run_api(
            lambda: failed_tasks(tasks, path, log, last=read_lines, lock=lock, timeout=timeout)
        )
        return [t._replace(stderr=failure_tail(t.stderr, last)) for t in found], note

    if failed or html_path is not None:
        from .. import group_failures

        found, note = failures()
        if note is not None:
            click.echo(f"zotsink: note: {note}", err=True)
        groups = group_failures(found)
        if not failed:
            pass
        elif as_json:
            listed = [t.to_dict() for t in found]
            grouped = [g.to_dict() for g in groups]
        elif show_all:
            _print_failed(found)
        else:
            _print_groups(groups, _spec_in_full(tasks, path, out, report.pull))
        if html_path is not None:
            page = html_path
            _write_page(page, tasks, path, report, groups, lock, timeout)

            def draw(now: StatusReport) -> StatusReport:
                nonlocal said
                said = _said(now, as_json, release)
                now = now._replace(states={})  # its tally let go (the only reference)
                again = group_failures(failures()[0])
                _write_page(page, tasks, path, now, again, lock, timeout, quiet=True)
                return now

            if refresh is not None:
                report = _refresh(html_path, refresh, read, draw, report)
    if by is not None:
        from .. import attempts_by, iter_attempts

        table = run_api(
            lambda: attempts_by(iter_attempts(tasks, path, lock=lock, timeout=timeout), by)
        )
        if as_json:
            by_rows = [{by: name, **row} for name, row in table]
        else:
            _write(by_table(by, table))
    advice = None
    if advise:
        advice = _advise(tasks, path, report, jobs, tasks_per_element, lock, timeout)
        if not as_json:
            _write(advice.directives(scheduler))
            for line in advice_lines(advice, scheduler):
                click.echo(f"zotsink: {line}", err=True)
    if as_json:
        d = said[1]
        if listed is not None:
            d["failed"] = listed
            d["failure_groups"] = grouped
        if by is not None:
            d["by"] = by_rows
        if advice is not None:
            d["advice"] = advice.to_dict()
        print_json(d)
    if not watch or not as_json:
        for line in said[0]:
            click.echo(f"zotsink: {line}", err=True)
    sys.exit(0 if report.all_ok else 1)


def _said(
    report: StatusReport, as_json: bool, release: str = ""
) -> tuple[list[str], dict[str, Any]]:
    """What the report says at the end, in words and as --json, taken while its tally is
    at hand."""
    return status_lines(report, release), report.to_dict() if as_json else {}


#: stderr lines read per failed task: enough for a traceback's last frame and exception.
TAIL_READ: Final = 30


def _log_beside(ledger: str) -> str:
    """The log `zotsink run` writes beside OUT, found from its ledger's name."""
    return ledger[: -len(".ledger")] + ".log" if ledger.endswith(".ledger") else ledger + ".log"


def _print_failed(found: list[FailedTask]) -> None:
    """Each failed task on stdout: one line, then its last stderr lines, indented."""
    out = []
    for t in found:
        out.append(_task_head(t))
        out += [f"    {line}" for line in t.stderr]
    _write(out)


def _task_head(t: FailedTask) -> str:
    how = f"exit {t.exit}" if t.exit else f"signal {t.signal}" if t.signal else "no exit"
    secs = "" if t.seconds is None else f", {duration(t.seconds)}"
    state = t.status if t.state == t.status else f"{t.status}, {t.state}"
    return f"task {t.tasknum} {state} (attempt {t.attempt}, {how}{secs}): {t.line}"


def _print_groups(groups: list[FailureGroup], in_full: Callable[[str], str]) -> None:
    """Failures that ended alike once: how many, which tasks (a long spec cut, and where to
    get it whole), the first one's tail."""
    out = []
    cut: list[str] = []  # the states of the groups whose spec was cut
    for g in groups:
        first = g.tasks[0]
        if len(g.tasks) > 1:
            spec, more = _capped_spec(g.tasknums)
            if more:
                spec += f",... ({more} more)"
                cut.append(g.state)
            out.append(
                f"{len(g.tasks)} tasks {g.state} alike: {spec}; the first, " + _task_head(first)
            )
        else:
            out.append(_task_head(first))
        out += [f"    {line}" for line in first.stderr]
    _write(out)
    if any(len(g.tasks) > 1 for g in groups):
        click.echo(
            "zotsink: tasks that failed alike (the same last line) are shown once; --all "
            "shows each",
            err=True,
        )
    if cut:
        click.echo(
            f"zotsink: task numbers past the first {SPEC_SHOWN} characters of a spec are "
            f"counted, not shown; in full: {in_full(','.join(dict.fromkeys(cut)))}",
            err=True,
        )


#: Characters of a failure group's array spec printed; the tasks past them are counted.
SPEC_SHOWN: Final = 120


def _capped_spec(nums: list[int]) -> tuple[str, int]:
    """The array spec of ``nums`` cut at a comma within :data:`SPEC_SHOWN` characters, and
    how many tasks the cut left out (0: whole)."""
    from .. import array_spec

    spec = array_spec(nums)
    if len(spec) <= SPEC_SHOWN:
        return spec, 0
    head = spec[: spec.rfind(",", 0, SPEC_SHOWN)]
    shown = 0
    for part in head.split(","):
        low, _, high = part.partition("-")
        shown += int(high or low) - int(low) + 1
    return head, len(nums) - shown


def _spec_in_full(tasks: str, ledger: str, out: str | None, pull: bool) -> Callable[[str], str]:
    """The command that prints the task numbers of the failed tasks in ``states`` whole:
    ``missing --array`` in chunks of one task (a --pull ledger's spec is of elements, so
    there ``status --json``, whose failure groups list them)."""
    import shlex

    if pull:
        where = shlex.quote(out) if out is not None else f"--ledger {shlex.quote(ledger)}"
        return lambda _states: f"`zotsink status {shlex.quote(tasks)} {where} --failed --json`"
    return lambda states: (
        f"`zotsink missing {shlex.quote(tasks)} --ledger {shlex.quote(ledger)} --state "
        f"{states} --array --chunk 1`"
    )


def _write_page(
    html_path: str,
    tasks: str,
    ledger: str,
    report: StatusReport,
    groups: list[FailureGroup],
    lock: str,
    timeout: float,
    *,
    quiet: bool = False,
) -> None:
    """The page into ``html_path``, whole or not at all (a browser may be reading it), drawn
    from one pass over the attempts."""
    from .. import iter_attempts, status_page, write_page

    now = time.time()
    # attempts still running end now while a run lives, else where the run's rows end
    live = report.runs is not None and bool(report.runs.live)
    counted_attempts = _Counted(iter_attempts(tasks, ledger, lock=lock, timeout=timeout))
    page = run_api(
        lambda: status_page(
            report,
            counted_attempts,
            groups,
            title=f"zotsink status {tasks}",
            now=now,
            until=now if live else None,
        )
    )
    run_api(lambda: write_page(html_path, page))
    if not quiet:
        click.echo(
            f"zotsink: wrote {html_path} ({counted(counted_attempts.n, 'attempt')})", err=True
        )


class _Counted:
    """An iterator that counts what passed through it."""

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items
        self.n = 0

    def __iter__(self) -> Iterator[Any]:
        for item in self._items:
            self.n += 1
            yield item


def _refresh(
    html_path: str,
    every: float,
    read: Callable[..., StatusReport],
    draw: Callable[[StatusReport], StatusReport],
    report: StatusReport,
) -> StatusReport:
    """Draw the page again every ``every`` seconds until nothing runs or waits to run, or a
    stop signal (Ctrl-C, SIGTERM) comes; the last report (``draw`` gives it back without
    its tally)."""
    import select

    from .. import Stopper

    with Stopper() as stopper:
        while not report.settled and stopper.signum is None:
            ready, _, _ = select.select([stopper.wakeup_fd], [], [], every)
            if ready or stopper.signum is not None:
                break
            report = draw(read(wait_scheduler=every / 2))
    if stopper.signum is not None:
        click.echo(f"zotsink: stopped refreshing {html_path}", err=True)
    else:
        click.echo(f"zotsink: wrote {html_path}: nothing runs or waits to run", err=True)
    return report


def _advise(
    tasks: str,
    ledger: str,
    report: StatusReport,
    jobs: int | None,
    per_element: int | None,
    lock: str,
    timeout: float,
) -> Advice:
    """The advice, from one pass over the attempts: ``jobs`` given, else recorded, else the
    most slots an element ran in; ``per_element`` given, else the recorded chunk."""
    from .. import Slots, UseTally, iter_attempts

    settings = report.settings or {}
    if jobs is None and settings.get("jobs", "").isdigit():
        jobs = int(settings["jobs"])
    if per_element is None and "chunk" in settings:
        per_element = report.chunk
    slots, tally = Slots(), UseTally()

    def one_pass() -> None:
        for a in iter_attempts(tasks, ledger, lock=lock, timeout=timeout):
            slots.add(a)
            tally.add(a.use())

    run_api(one_pass)
    return tally.advice(jobs=jobs or max(slots.most(), 1), per_element=per_element)


def _write(out: list[str]) -> None:
    try:
        for line in out:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_closed()


def _no_ledger(tasks: str) -> str:
    """Only one file was given: say how it was taken, and what to add."""
    import os
    import shlex

    q = shlex.quote(tasks)
    if os.path.exists(f"{tasks}.ledger"):  # OUT given where the task list goes
        return (
            f"{tasks} was taken as TASKS, the task list, but it is an OUT with its ledger "
            f"beside it ({tasks}.ledger): give the task list first, `zotsink status TASKS {q}`"
        )
    return (
        f"{tasks} was taken as TASKS, the task list; give OUT or --ledger PATH too: "
        f"`zotsink status {q} OUT` reads OUT.ledger, or `zotsink status {q} --ledger PATH`"
    )


def _watch(
    read: Callable[..., StatusReport], interval: float, report: StatusReport
) -> StatusReport:
    """Redraw the bar every ``interval`` until nothing runs or waits to run; Ctrl-C stops
    watching. The scheduler gets at most half an interval per redraw: a slow one delays no
    frame, its answer serves a later one."""
    tty = sys.stderr.isatty()
    took = 0.0  # the last read's time: the next frame is due an interval after this one
    try:
        while True:
            line = progress_bar(report)
            if report.scheduler:
                line += f"; scheduler: {report.scheduler}"
            click.echo(f"\r\033[K{line}" if tty else line, err=True, nl=not tty)
            if report.settled:
                break
            time.sleep(max(0.0, interval - took))
            begun = time.monotonic()
            report = read(wait_scheduler=interval / 2)
            took = time.monotonic() - begun
    except KeyboardInterrupt:
        pass
    if tty:
        click.echo("", err=True)
    return report
