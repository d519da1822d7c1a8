"""``zotsink append``, ``zotsink cat`` and ``zotsink recover``."""

from __future__ import annotations

import os
import sys

import click

from ..errors import HeaderMismatch, LockError, LockTimeout, WriteError
from ..locking import LOCK_KINDS
from ..writer import SYNC_POLICIES
from . import fail, run_api, say, set_verbosity

_LOCK = click.Choice(LOCK_KINDS)
_SYNC = click.Choice(SYNC_POLICIES)


def _columns(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c.strip() for c in value.split(",")]


@click.command("append", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("out", type=click.Path(dir_okay=True))
@click.argument("records", nargs=-1)
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["auto", "tsv", "csv", "lines"]),
    default="auto",
    show_default=True,
    help="auto: .tsv/.tab -> tsv, .csv -> csv, else lines.",
)
@click.option("--columns", metavar="A,B,C", help="The header; checked against OUT's header.")
@click.option(
    "--kv", metavar="[SEP]", help="Input lines are key:value tokens (SEP ':' by default, or '=')."
)
@click.option(
    "--stamp",
    metavar="[FIELDS]",
    help="Prepend provenance: any of time,host,pid,job,task (bare --stamp: time,host,job,task).",
)
@click.option("--lock", type=_LOCK, default="auto", show_default=True, help="Lock kind.")
@click.option(
    "--sync",
    type=_SYNC,
    default="auto",
    show_default=True,
    help="auto: fsync before unlock on network and FUSE filesystems.",
)
@click.option(
    "--timeout",
    type=float,
    default=600.0,
    show_default=True,
    help="Longest wait for the lock (s); then the records are spilled, exit 75.",
)
@click.option(
    "--batch-bytes",
    type=int,
    default=65536,
    show_default=True,
    help="Write a batch when it reaches this size ...",
)
@click.option(
    "--flush-interval",
    type=float,
    default=1.0,
    show_default=True,
    help="... or when its oldest line is this many seconds old.",
)
@click.option(
    "--whole", is_flag=True, help="Buffer all of stdin and append it as one block at the end."
)
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
@click.option("-v", "--verbose", count=True, help="Report what was done.")
def append_cmd(
    out: str,
    records: tuple[str, ...],
    fmt: str,
    columns: str | None,
    kv: str | None,
    stamp: str | None,
    lock: str,
    sync: str,
    timeout: float,
    batch_bytes: int,
    flush_interval: float,
    whole: bool,
    quiet: bool,
    verbose: int,
) -> None:
    """Append RECORDS, or the lines of stdin, to OUT: each record whole, under a lock.

    \b
    Exit codes: 0 all written, 1 records refused (see OUT.rejects) or header
    mismatch, 2 usage, 74 I/O error and 75 lock timeout (records saved to a spill
    file: run `zotsink recover OUT`), 128+N after signal N.
    """
    from ..records import parse_stamp
    from ..stream import Stopper, append_stream

    set_verbosity(verbose, quiet)
    stamp_fields = run_api(lambda: parse_stamp(stamp)) if stamp is not None else ()
    opts = dict(
        format=fmt,
        columns=_columns(columns),
        kv=kv,
        stamp=stamp_fields,
        lock=lock,
        sync=sync,
        timeout=timeout,
        batch_bytes=batch_bytes,
        flush_interval=flush_interval,
        whole=whole,
    )
    if records:
        data = b"".join(os.fsencode(r) + b"\n" for r in records)
        report = run_api(lambda: append_stream(out, None, data=data, **opts))
    else:
        if sys.stdin is None:
            fail("no standard input to read records from; give RECORDS as arguments", 2)
        with Stopper() as stopper:
            report = run_api(
                lambda: append_stream(out, sys.stdin.fileno(), stopper=stopper, **opts)
            )
    sys.exit(_report(out, report))


def _report(out: str, r: object) -> int:
    """Say what happened; the exit code (the spec's order: signal, I/O, timeout, refusals)."""
    from ..sidefiles import find_spills
    from ..stream import StreamReport

    assert isinstance(r, StreamReport)
    code = 0
    if r.rejected:
        why = "header mismatch" if isinstance(r.error, HeaderMismatch) else "refused"
        click.echo(
            f"zotsink: {r.rejected} records {why}; they are in {r.rejects_path}"
            + (f" ({r.error.message})" if isinstance(r.error, HeaderMismatch) else ""),
            err=True,
        )
        code = 1
    if isinstance(r.error, (LockError, WriteError)):  # LockTimeout is a LockError
        # Once, however many batches failed: the first error says why and where they went.
        click.echo(f"zotsink: error: {r.error}", err=True)
        code = 75 if isinstance(r.error, LockTimeout) else 74
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
    say(f"{r.records} records appended to {out} (lock wait {r.lock_wait:.3f} s)", level=1)
    if r.signal is not None:
        import signal as _signal

        name = _signal.Signals(r.signal).name
        done = "writing or spilling" if r.spilled else "writing"
        say(f"stopped by {name} after {done} everything read")
        code = 128 + r.signal
    return code


@click.command("cat", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("out", type=click.Path())
@click.option("--lock", type=_LOCK, default="auto", show_default=True)
@click.option("--timeout", type=float, default=600.0, show_default=True)
def cat_cmd(out: str, lock: str, timeout: float) -> None:
    """Print a consistent copy of OUT: never a half-written batch."""
    from ..api import iter_snapshot, snapshot

    fd, size = run_api(lambda: snapshot(out, lock=lock, timeout=timeout))
    sink = sys.stdout.buffer
    try:
        for chunk in iter_snapshot(fd, size):
            sink.write(chunk)
        sink.flush()
    except BrokenPipeError:
        # `zotsink cat out | head`: the reader left; that is not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


@click.command("recover", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("out", type=click.Path())
@click.argument("spills", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--lock", type=_LOCK, default="auto", show_default=True)
@click.option("--timeout", type=float, default=600.0, show_default=True)
@click.option("--force", is_flag=True, help="Also take spill files of writers still running.")
@click.option("-q", "--quiet", is_flag=True)
def recover_cmd(
    out: str, spills: tuple[str, ...], lock: str, timeout: float, force: bool, quiet: bool
) -> None:
    """Append OUT's spill files (or the SPILLS named) to OUT, then remove them."""
    from ..sidefiles import recover

    set_verbosity(0, quiet)
    rep = run_api(
        lambda: recover(
            out, list(spills) if spills else None, lock=lock, timeout=timeout, force=force
        )
    )
    for p in rep.busy:
        say(f"left {p}: its writer is still running (use --force to take it anyway)")
    say(f"recovered {rep.records} records from {len(rep.files)} spill files into {out}")
    sys.exit(1 if rep.busy else 0)
