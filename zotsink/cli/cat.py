"""``zotsink cat OUT``: a consistent snapshot of OUT on stdout."""

from __future__ import annotations

import sys

import click

from ._common import CONTEXT, read_lock_options, run_api, say, stdout_closed


@click.command("cat", context_settings=CONTEXT)
@click.argument("out", type=click.Path())
@click.argument("member", required=False)
@click.option(
    "--list",
    "listing",
    is_flag=True,
    help="ARCHIVE.tar: list its members as TSV, one line per name (the member NAME reads).",
)
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every line of OUT, also those of run attempts that failed, were interrupted or "
    "crashed; with --list, every member of ARCHIVE, earlier ones of a name too (tasknum and "
    "attempt say which run task and attempt appended each).",
)
@click.option(
    "--ledger",
    type=click.Path(dir_okay=False),
    help="The ledger of the `zotsink run` that wrote OUT [default: OUT.ledger, if there]; "
    "for ARCHIVE.tar NAME or --list, the member of the latest attempt it calls ok.",
)
@click.option(
    "-o",
    "--output",
    "dest",
    type=click.Path(dir_okay=False),
    help="Write the snapshot to FILE instead: a .jsonl or .parquet (typed columns) FILE.",
)
@click.option("--force", is_flag=True, help="With -o: replace FILE if it exists (atomically).")
@read_lock_options
def cat_cmd(
    out: str,
    member: str | None,
    listing: bool,
    every: bool,
    ledger: str | None,
    dest: str | None,
    force: bool,
    lock: str,
    timeout: float,
) -> None:
    """Print a consistent copy of OUT: never a half-written batch.

    \b
    When `zotsink run` wrote OUT, its ledger says what each task's latest ok
    attempt wrote: cat prints that, each task's records exactly once (--all:
    every line).
    For an archive of `zotsink pack`: `zotsink cat ARCHIVE.tar NAME` prints one member
    (found through the index, no scan); `--list` lists the members. A name appended
    again (--replace, or the retry of a task of `zotsink run`) reads as its last
    member, as tar extracts it; with --ledger, as its last of an attempt that ended ok.
    """
    from .. import committed_chunks

    if force and dest is None:
        raise click.UsageError("--force replaces the file of -o DEST: add -o DEST")
    if every and member is not None:
        raise click.UsageError("--all is for all of OUT or, with --list, every member: not NAME")
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
        from .. import format_listing, latest_members, list_members, read_member

        ok = None
        if ledger is not None:
            from .. import read_ledger  # the ledger's reader loads the record writer: only here

            ok = run_api(
                lambda: {
                    (r.tasknum, r.attempt)
                    for r in read_ledger(ledger, lock=lock, timeout=timeout)
                    if r.event == "end" and r.status == "ok"
                }
            )

        def listed() -> bytes:
            rows = list_members(out)
            if every:
                return format_listing(rows)
            latest = latest_members(rows, ok)
            hidden = len({r.name for r in rows}) - len(latest)
            if hidden:  # only with --ledger: names no ok attempt appended
                say(
                    f"{hidden} name(s) left out, appended only by attempts not ok in "
                    f"{ledger}: --all lists them"
                )
            return format_listing(latest)

        data = run_api(lambda: listed() if listing else read_member(out, member, ok=ok))
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
