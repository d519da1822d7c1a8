"""``collect``: turn directories and tar archives of tiny files into one de-duplicated table.

Design: two passes, memory bounded by the number of distinct records, not of files.

1. Read. Files arrive in output order (:mod:`zotsink._collect.sources`: sorted walks, tar
   archives read in place and sorted). Each is parsed whole (:mod:`zotsink._collect.parse`;
   ``key:value`` lines by :func:`zotsink._core.kv.parse_kv`) or skipped and listed; under
   ``--input auto`` the files of plain lines wait in a table of their own until the vote on
   the collection's layout (:mod:`zotsink._collect.layout`) keeps one kind. Its records
   are encoded at once over the columns known so far and written to a spool
   (:mod:`zotsink._collect.table`, :mod:`zotsink._collect.spool`: in memory up to 32 MiB, then
   an unlinked file in ``$TMPDIR``), while the union of fields grows in first-seen order.
   De-duplication keeps only 16-byte digests: a set of row digests (``exact``), or per key
   the digest, or ``(mtime, order, spool offset)`` of the winner (``key``, ``--keep last``).
   A one-line ``key:value`` file with the keys of files before it takes a quick lane to the
   same bytes (:class:`zotsink._collect.quicklane.QuickLane`), at half the cost.
2. Write. The header is now known. The spool is read back, each row completed with empty
   trailing cells, and appended to OUT through :class:`zotsink._core.writer.Writer` (the locked
   append path, header checked against an existing OUT) in batches of about 1 MiB that are
   cut only between files: a file's rows are all in OUT or none are.

An existing OUT is read first: the digests of its rows (or keys) seed the de-duplication,
so the same collect run twice adds nothing the second time. ``--skip-collected`` also skips
the sources named in its source column, and reads the last source in OUT again with its
rows already in OUT left out, since a kill during a write can cut that source short. An
existing OUT's header seeds the column order, so a resumed collect writes the same header.
``--archive``/``--remove-sources`` run after OUT is written and fsynced
(:mod:`zotsink._collect.archive`).

A ``.jsonl`` or ``.parquet`` OUT is no append target: the spool is kept as TSV and written
whole at the end by :mod:`zotsink._collect.export`.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Final

from .._core.fileio import split_lines
from .._core.options import write_options
from .._core.records import decode_row
from ..errors import HeaderMismatch, InputError, LockError, WriteError
from .archive import Candidates, make_archive, remove_sources
from .layout import FIELDS, LINES, Layout, held, misfit, winner
from .options import Options, PathLike, check_options
from .parse import Unparsable, parse
from .quicklane import QuickLane
from .read import MAX_FILE_SIZE
from .sources import Exclude, count_items, iter_items
from .spool import Spool
from .table import OutState, Table, fixed_columns, read_out, source_digest

__all__ = ["CollectReport", "collect"]

#: Bytes per append: large enough that the lock is taken rarely, small enough to stream.
BATCH_BYTES: Final = 1 << 20
#: Files between two progress calls.
_PROGRESS_EVERY: Final = 512
#: Files between two moves of the layouts' file names to their spools.
_SPILL_EVERY: Final = 4096

#: ``progress(phase, done, total)``: phase ``read`` (files and skipped entries; total 0 while
#: unknown, as for an archive) or ``write`` (records).
Progress = Callable[[str, int, int], None]


class CollectReport:
    """What one collect did. ``skipped`` and ``kept`` list ``(source, reason)`` pairs."""

    def __init__(self, output: str, archive: str | None = None) -> None:
        self.output = output
        self.header: tuple[str, ...] = ()
        self.files = 0  # files read and collected
        self.records = 0  # rows written to OUT
        self.duplicates = 0  # records dropped as identical to one kept (or already in OUT)
        self.conflicts = 0  # records dropped because another record with their key won
        self.skipped: list[tuple[str, str]] = []  # files not collected, and why
        self.already = 0  # sources left out because OUT names them (--skip-collected)
        self.unmatched = 0  # files whose name --name-pattern did not match
        self.seconds = 0.0
        self.archive = archive
        self.archived = 0
        self.removed = 0
        self.kept: list[tuple[str, str]] = []  # collected files not removed, and why
        self.notes: list[str] = []  # things the user should know

    def __repr__(self) -> str:
        return (
            f"<CollectReport {self.output}: {self.files} files, {self.records} records, "
            f"{len(self.skipped)} skipped>"
        )

    @property
    def files_per_second(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        """The report as JSON-ready data."""
        return {
            "output": self.output,
            "header": list(self.header),
            "files": self.files,
            "records": self.records,
            "duplicates": self.duplicates,
            "conflicts": self.conflicts,
            "skipped": [{"source": s, "reason": r} for s, r in self.skipped],
            "already": self.already,
            "unmatched": self.unmatched,
            "seconds": round(self.seconds, 3),
            "files_per_second": round(self.files_per_second, 1),
            "archive": self.archive,
            "archived": self.archived,
            "removed": self.removed,
            "kept": [{"source": s, "reason": r} for s, r in self.kept],
            "notes": list(self.notes),
        }


def _seed_header(o: Options, fixed: list[str]) -> list[str] | None:
    """OUT's existing data columns, which start the union; HeaderMismatch when it cannot fit."""
    from .._core.header import existing_header

    line = existing_header(o.output)
    if line is None:
        return None
    names = decode_row(line.rstrip(b"\n").decode("utf-8", "surrogateescape"), o.fmt)
    if names[: len(fixed)] != fixed:
        raise HeaderMismatch(
            f"{o.output} starts with the columns {','.join(names[: len(fixed) + 2])}, but "
            f"collect writes {','.join(fixed) or 'the fields'} first; nothing was written: "
            "choose another OUT, or --source-column/--name-pattern to match",
            path=o.output,
        )
    return names[len(fixed) :]


