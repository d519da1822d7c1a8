"""``collect``: turn directories and tar archives of tiny files into one de-duplicated table.

Design: two passes, memory bounded by the number of distinct records, not of files.

1. Read. Files arrive in output order (:mod:`zotsink.collect_sources`: sorted walks, tar
   archives read in place and sorted). Each is parsed whole (:mod:`zotsink.collect_parse`;
   ``key:value`` lines by :func:`zotsink.records.parse_kv`) or skipped and listed. Its records
   are encoded at once over the columns known so far and written to a spool
   (:mod:`zotsink.collect_table`, :mod:`zotsink.collect_spool`: in memory up to 32 MiB, then
   an unlinked file in ``$TMPDIR``), while the union of fields grows in first-seen order.
   De-duplication keeps only 16-byte digests: a set of row digests (``exact``), or per key
   the digest, or ``(mtime, order, spool offset)`` of the winner (``key``, ``--keep last``).
2. Write. The header is now known. The spool is read back, each row completed with empty
   trailing cells, and appended to OUT through :class:`zotsink._core.writer.Writer` (the locked
   append path, header checked against an existing OUT) in batches of about 1 MiB that are
   cut only between files: a file's rows are all in OUT or none are.

``--skip-collected`` reads OUT first: the sources named in its source column are skipped,
the digests of its rows (or keys) seed the de-duplication, and the last source in OUT is read
again with its rows already in OUT left out, since a kill during a write can cut that source
short. An existing OUT's header seeds the column order, so a resumed collect writes the same
header. ``--archive``/``--remove-sources`` run after OUT is written and fsynced
(:mod:`zotsink.collect_archive`).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Final

from .._core.records import decode_row
from ..errors import HeaderMismatch, InputError, LockTimeout, WriteError
from .archive import Candidates, make_archive, remove_sources
from .options import Options, PathLike, check_options
from .parse import Unparsable, parse
from .sources import Exclude, iter_items
from .spool import Spool
from .table import OutState, Table, fixed_columns, read_out, source_digest

__all__ = ["CollectReport", "collect"]

#: Bytes per append: large enough that the lock is taken rarely, small enough to stream.
BATCH_BYTES: Final = 1 << 20
#: Files between two progress calls.
_PROGRESS_EVERY: Final = 512

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
        return f"<CollectReport {self.output}: {self.summary()}>"

    @property
    def files_per_second(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        """The one-line summary the command prints on stderr."""
        text = (
            f"{self.files} files, {self.records} records, {self.duplicates} duplicates dropped, "
            f"{self.conflicts} key conflicts, {len(self.skipped)} skipped"
        )
        if self.already:
            text += f", {self.already} already collected"
        return text + f", {self.seconds:.2f} s, {self.files_per_second:,.0f} files/s"


def _seed_header(o: Options, fixed: list[str]) -> list[str] | None:
    """OUT's existing data columns, which start the union; HeaderMismatch when it cannot fit."""
    from .._append import existing_header

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
) -> CollectReport:
    """Merge the tiny files of ``sources`` into the table ``output``; a :class:`CollectReport`.

    ``sources``: directories, files, tar archives, or ``-`` for a list of paths read from
    ``stdin`` (default ``sys.stdin``). The options are those of ``zotsink collect``.
    Raises :class:`UsageError` for options that cannot work, :class:`InputError` for a file
    that cannot be read or parsed under ``strict``, :class:`HeaderMismatch` when OUT has other
    columns (nothing written), and :class:`LockTimeout`/:class:`WriteError` when a batch could
    not be appended: it is then in the spill file named by the error, the batches before it
    are in OUT, and a rerun with ``skip_collected`` (after ``zotsink recover``) finishes.
    """
    t0 = time.perf_counter()
    o = check_options(
        sources, output, input=input, source_column=source_column, name_pattern=name_pattern,
        dedup=dedup, key=key, keep=keep, skip_collected=skip_collected, archive=archive,
        remove_sources=remove_sources, yes=yes, strict=strict, jobs=jobs, batch_bytes=batch_bytes,
    )  # fmt: skip
    rep = CollectReport(output=o.output, archive=o.archive)
    state: OutState | None = None
    if o.skip_collected and os.path.exists(o.output):
        state = read_out(o.output, o.fmt, o.source_column, o.dedup, o.key, lock, timeout)
        if state.torn:
            rep.notes.append(
                f"{o.output} ends in a torn line from an interrupted write: after this collect, "
                f"run `zotsink verify --repair {o.output}`"
            )
    spool = Spool(temp_dir)
    cands = Candidates(temp_dir) if (o.archive or o.remove) else None
    try:
        seeded = _seed_header(o, fixed_columns(o.source_column, o.pattern))
        table = Table(
            o.fmt, o.source_column, o.pattern, o.dedup, o.key, o.keep, spool, seeded, state
        )
        _read(o, table, rep, cands, stdin if stdin is not None else sys.stdin, temp_dir, progress)
        if o.dedup == "key":
            table.check_key()
        rep.header = tuple(table.columns)
        rep.duplicates, rep.conflicts, rep.unmatched = (
            table.duplicates, table.conflicts, table.unmatched,
        )  # fmt: skip
        _write(o, table, rep, lock, sync, timeout, progress)
        if cands is not None:
            _tidy(o, cands, table, rep)
    finally:
        spool.close()
        if cands is not None:
            cands.close()
    rep.seconds = time.perf_counter() - t0
    return rep


