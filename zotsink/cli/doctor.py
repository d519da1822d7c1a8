"""``zotsink doctor``: the filesystem, its locks, and what ``auto`` chooses there."""

from __future__ import annotations

import sys

import click

from ..locking import LOCK_KINDS
from . import run_api, say, set_verbosity


@click.command("doctor", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("directory", default=".", type=click.Path())
@click.option(
    "--lock",
    type=click.Choice(LOCK_KINDS),
    default="auto",
    show_default=True,
    help="The --lock setting to judge.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
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
    from ..doctor import doctor

    set_verbosity(0, quiet)
    report = run_api(lambda: doctor(directory, lock=lock))
    for line in report.summary():
        say(line)
    if as_json:
        import json

        click.echo(json.dumps(report.to_dict(), indent=2))
    sys.exit(0 if report.ok else 1)