def collect(
    sources: Sequence[PathLike] | PathLike,
    output: PathLike,
    *,
    input: str = "auto",
    source_column: str = "source",
    name_pattern: str | re.Pattern[str] | None = None,
    dedup: str = "exact",
    key: str | Sequence[str] | None = None,
    keep: str = "first",
    skip_collected: bool = False,
    archive: PathLike | None = None,
    remove_sources: bool = False,
    yes: bool = False,
    strict: bool = False,
    jobs: int | None = None,
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
    batch_bytes: int = BATCH_BYTES,
    progress: Progress | None = None,
    stdin: IO[str] | None = None,
    temp_dir: str | None = None,
    min_age: float | None = None,
    max_file_size: int | str = MAX_FILE_SIZE,
    force: bool = False,
) -> CollectReport:
    """Merge the tiny files of ``sources`` into the table ``output``; a :class:`CollectReport`.

    ``sources``: directories, files, tar archives, or ``-`` for a list of paths read from
    ``stdin`` (default ``sys.stdin``). The options are those of ``zotsink collect``.
    ``min_age`` (seconds; default 3600 with ``remove_sources``, else 0): a file modified
    more recently is collected but not removed. ``max_file_size`` (bytes, or ``"16M"``): a
    bigger file or archive member is skipped unread (an error under ``strict``). ``force``:
    replace a ``.jsonl`` or ``.parquet`` OUT that exists (atomically, once the new one is
    whole); without it such an OUT is refused.
    Raises :class:`UsageError` for options that cannot work, :class:`InputError` for a file
    that cannot be read or parsed under ``strict``, :class:`HeaderMismatch` when OUT has other
    columns (nothing written), and :class:`LockTimeout`/:class:`WriteError` when a batch could
    not be appended: it is then in the spill file named by the error, the batches before it
    are in OUT, and a rerun with ``skip_collected`` (after ``zotsink recover``) finishes.
    """
    t0 = time.perf_counter()
    since_ns = time.time_ns()
    # the options every record writer shares, refused in the same words as everywhere
    write_options(lock=lock, sync=sync, timeout=timeout, batch_bytes=batch_bytes)
    o = check_options(
        sources,
        output,
        input=input,
        source_column=source_column,
        name_pattern=name_pattern,
        dedup=dedup,
        key=key,
        keep=keep,
        skip_collected=skip_collected,
        archive=archive,
        remove_sources=remove_sources,
        yes=yes,
        strict=strict,
        jobs=jobs,
        batch_bytes=batch_bytes,
        min_age=min_age,
        max_file_size=max_file_size,
        force=force,
    )
    rep = CollectReport(output=o.output, archive=o.archive)
    state: OutState | None = None
    if (o.skip_collected or o.dedup != "none") and not o.whole and _has_rows(o.output):
        state = read_out(
            o.output, o.fmt, o.source_column, o.dedup, o.key, lock, timeout, skip=o.skip_collected
        )
        if state.torn:
            rep.notes.append(
                f"{o.output} ends in a torn line from an interrupted write: after this collect, "
                f"run `zotsink verify --repair {o.output}`"
            )
    spools: list[Spool] = []
    cands = Candidates(temp_dir) if (o.archive or o.remove) else None
    try:
        # a whole OUT is written new: a file there (--force) has no say in the columns
        seeded = None if o.whole else _seed_header(o, fixed_columns(o.source_column, o.pattern))

        def new_table() -> Table:
            spools.append(Spool(temp_dir))
            return Table(
                "tsv" if o.whole else o.fmt,
                o.source_column,
                o.pattern,
                o.dedup,
                o.key,
                o.keep,
                spools[-1],
                seeded,
                state,
            )

        src = stdin if stdin is not None else sys.stdin
        table = _read(o, new_table, rep, cands, src, temp_dir, progress)
        if o.dedup == "key":
            table.check_key()
        rep.header = tuple(table.columns)
        rep.duplicates = table.duplicates
        rep.conflicts = table.conflicts
        rep.unmatched = table.unmatched
        _write(o, table, rep, lock, sync, timeout, progress)
        if cands is not None:
            _tidy(o, cands, table, rep, since_ns)
    finally:
        for spool in spools:
            spool.close()
        if cands is not None:
            cands.close()
    rep.seconds = time.perf_counter() - t0
    return rep


