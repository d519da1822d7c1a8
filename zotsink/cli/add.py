"""``zotsink add TASKS [LINE ...]``: whole task lines appended to a task list."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

import click

from ._common import CONTEXT, fail, quiet_option, read_lock_options, run_api, say, sync_option


@click.command("add", context_settings=CONTEXT)
@click.argument("tasks", type=click.Path(dir_okay=False))
@click.argument("lines", nargs=-1)
@read_lock_options
@sync_option
@quiet_option
def add_cmd(
    tasks: str, lines: tuple[str, ...], lock: str, timeout: float, sync: str, quiet: bool
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
    Exit codes: 0 added, 1 a line refused (or only blank and # lines), 2 usage,
    74 I/O error, 75 lock timeout.
    """
    from .. import Stopper, add_tasks

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
