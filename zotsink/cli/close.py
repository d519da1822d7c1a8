"""``zotsink close TASKS OUT``, ``zotsink stop TASKS OUT`` and ``zotsink release TASKS OUT
--run RUN``: rows in the ledger that tell the runs of a task list what to do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ._common import CONTEXT, quiet_option, read_lock_options, run_api, say, set_verbosity

F = TypeVar("F", bound=Callable[..., Any])


def _ledger_args(f: F) -> F:
    f = click.option("--ledger", type=click.Path(), help="The ledger [default: OUT.ledger].")(f)
    f = click.argument("out", type=click.Path(), required=False)(f)
    return click.argument("tasks", type=click.Path(dir_okay=False))(f)


def _ledger_path(command: str, out: str | None, ledger: str | None) -> str:
    if out is not None and ledger is not None:
        raise click.UsageError(f"give OUT ({out}) or --ledger PATH ({ledger}), not both")
    if out is None and ledger is None:
        raise click.UsageError(
            f"give OUT too (the ledger is OUT.ledger), or --ledger PATH: `zotsink {command} "
            "TASKS OUT`"
        )
    return ledger if ledger is not None else f"{out}.ledger"


@click.command("close", context_settings=CONTEXT)
@_ledger_args
@click.option(
    "--reopen",
    is_flag=True,
    help="Open the list again: runs started with --follow from now on wait for new lines.",
)
@read_lock_options
@quiet_option
def close_cmd(
    tasks: str,
    out: str | None,
    ledger: str | None,
    reopen: bool,
    lock: str,
    timeout: float,
    quiet: bool,
) -> None:
    """Say that no more lines will come to TASKS: runs that follow it end once every task
    is done.

    \b
    Recorded in the ledger (OUT.ledger, or --ledger PATH) with the number of
    lines TASKS has now; closing a closed list again writes nothing unless lines
    came since. A line added after the close is still a task: a run still live
    runs it, else the next run does. `--reopen` opens the list again.
    Exit codes: 0 done, 1 TASKS unreadable, 2 usage, 74 I/O error, 75 lock timeout.
    """
    from .. import close_tasks

    set_verbosity(0, quiet)
    path = _ledger_path("close", out, ledger)
    state, wrote = run_api(
        lambda: close_tasks(tasks, path, reopen=reopen, lock=lock, timeout=timeout)
    )
    if reopen:
        say(f"{tasks} is open again (in {path})" if wrote else f"{tasks} is open already")
    elif wrote:
        say(f"{tasks} closed at {state.closed_lines} lines (in {path})")
    else:
        say(f"{tasks} was closed already at {state.closed_lines} lines ({state.closed_time})")


@click.command("stop", context_settings=CONTEXT)
@_ledger_args
@read_lock_options
@quiet_option
def stop_cmd(
    tasks: str, out: str | None, ledger: str | None, lock: str, timeout: float, quiet: bool
) -> None:
    """Tell the runs of TASKS that are live now to stop: each finishes the tasks it is
    running, starts nothing more and exits.

    \b
    Recorded in the ledger (OUT.ledger, or --ledger PATH): a run started after
    the stop proceeds, so the rest of the list is done by the next runs you
    start. `zotsink status TASKS OUT` shows the runs still finishing.
    Exit codes: 0 done, 1 TASKS unreadable, 2 usage or no ledger, 74 I/O error,
    75 lock timeout.
    """
    from .. import stop_runs

    set_verbosity(0, quiet)
    path = _ledger_path("stop", out, ledger)
    state = run_api(lambda: stop_runs(tasks, path, lock=lock, timeout=timeout))
    say(f"stop recorded in {path} at {state.stop_time}: live runs finish their tasks and exit")


@click.command("release", context_settings=CONTEXT)
@_ledger_args
@click.option(
    "--run",
    "runs",
    multiple=True,
    required=True,
    metavar="RUN",
    help="A run that is gone: its id or HOST:PID, as `zotsink status` names it (repeatable).",
)
@read_lock_options
@quiet_option
def release_cmd(
    tasks: str,
    out: str | None,
    ledger: str | None,
    runs: tuple[str, ...],
    lock: str,
    timeout: float,
    quiet: bool,
) -> None:
    """Declare runs gone that nothing here can tell are dead (a host that is gone,
    no scheduler that answers), so that their tasks run again.

    \b
    A run on another host is judged by its scheduler; where none answers, its
    tasks stay held (status: "nothing here can tell whether it lives"). Your
    word that it is gone is recorded in the ledger: its claimed tasks are free,
    its running ones lost, and the next runs take them. A run this host sees
    alive is refused: stop it instead. If the run lives after all, its tasks
    run twice at once: be sure.
    Exit codes: 0 done, 1 TASKS unreadable, 2 usage (no such run, or one that
    holds nothing, or lives), 74 I/O error, 75 lock timeout.
    """
    from .. import release_runs

    set_verbosity(0, quiet)
    path = _ledger_path("release", out, ledger)
    gone = run_api(lambda: release_runs(tasks, path, runs, lock=lock, timeout=timeout))
    for r in gone:
        where = f"{r.host} pid {r.pid}" + (f" job {r.job}" if r.job else "")
        say(
            f"run {r.id} ({where}) released: {r.claimed} claimed and {r.running} running "
            "tasks of it are free for the next runs"
        )