def _has_rows(path: str) -> bool:
    try:
        return os.stat(path).st_size > 0
    except FileNotFoundError:
        return False


def _exclude(o: Options) -> Exclude:
    ex = Exclude()
    ex.add(o.output, prefixes=(".spill.", ".rejects", ".lock", ".tmp."))
    if o.archive:
        ex.add(o.archive, prefixes=(".tmp.",))
    return ex


def _read(
    o: Options,
    new_table: Callable[[], Table],
    rep: CollectReport,
    cands: Candidates | None,
    stdin: IO[str],
    temp_dir: str | None,
    progress: Progress | None,
) -> Table:
    """Pass 1: read, parse and spool every file; skipped files are listed in ``rep``. The
    table of the files collected: under ``--input auto``, those of the layout most files
    have (:mod:`zotsink._collect.layout`)."""
    if o.input != "auto":
        table = new_table()
        _read_files(o, table, [], rep, cands, stdin, temp_dir, progress, new_table)
        return table
    layouts = [Layout(FIELDS, new_table(), temp_dir)]  # and the lines, once a file has them
    try:
        table = layouts[0].table
        out = held(table.columns[len(table.fixed) :])  # seeded from OUT's header
        _read_files(o, table, layouts, rep, cands, stdin, temp_dir, progress, new_table)
        won, lost = winner(layouts[0], layouts[1] if len(layouts) > 1 else None, out)
        if lost is not None:
            why = misfit(lost, won, out)
            if o.strict:
                raise InputError(f"{lost.first}: {why}; nothing was written (--strict)")
            rep.skipped.extend((name, why) for name in lost.names)
            rep.files -= lost.files
            if cands is not None:
                cands.leave_out(set(lost.numbers))
        return won.table
    finally:
        for layout in layouts:
            layout.close()


