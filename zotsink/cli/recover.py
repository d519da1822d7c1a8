"""``zotsink recover OUT [SPILL ...]``: spill files folded back into OUT."""

from __future__ import annotations

import sys

import click

from ._common import CONTEXT, lock_options, quiet_option, run_api, say, set_verbosity


@click.command("recover", context_settings=CONTEXT)
@click.argument("out", type=click.Path())
@click.argument("spills", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@lock_options
@click.option("--force", is_flag=True, help="Also take spill files of writers still running.")
@quiet_option
def recover_cmd(
    out: str, spills: tuple[str, ...], lock: str, timeout: float, force: bool, quiet: bool
) -> None:
    """Append OUT's spill files (or the SPILLS named) to OUT, then remove them."""
    from .._recover import recover

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
