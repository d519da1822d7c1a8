"""``zotsink cat OUT``: a consistent snapshot of OUT on stdout."""

from __future__ import annotations

import sys

import click

from ._common import CONTEXT, lock_options, run_api, stdout_closed


@click.command("cat", context_settings=CONTEXT)
@click.argument("out", type=click.Path())
@lock_options
def cat_cmd(out: str, lock: str, timeout: float) -> None:
    """Print a consistent copy of OUT: never a half-written batch."""
    from .._read import iter_snapshot, snapshot

    fd, size = run_api(lambda: snapshot(out, lock=lock, timeout=timeout))
    sink = sys.stdout.buffer
    try:
        for chunk in iter_snapshot(fd, size):
            sink.write(chunk)
        sink.flush()
    except BrokenPipeError:
        stdout_closed()
