"""``zotsink append OUT [RECORD ...]`` (and the shorthand ``zotsink OUT``)."""

from __future__ import annotations

import os
import sys

import click

from ._common import (
    CONTEXT,
    batch_options,
    column_list,
    lock_options,
    outcome_code,
    quiet_option,
    record_options,
    run_api,
    say,
    set_verbosity,
    sync_option,
    verbose_option,
)


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
    from .._core.stamp import parse_stamp
    from .._signals import Stopper
    from .._stream import append_stream

    set_verbosity(verbose, quiet)
    stamp_fields = run_api(lambda: parse_stamp(stamp)) if stamp is not None else ()
    opts = dict(
        format=fmt,
        columns=column_list(columns),
        kv=kv,
        stamp=stamp_fields,
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


def _report(out: str, r: object) -> int:
    """Say what happened; the exit code (see ``outcome_code``)."""
    from .._core.sidefiles import find_spills
    from .._stream import StreamReport
    from ..errors import HeaderMismatch

    assert isinstance(r, StreamReport)
    mismatch = isinstance(r.error, HeaderMismatch)
    if r.rejected:
        why = "header mismatch" if mismatch else "refused"
        click.echo(
            f"zotsink: {r.rejected} records {why}; they are in {r.rejects_path}"
            + (f" ({r.error})" if mismatch else ""),
            err=True,
        )
    failed = r.error if r.error is not None and not mismatch else None
    if failed is not None:
        # Once, however many batches failed: the first error says why and where they went.
        click.echo(f"zotsink: error: {failed}", err=True)
    if r.spilled:
        # recover finds spill files beside OUT by itself; any elsewhere must be named.
        beside = {os.path.abspath(p) for p in find_spills(out)}
        extra = [p for p in r.spill_paths if os.path.abspath(p) not in beside]
        import shlex  # only when something was spilled: every task's start-up pays for imports

        cmd = " ".join(shlex.quote(a) for a in ["zotsink", "recover", out, *extra])
        click.echo(
            f"zotsink: {r.spilled} records are safe in {', '.join(r.spill_paths)}; "
            f"run `{cmd}` when the cause is fixed",
            err=True,
        )
    if r.unterminated:
        say("note: the input did not end with a newline; one was added")
    done = f"{r.appended} bytes" if r.records is None else f"{r.records} records"
    say(f"{done} appended to {out} (lock wait {r.lock_wait:.3f} s)", level=1)
    if r.signal is not None:
        import signal as _signal

        name = _signal.Signals(r.signal).name
        done = "writing or spilling" if r.spilled else "writing"
        say(f"stopped by {name} after {done} everything read")
    return outcome_code(failed, r.rejected, r.signal)
