"""``zotsink verify OUT``: the integrity report, and ``--repair``."""

from __future__ import annotations

import sys

import click

from ._common import (
    CONTEXT,
    format_option,
    json_option,
    print_json,
    read_lock_options,
    run_api,
    say,
    set_verbosity,
)


@click.command("verify", context_settings=CONTEXT)
@click.argument("out", type=click.Path())
@click.option("--repair", is_flag=True, help="Move every bad line to OUT.rejects (under the lock).")
@json_option
@click.option("--allow-duplicates", is_flag=True, help="Exact duplicate lines are not problems.")
@click.option("--no-header", is_flag=True, help="The first line of a tsv/csv OUT is a record.")
@format_option
@click.option(
    "--show",
    type=click.IntRange(0),
    default=5,
    show_default=True,
    metavar="N",
    help="Problems listed per kind on stderr.",
)
@read_lock_options
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
    from .. import is_pack_archive, verify

    set_verbosity(0, quiet)
    if is_pack_archive(out):  # a shared tar of `zotsink pack`: its own walk of the headers
        from .. import verify_archive

        rep = run_api(lambda: verify_archive(out, repair=repair, lock=lock, timeout=timeout))
        for line in rep.summary(limit=show):
            say(line)
        if as_json:
            print_json(rep.to_dict())
        sys.exit(0 if rep.ok else 1)
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
        print_json(report.to_dict())
    sys.exit(0 if report.ok else 1)
