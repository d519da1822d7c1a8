"""``zotsink pack``: append files (or stdin) as members of one shared tar."""

from __future__ import annotations

import click

from ._common import (
    CONTEXT,
    complete_list,
    lock_options,
    quiet_option,
    run_api,
    say,
    set_verbosity,
    stamp_field_choices,
    sync_option,
    verbose_option,
)

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class _Size(click.ParamType):
    """Bytes, with an optional K, M, G or T suffix (powers of 1024)."""

    name = "BYTES"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("B").removesuffix("I")
        unit = text[-1:] if text[-1:] in _UNITS else ""
        number = text[: len(text) - len(unit)]
        if not number.isdigit():
            self.fail(f"{value!r} is not a size such as 65536, 512K or 4G", param, ctx)
        return int(number) * _UNITS[unit]


@click.command("pack", context_settings=CONTEXT)
@click.argument("archive", type=click.Path(dir_okay=False))
@click.argument("files", nargs=-1, required=True)
@click.option("--name", help="The member's name (one FILE; required for stdin, -).")
@click.option(
    "--prefix",
    help="Put members under this directory [default: <job>_<task>/ in a job array].",
)
@click.option(
    "--stamp",
    metavar="[FIELDS]",
    shell_complete=complete_list(stamp_field_choices),
    help="Build the default prefix from these of time,host,pid,job,task,tasknum,attempt "
    "[default: job,task].",
)
@click.option("--replace", is_flag=True, help="Add a member even if its name is taken.")
@click.option("--seal", is_flag=True, help="End the archive with zero blocks (for export).")
@click.option(
    "--max-member",
    type=_Size(),
    default="4G",
    show_default=True,
    help="Refuse members larger than this.",
)
@lock_options
@sync_option
@quiet_option
@verbose_option
def pack_cmd(
    archive: str,
    files: tuple[str, ...],
    name: str | None,
    prefix: str | None,
    stamp: str | None,
    replace: bool,
    seal: bool,
    max_member: int,
    lock: str,
    timeout: float,
    sync: str,
    quiet: bool,
    verbose: int,
) -> None:
    """Append FILEs (or stdin, -) as members of the tar ARCHIVE, under a lock.

    The members of one command are adjacent; ARCHIVE stays a plain tar that tar, bsdtar,
    Python's tarfile, ratarmount and webdataset read. ARCHIVE.idx lists the members.
    Under `zotsink run` each member records its task and attempt, and a retry of a
    task may append the names of its earlier attempts again (tar extracts the last).

    \b
    Exit codes: 0 appended, 1 a FILE refused or a name already in ARCHIVE (nothing
    appended), 2 usage, 74 I/O error and 75 lock timeout (members saved to a spill
    tar: run `zotsink recover ARCHIVE`).
    """
    from .. import pack_files

    set_verbosity(verbose, quiet)
    rows = run_api(
        lambda: pack_files(
            archive,
            list(files),
            name=name,
            prefix=prefix,
            stamp=stamp,
            replace=replace,
            seal=seal,
            max_member=max_member,
            lock=lock,
            sync=sync,
            timeout=timeout,
        )
    )
    for r in rows:
        say(f"{archive}: {r.name} ({r.size} bytes) at offset {r.offset}", level=1)
