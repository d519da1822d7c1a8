"""``zotsink missing INPUTS OUT --key COL``: the task lines with no record yet."""

from __future__ import annotations

import sys

import click

from ._common import (
    CONTEXT,
    complete_list,
    format_option,
    read_lock_options,
    run_api,
    say,
    set_verbosity,
    stdout_closed,
    verbose_option,
)


def _states() -> tuple[str, ...]:
    from .._ledger.view import STATES  # a constant, read only when the shell completes

    return STATES


@click.command("missing", context_settings=CONTEXT)
@click.argument("inputs", type=click.Path(allow_dash=True))
@click.argument("out", type=click.Path(), required=False)
@click.option(
    "-k",
    "--key",
    metavar="COL",
    help="OUT's column holding the task line: a header name or a 1-based number.",
)
@click.option(
    "--match",
    type=click.Choice(["exact", "basename", "stem"]),
    default="exact",
    show_default=True,
    help="Compare whole values, base names, or base names without extension.",
)
@click.option(
    "--array",
    "as_array",
    is_flag=True,
    help="Print the missing line numbers as a Slurm --array spec (3,7-9,15).",
)
@click.option("--ledger", type=click.Path(), help="Read task states from a `zotsink run` ledger.")
@click.option(
    "--state",
    "states",
    metavar="S,...",
    shell_complete=complete_list(_states),
    help="With --ledger: the states [not ok].",
)
@click.option(
    "--chunk",
    type=click.IntRange(1),
    help="With --ledger: tasks per index [default: the run's recorded chunk, else 1].",
)
@click.option(
    "--base",
    type=int,
    help="With --ledger: the index of the first chunk [default: the recorded base, else 1].",
)
@click.option(
    "--max-array",
    type=click.IntRange(1),
    metavar="N",
    help="With --ledger: the site's MaxArraySize. Specs are split so that every index stays "
    "below it, one 'SPEC BASE' line each: submit --array=SPEC with `zotsink run --base BASE` "
    "in the job. Index I runs chunk I-BASE+1: later lines reuse the low indices, so their "
    "BASE is 0 or negative, and right.",
)
@format_option
@read_lock_options
@verbose_option
def missing_cmd(
    inputs: str,
    out: str | None,
    key: str | None,
    match: str,
    as_array: bool,
    ledger: str | None,
    states: str | None,
    chunk: int | None,
    base: int | None,
    max_array: int | None,
    fmt: str,
    lock: str,
    timeout: float,
    verbose: int,
) -> None:
    """Print the lines of INPUTS (the task list) that have no record in OUT yet.

    \b
    INPUTS is the file a job script reads its task from, line N for task N
    (awk NR==$SLURM_ARRAY_TASK_ID); '-' reads it from stdin. Blank lines are
    counted but never reported. With --array nothing is printed when no task is
    missing, so:
      spec=$(zotsink missing tasks.txt out.tsv --key input --array)
      [ -z "$spec" ] || sbatch --array="$spec" job.sh
    With --ledger (of `zotsink run`) instead of OUT and --key: the tasks in
    --state (default: every state but ok and given-up), or with --array the
    indices whose --chunk holds one (the run's recorded --chunk and --base unless
    given); given-up tasks left out are named on stderr; see docs/run.md.
    """
    if ledger is not None:
        if out is not None or key is not None:
            raise click.UsageError("--ledger replaces OUT and --key: give either, not both")
        _from_ledger(inputs, ledger, states, chunk, base, max_array, as_array, lock, timeout)
        return
    if out is None:
        raise click.UsageError("Missing argument 'OUT' (or give --ledger PATH).")
    if key is None:
        raise click.UsageError(_no_key(inputs, out, as_array))
    from .. import array_spec, missing_lines

    set_verbosity(verbose, False)
    opts = dict(match=match, format=fmt, lock=lock, timeout=timeout)
    sink = sys.stdout.buffer

    def run() -> int:
        count = 0
        if as_array:
            numbers = [n for n, _ in missing_lines(inputs, out, key, **opts)]
            count = len(numbers)
            if numbers:
                sink.write(array_spec(numbers).encode() + b"\n")
        else:
            for _n, line in missing_lines(inputs, out, key, **opts):
                sink.write(line.encode("utf-8", "surrogateescape") + b"\n")
                count += 1
        sink.flush()
        return count

    try:
        count = run_api(run)
    except BrokenPipeError:
        stdout_closed()
    say(f"{count} tasks of {inputs} have no record in {out}", level=1)


def _no_key(inputs: str, out: str, as_array: bool) -> str:
    """Say how to go on when OUT came without --key, and whether OUT is a ledger."""
    import shlex

    ledger = f"zotsink missing {shlex.quote(inputs)} --ledger {shlex.quote(out)}"
    ledger += " --array" if as_array else ""
    if out.endswith(".ledger"):
        return (
            f"{out} looks like the ledger of `zotsink run`: give it with --ledger instead "
            f"of OUT ({ledger}); OUT and --key COL are for a file of records"
        )
    return (
        "Missing option '-k' / '--key': OUT's column holding the task line (a header name "
        f"or a 1-based number). If {out} is the ledger of `zotsink run`, give it with "
        f"--ledger instead: {ledger}"
    )


def _from_ledger(
    inputs: str,
    ledger: str,
    states: str | None,
    chunk: int | None,
    base: int | None,
    max_array: int | None,
    as_array: bool,
    lock: str,
    timeout: float,
) -> None:
    from .. import array_spec, ledger_missing

    found = run_api(
        lambda: ledger_missing(
            inputs,
            ledger,
            states=states,
            chunk=chunk,
            base=base,
            max_array=max_array,
            lock=lock,
            timeout=timeout,
        )
    )
    if as_array:
        lines = [f"{spec} {b}" if max_array is not None else spec for spec, b in found.specs]
    else:
        lines = [t.line for t in found.tasks]
    try:
        for line in lines:
            sys.stdout.buffer.write(line.encode("utf-8", "surrogateescape") + b"\n")
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        stdout_closed()
    if as_array and found.pull:
        say(
            f"{len(found.tasks)} tasks left of a --pull run: submit the elements above "
            "(--array SPEC) running `zotsink run --pull`; any element takes any task"
        )
    if as_array and max_array is not None and any(b < 1 for _spec, b in found.specs):
        # a negative BASE reads like a mistake: say why it is right
        say(
            f"the chunks do not fit under --max-array {max_array}: each line is SPEC BASE, "
            f"submitted as --array=SPEC running `zotsink run --base BASE` (ZOTSINK_BASE in "
            "the templates); index I runs chunk I-BASE+1, so later lines reuse the low "
            "indices with a BASE of 0 or below"
        )
    if found.given_up:
        # stderr, under -q too: a task left out must never look as if it were done
        limit = f" (--max-attempts {found.max_attempts})" if found.max_attempts else ""
        click.echo(
            f"zotsink: left out {len(found.given_up)} given-up task(s), failed too often"
            f"{limit}: {array_spec(found.given_up)}; `--state given-up` lists them",
            err=True,
        )
