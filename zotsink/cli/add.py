"""``zotsink add TASKS [LINE ...]``: whole task lines appended to a task list."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

import click

from ._common import (
    CONTEXT,
    fail,
    quiet_option,
    read_lock_options,
    run_api,
    say,
    set_verbosity,
    sync_option,
)


@click.command("add", context_settings=CONTEXT)
@click.argument("tasks", type=click.Path(dir_okay=False))
@click.argument("lines", nargs=-1)
@click.option(
    "--relay",
    "runner",
    type=click.Path(dir_okay=False),
    metavar="SCRIPT",
    help="Then submit the job script SCRIPT (a runner: `zotsink run --follow --relay 1`) "
    "when no element of the list's chain is queued or running, decided under the "
    "ledger's lock: the dropbox without cron. Needs --ledger.",
)
@click.option(
    "--ledger",
    type=click.Path(),
    help="With --relay: the runs' ledger (OUT.ledger of the runner's OUT).",
)
@read_lock_options
@sync_option
@quiet_option
def add_cmd(
    tasks: str,
    lines: tuple[str, ...],
    runner: str | None,
    ledger: str | None,
    lock: str,
    timeout: float,
    sync: str,
    quiet: bool,
) -> None:
    """Append LINES, or the lines of stdin, to the task list TASKS as new tasks.

    \b
    All lines go in one write under TASKS's lock, so producers adding at once
    never mix their lines, and runs reading TASKS (`zotsink run --follow`) see
    whole lines only. Prints the task numbers the lines got (task N is line N):
    `12` for one line, `12-40` for several (they are always consecutive);
    nothing when no line was given. Blank lines and # comments, which a task
    list never runs, are left out (a warning counts them); given nothing else,
    it is an error. A line with a NUL byte or over the length limit is refused,
    and then nothing is added. Nothing is saved elsewhere when TASKS cannot be
    written: add the lines again.
    With --relay SCRIPT --ledger LEDGER, once the lines are in, a runner is
    submitted (sbatch/qsub SCRIPT) when no element of the list's chain is
    queued or running: producers restart the chain, no cron needed. Says what
    it did on stderr; a submission that fails is recorded in the ledger
    (`zotsink status` shows it) and makes the exit 1.
    Exit codes: 0 added, 1 a line refused (or only blank and # lines, or the
    runner's submission failed), 2 usage, 74 I/O error, 75 lock timeout.
    """
    from .. import Stopper, add_tasks, ensure_runner

    set_verbosity(0, quiet)
    if (runner is None) != (ledger is None):
        raise click.UsageError(
            "--relay SCRIPT and --ledger LEDGER go together: the ledger says whether a "
            "runner is queued or running"
        )

    given: Iterable[bytes]
    if lines:
        given = [os.fsencode(line) for line in lines]
    else:
        if sys.stdin is None:
            fail("no standard input to read task lines from; give LINES as arguments", 2)
        if sys.stdin.isatty() and not quiet:
            say(f"reading task lines for {tasks} from the terminal, one per line; end with Ctrl-D")
        given = sys.stdin.buffer  # its lines, each with its newline (add_tasks drops it)
    with Stopper() as stopper:
        added = run_api(
            lambda: add_tasks(tasks, given, lock=lock, sync=sync, timeout=timeout, stopper=stopper)
        )
    if added:
        last = added[-1]
        click.echo(str(last) if len(added) == 1 else f"{added[0]}-{last}")
    if runner is None or ledger is None or not added:
        return
    done = run_api(lambda: ensure_runner(ledger, runner, lock=lock, timeout=timeout))
    if done.made:
        # a new dropbox's first add; or a mistyped --ledger, which no runner would ever read
        say(
            f"made the ledger {ledger} (no run had written it): the runner's OUT.ledger must "
            "be this file, else check the name"
        )
    if done.job is not None:
        say(f"submitted a runner ({runner}): job {done.job}")
    elif done.elements:
        say(f"no runner submitted: {done.said}")
    else:
        fail(f"the runner's submission failed: {done.said}", 1)
