"""``zotsink append OUT [RECORD ...]`` (and the shorthand ``zotsink OUT``)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from ._common import (
    CONTEXT,
    batch_options,
    column_list,
    counted,
    lock_options,
    outcome_code,
    quiet_option,
    record_options,
    report_outcome,
    run_api,
    say,
    set_verbosity,
    stamp_list,
    sync_option,
    verbose_option,
)

if TYPE_CHECKING:
    from .. import StreamReport


@click.command("append", context_settings=CONTEXT)
@click.argument("out", type=click.Path(dir_okay=True))
@click.argument("records", nargs=-1)
@record_options
@lock_options
@sync_option
@batch_options(1 << 20)
@click.option(
    "--whole", is_flag=True, help="Buffer all of stdin and append it as one block at the end."
)
@click.option(
    "--count-lines",
    is_flag=True,
    help="Count lines that pass through unchanged, to name refused ones by line number "
    "(else by input byte) and report records with -v; costs about a third of the speed.",
)
@quiet_option
@verbose_option
def append_cmd(
    out: str,
    records: tuple[str, ...],
    fmt: str,
    columns: str | None,
    kv: str | None,
    stamp: str | None,
    lock: str,
    timeout: float,
    sync: str,
    batch_bytes: int,
    flush_interval: float,
    whole: bool,
    count_lines: bool,
    quiet: bool,
    verbose: int,
) -> None:
    """Append RECORDS, or the lines of stdin, to OUT: each record whole, under a lock.

    \b
    Exit codes: 0 all written, 1 records refused (see OUT.rejects) or header
    mismatch, 2 usage, 74 I/O error and 75 lock timeout (records saved to a spill
    file: run `zotsink recover OUT`), 128+N after signal N.
    """
    from .. import Stopper, append_stream

    set_verbosity(verbose, quiet)
    opts = dict(
        format=fmt,
        columns=column_list(columns),
        kv=kv,
        stamp=stamp_list(stamp),
        lock=lock,
        sync=sync,
        timeout=timeout,
        batch_bytes=batch_bytes,
        flush_interval=flush_interval,
        whole=whole,
        count=count_lines,
    )
    if records:
        data = b"".join(os.fsencode(r) + b"\n" for r in records)
        report = run_api(lambda: append_stream(out, None, data=data, **opts))
    else:
        if sys.stdin is None:
            from ._common import fail

            fail("no standard input to read records from; give RECORDS as arguments", 2)
        if sys.stdin.isatty() and not quiet:
            # A mistyped command must not leave a user staring at a silent terminal.
            say(
                f"reading records for {out} from the terminal, one per line; "
                "end with Ctrl-D (zotsink --help lists the commands)"
            )
        with Stopper() as stopper:
            report = run_api(
                lambda: append_stream(out, sys.stdin.fileno(), stopper=stopper, **opts)
            )
    sys.exit(_report(out, report))


def _report(out: str, r: StreamReport) -> int:
    """Say what happened; the exit code (see ``outcome_code``)."""
    failed = report_outcome(r.outcomes)
    if r.unterminated:
        say("note: the input did not end with a newline; one was added")
    done = counted(r.appended, "byte") if r.records is None else counted(r.records, "record")
    say(f"{done} appended to {out} (lock wait {r.lock_wait:.3f} s)", level=1)
    if r.signal is not None:
        import signal as _signal

        name = _signal.Signals(r.signal).name
        done = "writing or spilling" if r.spilled else "writing"
        say(f"stopped by {name} after {done} everything read")
    return outcome_code(failed, r.rejected, r.signal)
