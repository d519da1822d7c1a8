"""``zotsink verify OUT``: the integrity report, and ``--repair``."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from ._common import (
    CONTEXT,
    counted,
    format_option,
    json_option,
    print_json,
    read_lock_options,
    run_api,
    say,
    set_verbosity,
)

if TYPE_CHECKING:
    from .. import ArchiveReport, VerifyReport


@click.command("verify", context_settings=CONTEXT)
@click.argument("out", type=click.Path())
@click.option("--repair", is_flag=True, help="Move every bad line to OUT.rejects (under the lock).")
@json_option
@click.option("--allow-duplicates", is_flag=True, help="Exact duplicate lines are not problems.")
@click.option("--no-header", is_flag=True, help="The first line of a tsv/csv OUT is a record.")
@format_option
@click.option(
    "--show",
    type=click.IntRange(0),
    default=5,
    show_default=True,
    metavar="N",
    help="Problems listed per kind on stderr.",
)
@read_lock_options
@click.option("-q", "--quiet", is_flag=True, help="No report on stderr, only the exit code.")
def verify_cmd(
    out: str,
    repair: bool,
    as_json: bool,
    allow_duplicates: bool,
    no_header: bool,
    fmt: str,
    show: int,
    lock: str,
    timeout: float,
    quiet: bool,
) -> None:
    """Check OUT: header, field counts, NUL bytes, fragments, empty and duplicate lines.

    \b
    Exit codes: 0 clean (or, with --repair, clean now), 1 problems found
    (with --repair: problems left, such as a damaged header), 2 usage,
    74 I/O error, 75 lock timeout.
    """
    from .. import is_pack_archive, verify

    set_verbosity(0, quiet)
    if is_pack_archive(out):  # a shared tar of `zotsink pack`: its own walk of the headers
        from .. import verify_archive

        rep = run_api(lambda: verify_archive(out, repair=repair, lock=lock, timeout=timeout))
        for line in archive_lines(rep, limit=show):
            say(line)
        if as_json:
            print_json(rep.to_dict())
        sys.exit(0 if rep.ok else 1)
    report = run_api(
        lambda: verify(
            out,
            format=fmt,
            header=False if no_header else None,
            allow_duplicates=allow_duplicates,
            repair=repair,
            lock=lock,
            timeout=timeout,
        )
    )
    for line in verify_lines(report, limit=show):
        say(line)
    if as_json:
        print_json(report.to_dict())
    sys.exit(0 if report.ok else 1)


def verify_lines(report: VerifyReport, limit: int = 5) -> list[str]:
    """OUT's report in words: a headline, then up to ``limit`` problems per kind."""
    from .._check.report import KEPT_KINDS, KINDS

    what = f"{report.path}: {counted(report.lines, 'line')}, {counted(report.records, 'record')}"
    note = []
    if report.unclaimed:
        note.append(
            f"{counted(report.unclaimed, 'line')} claimed by no ok attempt of the run (failed, "
            "interrupted or crashed attempts, or lines whose task number the task list gave "
            "to another line since): zotsink cat and read_records leave them out (cat --all "
            "shows them); not damage"
        )
    if not report.found:
        return [f"{what}, no problems", *note]
    out = [f"{what}, {counted(report.found, 'problem')}", *note]
    for num, why in report.untrusted[:limit]:
        out.append(
            f"  {report.path}: task {num}: its ok row claims records OUT does not hold: {why}"
        )
    if len(report.untrusted) > limit:
        out.append(f"  ... and {len(report.untrusted) - limit} more such tasks")
    if report.untrusted:
        out.append(
            "  those tasks' records are left out of the view; `zotsink status` counts them "
            "lost and the next `zotsink run` runs them again when OUT is another file or "
            "shorter (a change in place, same size or longer, only verify and cat see)"
        )
    for kind in KINDS:
        n = report.counts.get(kind, 0)
        if not n:
            continue
        listed = [p for p in report.problems if p.kind == kind][:limit]
        out += [f"  {report.path}:{p.line}: {kind}: {p.detail}" for p in listed]
        if n > len(listed):
            out.append(f"  ... and {n - len(listed)} more {kind} problems")
    if not report.counts:
        return out  # only claims OUT breaks: nothing a repair could move
    if report.repaired:
        left = report.found - report.moved
        out.append(
            f"moved {counted(report.moved, 'line')} to {report.rejects_path}"
            + (f"; {left} problems left in place (fix line 1 by hand)" if left else "")
        )
    elif all(p.kind in KEPT_KINDS and p.line == 1 for p in report.problems):
        out.append("fix line 1 by hand: a repair never moves the header")
    elif report.unclaimed is not None:
        # a run's OUT: its ledger names the records by their place, a repair is refused
        ext = os.path.splitext(report.path)[1]
        out.append(
            f"a run's OUT is not repaired in place (its ledger points at its records): "
            f"`zotsink cat {report.path} > COPY{ext}` writes each ok task's records once, "
            f"then `zotsink verify --repair COPY{ext}` repairs the copy"
        )
    else:
        out.append(
            f"run `zotsink verify --repair {report.path}` to move the damaged lines to "
            f"{report.repair_target}"
        )
    return out


def archive_lines(report: ArchiveReport, limit: int = 5) -> list[str]:
    """An archive's report in words: what repair did, up to ``limit`` problems, a total."""
    lines = [*report.repaired]
    lines += [f"{report.path}: {p}" for p in report.problems[:limit]]
    if len(report.problems) > limit:
        lines.append(f"{report.path}: ... and {len(report.problems) - limit} more problems")
    state = "ok" if report.ok else f"{len(report.problems)} problem(s)"
    sealed = ", sealed" if report.sealed else ""
    lines.append(
        f"{report.path}: {report.members} members, {report.indexed} index rows, "
        f"{report.size} bytes{sealed}: {state}"
    )
    return lines
