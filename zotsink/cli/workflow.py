"""``zotsink verify`` and ``zotsink missing``: the checks around a finished job array."""

from __future__ import annotations

import sys

import click

from ..locking import LOCK_KINDS
from . import run_api, say, set_verbosity

_LOCK = click.Choice(LOCK_KINDS)
_FORMAT = click.Choice(["auto", "tsv", "csv", "lines"])
_CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.command("verify", context_settings=_CONTEXT)
@click.argument("out", type=click.Path())
@click.option("--repair", is_flag=True, help="Move every bad line to OUT.rejects (under the lock).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--allow-duplicates", is_flag=True, help="Exact duplicate lines are not problems.")
@click.option("--no-header", is_flag=True, help="The first line of a tsv/csv OUT is a record.")
@click.option("-f", "--format", "fmt", type=_FORMAT, default="auto", show_default=True)
@click.option(
    "--show",
    type=click.IntRange(0),
    default=5,
    show_default=True,
    metavar="N",
    help="Problems listed per kind on stderr.",
)
@click.option("--lock", type=_LOCK, default="auto", show_default=True, help="Lock kind.")
@click.option(
    "--timeout", type=float, default=600.0, show_default=True, help="Longest wait for the lock (s)."
)
@click.option("-q", "--quiet", is_flag=True, help="No report on stderr, only the exit code.")
def verify_cmd(
    out: str,
    repair: bool,
    as_json: bool,
    allow_duplicates: bool,
    no_header: bool,
    fmt: str,
    show: int,
    lock: str,
    timeout: float,
    quiet: bool,
) -> None:
    """Check OUT: header, field counts, NUL bytes, fragments, empty and duplicate lines.

    \b
    Exit codes: 0 clean (or, with --repair, clean now), 1 problems found
    (with --repair: problems left, such as a damaged header), 2 usage,
    74 I/O error, 75 lock timeout.
    """
    from ..verify import verify

    set_verbosity(0, quiet)
    report = run_api(
        lambda: verify(
            out,
            format=fmt,
            header=False if no_header else None,
            allow_duplicates=allow_duplicates,
            repair=repair,
            lock=lock,
            timeout=timeout,
        )
    )
    for line in report.summary(limit=show):
        say(line)
    if as_json:
        import json

        click.echo(json.dumps(report.to_dict(), indent=2))
    sys.exit(0 if report.ok else 1)


@click.command("missing", context_settings=_CONTEXT)
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
@click.option("-f", "--format", "fmt", type=_FORMAT, default="auto", show_default=True)
@click.option("--lock", type=_LOCK, default="auto", show_default=True, help="Lock kind.")
@click.option(
    "--timeout", type=float, default=600.0, show_default=True, help="Longest wait for the lock (s)."
)
@click.option("-v", "--verbose", count=True, help="Say how many tasks are missing.")
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
    from ..missing import array_spec, missing_lines

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
        import os

        # `zotsink missing ... | head`: the reader left; that is not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    say(f"{count} tasks of {inputs} have no record in {out}", level=1)
