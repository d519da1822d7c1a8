"""``zotsink run`` and ``zotsink status``: the job-array task runner and its ledger."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from ._common import (
    CONTEXT,
    EXIT_LEFT,
    MAX_TIMEOUT,
    Seconds,
    batch_options,
    column_list,
    counted,
    fail,
    lock_options,
    outcome_code,
    quiet_option,
    record_options,
    report_outcome,
    run_api,
    say,
    set_verbosity,
    stamp_list,
    sync_option,
    verbose_option,
)
from ._common import state as cli_state

if TYPE_CHECKING:
    from collections.abc import Callable

    from .. import Progress, RunReport


def _check_dashes(out: str, command: tuple[str, ...]) -> None:
    """``zotsink run tasks.txt -- python proc.py``, OUT forgotten, would take ``python``
    for OUT and write python.ledger and python.log: CMD is all that may follow ``--``."""
    args = cli_state.args
    if "--" in args and list(command) != args[args.index("--") + 1 :]:
        fail(
            f"`--` comes after OUT: here OUT would be {out!r}; write "
            "`zotsink run TASKS OUT -- CMD [ARG ...]`",
            2,
        )


@click.command("run", context_settings=CONTEXT)
@click.argument("tasks", type=click.Path(dir_okay=False))
@click.argument("out", type=click.Path())
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD [ARG ...]")
@click.option(
    "--index",
    type=int,
    help="Array index [default: the scheduler's; outside an array job, every task].",
)
@click.option(
    "--chunk",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Tasks per array index: index N runs lines (N-base)*K+1 ... (N-base+1)*K.",
)
@click.option(
    "--base",
    type=int,
    default=1,
    show_default=True,
    help="The array index that runs the first chunk (0 for --array=0-...).",
)
@click.option(
    "--jobs",
    "-j",
    default="1",
    show_default=True,
    metavar="J|auto",
    help=("Tasks at a time (auto: SLURM_CPUS_PER_TASK, NSLOTS or NCPUS, else the CPUs available)."),
)
@click.option(
    "--call",
    metavar="FILE.py:FUNC",
    help="Call FUNC(line) per task in --jobs long-lived Python workers, not a command; "
    "it returns the records (None, a str of lines, a dict, or a list of those).",
)
@click.option("--shell", is_flag=True, help="Each task line is a command for /bin/sh -c.")
@click.option("--rerun", is_flag=True, help="Run tasks the ledger says are ok again.")
@click.option(
    "--retries",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Retry a failed task up to R times in this run.",
)
@click.option(
    "--task-timeout",
    type=Seconds(MAX_TIMEOUT),
    metavar="SECONDS",
    help="End a task that runs longer (SIGTERM, then SIGKILL); its status: timeout.",
)
@click.option(
    "--grace",
    type=Seconds(MAX_TIMEOUT),
    default=30.0,
    show_default=True,
    help="After a stop signal, seconds the tasks get before SIGTERM and SIGKILL.",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(1),
    metavar="N",
    help="Across resubmissions: a task that failed N times is given up, never run again "
    "[default: the ledger's recorded N, else no limit].",
)
@click.option(
    "--halt-after",
    type=click.IntRange(0),
    metavar="N",
    help="Claim no more tasks after N failed in this run (0: never halt) [default: halt "
    "when the first max(5, 2 x --jobs) tasks to end all failed alike and none was ok].",
)
@click.option(
    "--new-settings",
    is_flag=True,
    help="Record this run's --chunk, --base, format, --columns, --kv, --stamp and CMD in "
    "the ledger instead of refusing ones that differ from the recorded settings.",
)
@click.option(
    "--pull",
    is_flag=True,
    help="Ignore the array index: take the next tasks not done of the whole list until none "
    "is left, then finish the tasks of runs that died. No chunk to choose.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="--pull, and lines appended to TASKS while the run is live are new tasks; end "
    "when the list is closed and all is done (or after --idle).",
)
@click.option(
    "--idle",
    type=Seconds(MAX_TIMEOUT),
    metavar="SECONDS",
    help="With --follow: end after SECONDS with nothing to do.",
)
@click.option(
    "--deadline",
    metavar="TIME|SECONDS",
    help="With --pull: start no task expected to end after TIME (or SECONDS from now) "
    "[default: the scheduler's end of the job].",
)
@click.option(
    "--task-time",
    type=Seconds(MAX_TIMEOUT),
    metavar="SECONDS",
    help="With --deadline: how long a task takes [default: the mean so far].",
)
@click.option(
    "--relay",
    type=click.IntRange(1),
    metavar="N",
    help="With --pull, in a batch job: keep N elements of this list's chain queued or "
    "running while work waits, each run submitting one successor at a time (this job's "
    "script again, or --relay-script), the last to leave handing its place on; no cron, "
    "no login-node process. Needs a scheduler that takes submissions from compute nodes.",
)
@click.option(
    "--relay-script",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="With --relay: the job script a successor is [default: this job's own, as the "
    "scheduler kept it; PBS: required].",
)
@click.option(
    "--max-relays",
    type=click.IntRange(0),
    metavar="M",
    help="With --relay: submit at most M successors in all, then let the chain end.",
)
@click.option("--ledger", type=click.Path(), help="The ledger [default: OUT.ledger].")
@click.option("--log", type=click.Path(), help="The tasks' stderr, one log [default: OUT.log].")
@record_options
@lock_options
@sync_option
@batch_options(1 << 20)
@quiet_option
@verbose_option
def run_cmd(
    tasks: str,
    out: str,
    command: tuple[str, ...],
    index: int | None,
    chunk: int,
    base: int,
    jobs: str,
    call: str | None,
    shell: bool,
    rerun: bool,
    retries: int,
    task_timeout: float | None,
    grace: float,
    max_attempts: int | None,
    halt_after: int | None,
    new_settings: bool,
    pull: bool,
    follow: bool,
    idle: float | None,
    deadline: str | None,
    task_time: float | None,
    relay: int | None,
    relay_script: str | None,
    max_relays: int | None,
    ledger: str | None,
    log: str | None,
    fmt: str,
    columns: str | None,
    kv: str | None,
    stamp: str | None,
    lock: str,
    sync: str,
    timeout: float,
    batch_bytes: int,
    flush_interval: float,
    quiet: bool,
    verbose: int,
) -> None:
    """Run this array element's tasks of TASKS; their stdout into OUT, a locked ledger.

    \b
    TASKS has one task per line (numbered from 1; blank and # lines never run).
    CMD gets the task line for each {} in its arguments, else as its last one:
      zotsink run images.txt out.tsv --kv --chunk 100 --jobs auto -- python proc.py
    or, much faster for Python code, a function called in long-lived workers:
      zotsink run images.txt out.tsv --chunk 100 --jobs auto --call proc.py:measure
    stderr goes, prefixed by TASKNUM.ATTEMPT, to OUT.log; every start and end to
    OUT.ledger. Tasks already ok there are skipped: resubmit the same script to
    finish what is left (`zotsink status`, `zotsink missing --ledger`). The ledger
    records the settings; once a task ended ok under them, a resubmission called
    otherwise is refused.

    \b
    Exit codes: 0 every task ok, 1 a task not ok (or given up), records
    refused or a task line with a NUL byte passed by, 2 usage or settings
    other than the recorded (binding) ones, 3 tasks left waiting for a run
    (named; none failed), 74 I/O error and 75 lock timeout (records
    spilled), 128+N after signal N.
    """
    from .. import Stopper, run_tasks

    set_verbosity(verbose, quiet)
    _check_dashes(out, command)
    with Stopper() as stopper:
        report = run_api(
            lambda: run_tasks(
                tasks,
                out,
                command,
                call=call,
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
                pull=pull,
                follow=follow,
                idle=idle,
                deadline=deadline,
                task_time=task_time,
                relay=relay,
                relay_script=relay_script,
                max_relays=max_relays,
                ledger=ledger,
                log=log,
                format=fmt,
                columns=column_list(columns),
                kv=kv,
                stamp=stamp_list(stamp),
                lock=lock,
                sync=sync,
                timeout=timeout,
                batch_bytes=batch_bytes,
                flush_interval=flush_interval,
                stopper=stopper,
                progress=_progress_line() if not quiet else None,
            )
        )
    if not quiet and sys.stderr.isatty():
        click.echo("\r\033[K", nl=False, err=True)  # the progress line gives way to the report
    sys.exit(_report(tasks, out, report))


def _progress_line() -> Callable[[Progress], None] | None:
    """One line on a terminal, rewritten in place: done/total, running, failed, rate, ETA.
    Nothing when stderr is not a terminal (a job's output file)."""
    if not sys.stderr.isatty():
        return None

    def show(p: Progress) -> None:
        rate = p.done / p.seconds if p.seconds > 0 else 0.0
        left = p.total - p.done
        eta = f", ETA {left / rate:.0f} s" if rate > 0 and p.running and left > 0 else ""
        line = (
            f"zotsink run: {p.done}/{p.total} done, {p.running} running, {p.failed} not ok, "
            f"{rate:.1f}/s{eta}"
        )
        click.echo(f"\r\033[K{line}", nl=False, err=True)

    return show


def _report(tasks: str, out: str, r: RunReport) -> int:
    """Say what happened; the exit code (see ``outcome_code``: a task not ok counts as 1)."""
    counts: dict[str, list[int]] = {}
    for num, state in sorted(r.states.items()):
        counts.setdefault(state, []).append(num)
    parts = [f"{len(nums)} {state}" for state, nums in counts.items()]
    if r.skipped:
        parts.append(f"{r.skipped} already ok")
    if r.elsewhere:
        parts.append(f"{r.elsewhere} done or running in another run")
    if r.given_up:
        parts.append(
            f"{r.given_up} given up after {r.max_attempts} failed attempts (a higher "
            "--max-attempts gives them another chance)"
        )
    unstarted = r.selected - r.skipped - r.elsewhere - r.given_up - len(r.states)
    if (r.halted is not None or r.signal is not None or r.error is not None) and unstarted:
        parts.append(f"{unstarted} not started (they stay to resubmit)")
    bad = [n for state, nums in counts.items() if state != "ok" for n in nums]
    # every run ends with one line (-q: none): an all-ok run printed nothing before
    say(
        f"{counted(r.selected, 'task')}: {', '.join(parts) or 'nothing to do'}; "
        f"{counted(r.records, 'record')} into {out}"
    )
    if bad:
        shown = ",".join(map(str, bad[:20])) + (",..." if len(bad) > 20 else "")
        say(
            f"tasks not ok: {shown}; their stderr is in {r.log_path}; "
            f"`zotsink status {tasks} {out}` shows where all stand"
        )
    if r.halted is not None:
        click.echo(f"zotsink: error: {r.halted}", err=True)
    failed = report_outcome(r.outcomes)
    if r.error is not None and all(r.error is not o.error for o in r.outcomes):
        # the ledger refused a start row: the tasks it announced were not run
        click.echo(f"zotsink: error: {r.error}", err=True)
        failed = failed or r.error
    if r.passed:
        shown = ",".join(map(str, r.passed[:20])) + (",..." if len(r.passed) > 20 else "")
        click.echo(
            f"zotsink: warning: {counted(len(r.passed), 'line')} of {tasks} with a NUL byte "
            f"passed by, no task (line {shown}): a producer wrote binary there; add the "
            "tasks again as whole lines (`zotsink add`)",
            err=True,
        )
    if r.taken_over:
        say(f"{r.taken_over} tasks of runs that died were run here")
    if r.unknown:
        say(
            f"{r.unknown} tasks left running in runs whose life nothing here can tell (no "
            "scheduler answers for their host): `zotsink status` shows them"
        )
    if r.out_of_time:
        say("tasks left to other runs: they would not end before this job's deadline")
    if r.idled_out:
        say("nothing new to do in the --idle time: the run made way")
    if r.relay is not None:
        _relay_lines(r.relay)
    if r.left:
        say(
            f"{_left_text(r.left)} left waiting for a run, none running them: resubmit "
            f"(`zotsink status {tasks} {out}` shows where they stand)"
        )
    if r.signal is not None:
        import signal

        say(f"stopped by {signal.Signals(r.signal).name}; what the tasks printed was kept")
    # a given-up task is not ok either, nor is a run that halted: the job must not look
    # finished
    # and a line passed by for its NUL byte was meant as a task, most likely
    not_done = r.rejected + len(bad) + r.given_up + (r.halted is not None) + len(r.passed)
    if r.to_run is not None:
        # the last line: what the stop left (a job script's log ends with it)
        say(f"stopped by `zotsink stop`: {counted(r.to_run, 'task')} left to run")
    code = outcome_code(failed or r.error, not_done, r.signal)
    if code == 0 and r.left:
        return EXIT_LEFT  # no task failed, and some were left: not finished either
    return code


def _relay_lines(relay: dict[str, list[str]]) -> None:
    """What a relay run did about its chain: the successors it submitted, the submissions
    that failed, and the last thing its checks decided."""
    jobs = relay["submitted"]
    if jobs:
        say(f"relay: submitted {counted(len(jobs), 'successor')}: {', '.join(jobs)}")
    for message in relay["failures"][-3:]:
        click.echo(f"zotsink: warning: relay: a submission failed: {message}", err=True)
    if relay["said"]:
        say(f"relay: {relay['said'][-1]}")


def _left_text(left: tuple[int, ...]) -> str:
    """The tasks a run left waiting, named: ``3 tasks (3,7-8)``."""
    from .. import array_spec

    spec = array_spec(left)
    shown = spec if len(spec) <= 60 else spec[: spec.rfind(",", 0, 60)] + ",..."
    return f"{counted(len(left), 'task')} ({shown})"
