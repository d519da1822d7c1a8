"""``zotsink doctor``: the filesystem, its locks, and what ``auto`` chooses there."""

from __future__ import annotations

import sys

import click

from ._common import CONTEXT, LOCK_KINDS, json_option, print_json, run_api, say, set_verbosity


@click.command("doctor", context_settings=CONTEXT)
@click.argument("directory", default=".", type=click.Path())
@click.option(
    "--lock",
    type=click.Choice(LOCK_KINDS),
    default="auto",
    show_default=True,
    help="The --lock setting to judge.",
)
@json_option
@click.option("-q", "--quiet", is_flag=True, help="No report on stderr, only the exit code.")
def doctor_cmd(directory: str, lock: str, as_json: bool, quiet: bool) -> None:
    """Check whether zotsink can be trusted in DIRECTORY (default: here).

    \b
    Reports the filesystem type and mount options, whether flock and fcntl
    locks work (a scratch file is created, locked and removed), whether a
    lock taken here excludes writers on other nodes, and the lock kind and
    sync policy that `auto` chooses.
    Exit codes: 0 trusted, 1 not trusted (node-local or unknown locks, no
    working lock, no write permission), 2 usage.
    """
    from .. import doctor

    set_verbosity(0, quiet)
    report = run_api(lambda: doctor(directory, lock=lock))
    for line in report.summary():
        say(line)
    if as_json:
        print_json(report.to_dict())
    sys.exit(0 if report.ok else 1)