def _read_files(
    o: Options,
    table: Table,
    layouts: list[Layout],
    rep: CollectReport,
    cands: Candidates | None,
    stdin: IO[str],
    temp_dir: str | None,
    progress: Progress | None,
    new_table: Callable[[], Table],
) -> None:
    """Every file read and added to ``table``; with ``layouts`` (``--input auto``), a file
    of plain lines goes to a table of its own, and each file with records is counted in its
    layout."""
    collected = table.state.sources if o.skip_collected else None
    want_stat = cands is not None or (o.dedup == "key" and o.keep == "last")
    items = iter_items(
        o.sources,
        stdin=stdin,
        jobs=o.jobs,
        want_stat=want_stat,
        exclude=_exclude(o),
        staging=temp_dir,
        notes=rep.notes,
        wanted=(lambda name: source_digest(name) not in collected) if collected else None,
        limit=o.max_file_size,
    )
    inp, add, skipped = o.input, table.add, rep.skipped
    fields = layouts[0] if layouts else None
    if fields is not None:  # for the quick lane's files: bound once
        field_no, field_name = fields.numbers.append, fields.names.append
    # files like the ones before skip parse and Table.add (in the usual directory all but two)
    lane = QuickLane(table, inp) if QuickLane.usable(table, inp) else None
    take = lane.take if lane is not None else None
    total = 0
    if progress is not None:  # a second walk of the listings, only for a progress display
        total = count_items(o.sources, _exclude(o)) or 0
        progress("read", 0, total)
    n = 0
    for n, it in enumerate(items, 1):
        if progress is not None and n % _PROGRESS_EVERY == 0:
            progress("read", n, max(total, n))
        if it.data is None:
            if it.skip is None:
                rep.already += 1
                continue
            if o.strict and it.fatal:
                raise InputError(f"{it.path or it.name}: {it.skip}", path=it.path)
            skipped.append((it.name, it.skip))
            continue
        if take is None or not take(it.data, it.name, it.base):
            try:
                fmt, recs = parse(it.data, it.base, inp)
            except Unparsable as e:
                if o.strict:
                    raise InputError(
                        f"{it.path or it.name}: {e.reason}; nothing was written (--strict)",
                        path=it.path,
                    ) from None
                skipped.append((it.name, e.reason))
                continue
            if fields is not None and recs and fmt == "lines":
                if len(layouts) == 1:
                    layouts.append(Layout(LINES, new_table(), temp_dir))
                layouts[1].table.add(it.name, it.base, recs, it.mtime_ns, n)
                layouts[1].add(n, it.name, it.path or it.name)
            else:
                add(it.name, it.base, recs, it.mtime_ns, n)
                if fields is not None and recs:  # a file without records has no vote
                    fields.add(n, it.name, it.path or it.name)
                if lane is not None:
                    lane.learn(it.data, recs)
        elif fields is not None:  # the lane takes no layout's first file: it learns from two
            field_no(n)
            field_name(it.name)
        if not n % _SPILL_EVERY:
            for layout in layouts:
                layout.names.spill()
        rep.files += 1
        if cands is not None and it.path is not None:
            cands.add(n, it.path, it.name, it.data, it.mtime_ns, it.root)
    if progress is not None:
        progress("read", n, n)


def _write(
    o: Options,
    table: Table,
    rep: CollectReport,
    lock: str,
    sync: str,
    timeout: float,
    progress: Progress | None,
) -> None:
    """Pass 2: the spooled rows to OUT, in batches cut only between files."""
    if o.whole:
        _write_whole(o, table, rep, progress)
        return
    if table.records == 0:
        return
    from .._core.outlet import Outlet
    from .._core.writer import Writer

    writer = Writer(o.output, lock=lock, sync=sync, header=table.header_line())
    with Outlet(writer, timeout=timeout) as outlet:
        for data, rows in table.batches(o.batch_bytes):
            err = outlet.write(data, rows)
            if err is not None:
                if isinstance(err, (LockError, WriteError)):  # LockTimeout is a LockError
                    err.message += (
                        f"; {rep.records} records were written before it: when the cause is "
                        f"fixed, run `zotsink recover {o.output}`, then this collect again "
                        "with --skip-collected"
                    )
                raise err
            rep.records += rows
            if progress is not None:
                progress("write", rep.records, table.records)
    if o.archive or o.remove:
        _fsync(o.output)


def _write_whole(o: Options, table: Table, rep: CollectReport, progress: Progress | None) -> None:
    """A .jsonl or .parquet OUT: the spooled TSV rows, typed, written whole."""
    from .export import write_whole

    n = len(table.columns)

    def rows() -> Iterator[list[str]]:
        # a batch is whole rows, each ending in a newline: no piece is left over
        for line in split_lines(data for data, _count in table.batches(o.batch_bytes)):
            cells = decode_row(line.decode("utf-8", "surrogateescape"), "tsv")
            yield cells if len(cells) == n else cells + [""] * (n - len(cells))

    rep.records, _types = write_whole(o.output, o.fmt, table.columns, rows, o.force)
    if progress is not None:
        progress("write", rep.records, table.records)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tidy(o: Options, cands: Candidates, table: Table, rep: CollectReport, since_ns: int) -> None:
    """--archive, then --remove-sources, once OUT is written and fsynced."""
    inside = None
    if o.archive:
        inside = make_archive(cands, o.archive, rep.kept)
        rep.archived = sum(inside)
    if o.remove:
        rep.removed = remove_sources(cands, inside, table.losers, rep.kept, o.min_age, since_ns)
