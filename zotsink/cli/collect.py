"""``zotsink collect``: options in, :func:`zotsink.collect` called, report out."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from ._common import (
    CONTEXT,
    counted,
    fail,
    lock_options,
    quiet_option,
    run_api,
    say,
    set_verbosity,
    sync_option,
)

if TYPE_CHECKING:
    from .. import CollectReport


def render(phase: str, done: int, total: int, seconds: float, width: int = 30) -> str:
    """One progress line, in click.progressbar's look: a bar, done/total, percent, rate and
    ETA once the total is known; the count and rate alone while it is not."""
    what = "files" if phase == "read" else "records"
    verb = "reading" if phase == "read" else "writing"
    rate = done / seconds if seconds > 0 else 0.0
    if total <= 0:
        return f"{verb}: {done:,} {what}  {rate:,.0f} {what}/s"
    frac = min(done / total, 1.0)
    fill = int(frac * width)
    bar = "#" * fill + "-" * (width - fill)
    eta = ""
    if rate > 0:
        left = int((total - done) / rate + 0.5)
        eta = f"  ETA {left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}"
    return f"{verb}: [{bar}]  {done:,}/{total:,}  {frac:4.0%}  {rate:,.0f} {what}/s{eta}"


class _Bar:
    """The progress line on stderr (a terminal), redrawn at most ten times a second, and
    always at the end of a phase."""

    def __init__(self) -> None:
        self.last = 0.0
        self.drawn = False
        self.phase = ""
        self.t0 = time.monotonic()

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase != self.phase:
            self.phase, self.t0 = phase, now
        elif now - self.last < 0.1 and done != total:
            return
        self.last = now
        sys.stderr.write(f"\r\x1b[Kzotsink: {render(phase, done, total, now - self.t0)}")
        sys.stderr.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


@click.command("collect", context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, allow_dash=True))
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="The table (OUT).")
@click.option(
    "--input",
    "input_",
    type=click.Choice(["auto", "kv", "tsv", "csv", "jsonl", "lines"]),
    default="auto",
    show_default=True,
    help="How each file is parsed. auto sniffs every file, then keeps the layout most "
    "files have (records, or plain lines) and skips and lists the others.",
)
@click.option(
    "--source-column",
    default="source",
    show_default=True,
    metavar="NAME",
    help="Column naming each record's file (relative to its SOURCE); '' for none.",
)
@click.option("--name-pattern", metavar="REGEX", help="Named groups over the file name: columns.")
@click.option(
    "--dedup",
    type=click.Choice(["exact", "key", "none"]),
    default="exact",
    show_default=True,
    help="exact: identical records once; key: one record per --key.",
)
@click.option("--key", metavar="COLS", help="Columns identifying a record (--dedup key).")
@click.option(
    "--keep",
    type=click.Choice(["first", "last"]),
    default="first",
    show_default=True,
    help="Which record of a key: first in path order, or last = newest by mtime.",
)
@click.option("--skip-collected", is_flag=True, help="Skip sources OUT already names (resume).")
@click.option(
    "--archive",
    metavar="FILE.tar.gz",
    type=click.Path(dir_okay=False),
    help="Pack the collected files into a new archive, verified by reading it back.",
)
@click.option(
    "--remove-sources",
    is_flag=True,
    help="Then delete the collected files (needs --archive, or --yes).",
)
@click.option("--yes", is_flag=True, help="Let --remove-sources delete without an archive.")
@click.option(
    "--min-age",
    metavar="SECONDS",
    help="--remove-sources keeps files modified less than SECONDS ago  [default: 3600].",
)
@click.option(
    "--max-file-size",
    metavar="SIZE",
    default="16M",
    show_default=True,
    help="Skip (and list) files and archive members bigger than SIZE (K, M, G).",
)
@click.option("--strict", is_flag=True, help="A file that cannot be read or parsed is an error.")
@click.option(
    "--force", is_flag=True, help="Replace a .jsonl or .parquet OUT that exists (atomically)."
)
@click.option(
    "--jobs", type=click.IntRange(min=1), help="Parallel readers [default: 1 local, 8 network]."
)
@click.option("--progress/--no-progress", default=None, help="[default: on when stderr is a TTY]")
@lock_options
@sync_option
@click.option(
    "--batch-bytes",
    type=click.IntRange(min=1),
    default=1 << 20,
    show_default=True,
    help="Bytes per locked append (a file's rows are never split).",
)
@quiet_option
@click.option("-v", "--verbose", count=True, help="Also show OUT's columns.")
def collect_cmd(
    sources: tuple[str, ...],
    out: str,
    input_: str,
    source_column: str,
    name_pattern: str | None,
    dedup: str,
    key: str | None,
    keep: str,
    skip_collected: bool,
    archive: str | None,
    remove_sources: bool,
    yes: bool,
    min_age: str | None,
    max_file_size: str,
    strict: bool,
    force: bool,
    jobs: int | None,
    progress: bool | None,
    lock: str,
    sync: str,
    timeout: float,
    batch_bytes: int,
    quiet: bool,
    verbose: int,
) -> None:
    """Merge the tiny files of SOURCE... (directories, files, tar archives, - for a list of
    paths on stdin) into one de-duplicated table OUT, through the locked append path.
    OUT ending in .jsonl or .parquet is written whole instead (a new file; --force
    replaces one that exists).

    \b
      zotsink collect results/ -o results.tsv
      find results -name '*.txt' | zotsink collect - -o results.tsv
      zotsink collect runs/ -o runs.csv --name-pattern 'run_(?P<run>\\d+)'
      zotsink collect results/ -o results.tsv --archive results.tar.gz --remove-sources

    \b
    Exit codes: 0 done (skipped files are listed), 1 a file cannot be parsed under
    --strict or OUT has other columns, 2 usage, 74/75 a batch could not be appended
    (it is in a spill file: run `zotsink recover OUT`, then collect again with
    --skip-collected).
    """
    from .. import collect

    set_verbosity(verbose, quiet)
    show = sys.stderr.isatty() if progress is None else progress
    bar = _Bar() if show and not quiet else None

    def call() -> CollectReport:
        try:
            return collect(
                list(sources),
                out,
                input=input_,
                source_column=source_column,
                name_pattern=name_pattern,
                dedup=dedup,
                key=key,
                keep=keep,
                skip_collected=skip_collected,
                archive=archive,
                remove_sources=remove_sources,
                yes=yes,
                min_age=min_age,
                max_file_size=max_file_size,
                strict=strict,
                force=force,
                jobs=jobs,
                lock=lock,
                sync=sync,
                timeout=timeout,
                batch_bytes=batch_bytes,
                progress=bar,
            )
        finally:
            if bar is not None:
                bar.clear()  # before any error message, which would land on the bar's line

    try:
        rep = run_api(call)
    except KeyboardInterrupt:
        # OUT holds whole files only (each file's rows go in one write): say how to go on
        fail("interrupted; to finish, run the same collect with --skip-collected", 130)
    for name, why in rep.skipped:
        say(f"skipped {name}: {why}")
    for note in rep.notes:
        say(note)
    if rep.unmatched:
        say(f"{rep.unmatched} file names did not match --name-pattern: their groups are empty")
    if rep.archive:
        say(f"archived {rep.archived} files in {rep.archive} (verified)")
    if remove_sources:
        say(f"removed {rep.removed} collected files; kept {len(rep.kept)}")
    for name, why in rep.kept:
        say(f"{name}: {why}")
    say(f"columns of {out}: {','.join(rep.header)}", level=1)
    say(f"collected into {out}: {collect_summary(rep)}")


def collect_summary(report: CollectReport) -> str:
    """The one line that ends ``zotsink collect``'s report on stderr."""
    text = (
        f"{counted(report.files, 'file')}, {counted(report.records, 'record')}, "
        f"{counted(report.duplicates, 'duplicate')} dropped, "
        f"{counted(report.conflicts, 'key conflict')}, {len(report.skipped)} skipped"
    )
    if report.already:
        text += f", {report.already} already collected"
    return text + f", {report.seconds:.2f} s, {report.files_per_second:,.0f} files/s"
