"""``zotsink cat OUT``: a consistent snapshot of OUT on stdout."""

from __future__ import annotations

import sys

import click

from ._common import CONTEXT, read_lock_options, run_api, say, stdout_closed


@click.command("cat", context_settings=CONTEXT)
@click.argument("out", type=click.Path())
@click.argument("member", required=False)
@click.option("--list", "listing", is_flag=True, help="ARCHIVE.tar: list its members as TSV.")
@click.option(
    "-o",
    "--output",
    "dest",
    type=click.Path(dir_okay=False),
    help="Write the snapshot to FILE instead: a .jsonl or .parquet (typed columns) FILE.",
)
@click.option("--force", is_flag=True, help="With -o: replace FILE if it exists (atomically).")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every line of OUT, also those of failed, interrupted or crashed run attempts.",
)
@click.option(
    "--ledger",
    type=click.Path(dir_okay=False),
    help="The ledger of the run that wrote OUT [default: OUT.ledger, if it is there].",
)
@read_lock_options
def cat_cmd(
    out: str,
    member: str | None,
    listing: bool,
    dest: str | None,
    force: bool,
    every: bool,
    ledger: str | None,
    lock: str,
    timeout: float,
) -> None:
    """Print a consistent copy of OUT: never a half-written batch.

    \b
    When `zotsink run` wrote OUT, its ledger says what each task's latest ok
    attempt wrote: cat prints that, each task's records exactly once (--all:
    every line).
    For an archive of `zotsink pack`: `zotsink cat ARCHIVE.tar NAME` prints one member
    (found through the index, no scan); `--list` lists the members.
    """
    from .. import committed_chunks

    if force and dest is None:
        raise click.UsageError("--force replaces the file of -o DEST: add -o DEST")
    if dest is not None:
        from .. import export

        n = run_api(
            lambda: export(
                out, dest, lock=lock, timeout=timeout, force=force, ledger=ledger, every=every
            )
        )
        say(f"wrote {n} rows to {dest}")
        return
    if member is not None or listing:
        from .. import format_listing, list_members, read_member

        data = run_api(
            lambda: format_listing(list_members(out)) if listing else read_member(out, member)
        )
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            stdout_closed()
        return
    chunks = committed_chunks(out, ledger=ledger, every=every, lock=lock, timeout=timeout)
    sink = sys.stdout.buffer
    try:
        first = run_api(lambda: next(chunks, b""))  # the errors of opening OUT and its ledger
        sink.write(first)
        for chunk in chunks:
            sink.write(chunk)
        sink.flush()
    except BrokenPipeError:
        stdout_closed()
