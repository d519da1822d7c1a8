"""``zotsink recover OUT [SPILL ...]``: spill files folded back into OUT."""

from __future__ import annotations

import sys

import click

from ._common import (
    CONTEXT,
    counted,
    quiet_option,
    read_lock_options,
    run_api,
    say,
    set_verbosity,
)


@click.command("recover", context_settings=CONTEXT)
@click.argument("out", type=click.Path())
@click.argument("spills", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@read_lock_options
@click.option("--force", is_flag=True, help="Also take spill files of writers still running.")
@quiet_option
def recover_cmd(
    out: str, spills: tuple[str, ...], lock: str, timeout: float, force: bool, quiet: bool
) -> None:
    """Append OUT's spill files (or the SPILLS named) to OUT, then remove them.

    \b
    SPILLS must be spill files of OUT (OUT.spill.<host>.<pid>[.<n>], in any
    directory); anything else is refused before anything is done.
    Exit codes: 0 all recovered, 1 some left (a writer still runs here, or a
    file could not be trusted: each is named), 2 usage (a file that is not a
    spill file of OUT), 74 I/O error, 75 lock timeout.
    """
    from .. import is_pack_archive, recover

    set_verbosity(0, quiet)
    if is_pack_archive(out):  # spill tars of `zotsink pack`: whole members, not lines
        from .. import recover_archive

        arep = run_api(
            lambda: recover_archive(out, list(spills) or None, lock=lock, timeout=timeout)
        )
        for left in arep.left:
            say(f"left {left}")
        say(
            f"recovered {counted(arep.members, 'member')} from "
            f"{counted(len(arep.files), 'spill tar')} into {out}"
            + (f" ({arep.skipped} were in it already)" if arep.skipped else "")
        )
        sys.exit(0 if arep.ok else 1)
    rep = run_api(
        lambda: recover(
            out, list(spills) if spills else None, lock=lock, timeout=timeout, force=force
        )
    )
    for p in rep.busy:
        say(f"left {p}: its writer is still running (use --force to take it anyway)")
    for p, why in rep.refused:
        say(f"left {p}: {why}")
    say(
        f"recovered {counted(rep.records, 'record')} from {counted(len(rep.files), 'spill file')}"
        f" into {out}"
    )
    sys.exit(0 if rep.ok else 1)