def _exclude(o: Options) -> Exclude:
    ex = Exclude()
    ex.add(o.output, prefixes=(".spill.", ".rejects", ".lock", ".tmp."))
    if o.archive:
        ex.add(o.archive, prefixes=(".tmp.",))
    return ex


def _read(
    o: Options,
    table: Table,
    rep: CollectReport,
    cands: Candidates | None,
    stdin: IO[str],
    temp_dir: str | None,
    progress: Progress | None,
) -> None:
    """Pass 1: read, parse and spool every file; skipped files are listed in ``rep``."""
    collected = table.state.sources if o.skip_collected else None
    want_stat = cands is not None or (o.dedup == "key" and o.keep == "last")
    items = iter_items(
        o.sources, stdin=stdin, jobs=o.jobs, want_stat=want_stat, exclude=_exclude(o),
        staging=temp_dir, notes=rep.notes,
        wanted=(lambda name: source_digest(name) not in collected) if collected else None,
    )  # fmt: skip
    inp, add, skipped = o.input, table.add, rep.skipped
    n = 0
    for n, it in enumerate(items, 1):
        if it.data is None:
            if it.skip is None:
                rep.already += 1
                continue
            if o.strict and it.fatal:
                raise InputError(f"{it.path or it.name}: {it.skip}", path=it.path)
            skipped.append((it.name, it.skip))
            continue
        try:
            recs = parse(it.data, it.base, inp)
        except Unparsable as e:
            if o.strict:
                raise InputError(
                    f"{it.path or it.name}: {e.reason}; nothing was written (--strict)",
                    path=it.path,
                ) from None
            skipped.append((it.name, e.reason))
            continue
        add(it.name, it.base, recs, it.mtime_ns, n)
        rep.files += 1
        if cands is not None and it.path is not None:
            cands.add(n, it.path, it.name, it.data, it.mtime_ns)
        if progress is not None and n % _PROGRESS_EVERY == 0:
            progress("read", rep.files, table.records)
    if progress is not None:
        progress("read", rep.files, table.records)


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
    if table.records == 0:
        return
    from .._core.sidefiles import append_or_save
    from .._core.writer import Writer

    with Writer(o.output, lock=lock, sync=sync, header=table.header_line()) as w:
        for data, rows in table.batches(o.batch_bytes):
            try:
                append_or_save(w, data, timeout)
            except (LockTimeout, WriteError) as e:
                e.message += (
                    f"; {rep.records} records were written before it: when the cause is fixed, "
                    f"run `zotsink recover {o.output}`, then this collect again with "
                    "--skip-collected"
                )
                raise
            rep.records += rows
            if progress is not None:
                progress("write", rep.records, table.records)
    if o.archive or o.remove:
        _fsync(o.output)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tidy(o: Options, cands: Candidates, table: Table, rep: CollectReport) -> None:
    """--archive, then --remove-sources, once OUT is written and fsynced."""
    inside = None
    if o.archive:
        inside = make_archive(cands, o.archive, rep.kept)
        rep.archived = sum(inside)
    if o.remove:
        rep.removed = remove_sources(cands, inside, table.losers, rep.kept)
