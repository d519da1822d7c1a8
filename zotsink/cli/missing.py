"""``zotsink missing INPUTS OUT --key COL``: the task lines with no record yet."""

from __future__ import annotations

import sys

import click

from ._common import (
    CONTEXT,
    format_option,
    lock_options,
    run_api,
    say,
    set_verbosity,
    stdout_closed,
    verbose_option,
)


@click.command("missing", context_settings=CONTEXT)
@click.argument("inputs", type=click.Path(allow_dash=True))
@click.argument("out", type=click.Path())
@click.option(
    "-k",
    "--key",
    required=True,
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
@format_option
@lock_options
@verbose_option
def missing_cmd(
    inputs: str,
    out: str,
    key: str,
    match: str,
    as_array: bool,
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
    """
    from .._check.missing import array_spec, missing_lines

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
