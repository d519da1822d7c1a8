"""The options of ``collect``, checked before anything is read."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Final, NamedTuple, Union

from .._core.outcheck import check_out
from ..errors import UsageError
from .archive import MIN_AGE, archive_mode
from .export import WHOLE, check_whole_target, output_format
from .parse import INPUTS
from .read import MAX_FILE_SIZE

__all__ = ["DEDUP_MODES", "Options", "PathLike", "check_options"]

DEDUP_MODES: Final = ("exact", "key", "none")

PathLike = Union[str, "os.PathLike[str]"]


class Options(NamedTuple):
    """The checked options of one collect."""

    sources: list[str]
    output: str
    fmt: str
    input: str
    source_column: str
    pattern: re.Pattern[str] | None
    dedup: str
    key: list[str]
    keep: str
    skip_collected: bool
    archive: str | None
    remove: bool
    strict: bool
    jobs: int | None
    batch_bytes: int
    min_age: float  # seconds (--remove-sources)
    max_file_size: int  # bytes
    force: bool = False  # replace a .jsonl/.parquet OUT

    @property
    def whole(self) -> bool:
        """OUT is written whole (jsonl, parquet), not appended to."""
        return self.fmt in WHOLE


def _names(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [k.strip() for k in items if k.strip()]


def _check_place(what: str, path: str) -> None:
    # found now, not after reading a million files
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise UsageError(f"{what} {path}: the directory {d} does not exist; create it first")


def check_options(
    sources: Sequence[PathLike] | PathLike,
    output: PathLike,
    *,
    input: str,
    source_column: str,
    name_pattern: str | re.Pattern[str] | None,
    dedup: str,
    key: str | Sequence[str] | None,
    keep: str,
    skip_collected: bool,
    archive: PathLike | None,
    remove_sources: bool,
    yes: bool,
    strict: bool,
    jobs: int | None,
    batch_bytes: int,
    min_age: float | None = None,
    max_file_size: int | str = MAX_FILE_SIZE,
    force: bool = False,
) -> Options:
    """Validate the options before anything is read; UsageError says what to change."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    srcs = [os.fspath(s) for s in sources]
    if not srcs:
        raise UsageError("no SOURCE given: name directories, files, tar archives or - for stdin")
    for s in srcs:
        if s != "-" and not os.path.lexists(s):
            raise UsageError(f"SOURCE {s} does not exist")
    out = os.fspath(output)
    check_out(out)  # the writer's own refusals, before a million files are read
    _check_place("OUT", out)
    if os.path.isdir(out):
        raise UsageError(f"OUT {out} is a directory; name a file inside it")
    fmt = output_format(out)
    if fmt in WHOLE:
        if skip_collected:
            raise UsageError(
                f"--skip-collected resumes a table that is appended to; a .{fmt} OUT is "
                "written whole: collect into .tsv or .csv to resume"
            )
        check_whole_target(out, fmt, force)
    elif force:
        raise UsageError(
            f"--force replaces a .jsonl or .parquet OUT, which is written whole; {out} is "
            f"appended to: leave --force out"
        )
    if input not in INPUTS:
        raise UsageError(f"unknown --input {input!r}: use one of {', '.join(INPUTS)}")
    if dedup not in DEDUP_MODES:
        raise UsageError(f"unknown --dedup {dedup!r}: use one of {', '.join(DEDUP_MODES)}")
    if keep not in ("first", "last"):
        raise UsageError(f"unknown --keep {keep!r}: use first or last")
    keys = _names(key)
    if dedup == "key" and not keys:
        raise UsageError("--dedup key needs --key COLS (the columns that identify a record)")
    if keys and dedup != "key":
        raise UsageError("--key is used by --dedup key: add --dedup key")
    if keep != "first" and dedup != "key":
        raise UsageError("--keep chooses between records with the same key: add --dedup key")
    pattern = None
    if name_pattern is not None and name_pattern != "":
        try:
            pattern = re.compile(name_pattern) if isinstance(name_pattern, str) else name_pattern
        except re.error as e:
            raise UsageError(f"--name-pattern is not a valid regular expression: {e}") from None
        if not pattern.groupindex:
            raise UsageError("--name-pattern needs named groups, such as run_(?P<run>\\d+)\\.dat")
        if source_column in pattern.groupindex:
            raise UsageError(
                f"--name-pattern group {source_column!r} clashes with the source column"
            )
    if skip_collected and not source_column:
        raise UsageError("--skip-collected reads OUT's source column: do not set it empty")
    arch = os.fspath(archive) if archive is not None else None
    if arch is not None:
        if archive_mode(arch) is None:
            raise UsageError(f"--archive {arch}: name it .tar, .tar.gz, .tgz, .tar.bz2 or .tar.xz")
        if os.path.lexists(arch):
            raise UsageError(f"--archive {arch} exists already; choose a new name")
        _check_place("--archive", arch)
    if remove_sources and arch is None and not yes:
        raise UsageError(
            "--remove-sources deletes the collected files: add --archive FILE.tar.gz to keep a "
            "verified copy first, or --yes to delete them without one"
        )
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {jobs}")
    # batch_bytes, with lock, sync and timeout, was checked by write_options, as every
    # record writer checks them
    return Options(
        sources=srcs,
        output=out,
        fmt=fmt,
        input=input,
        source_column=source_column,
        pattern=pattern,
        dedup=dedup,
        key=keys,
        keep=keep,
        skip_collected=skip_collected,
        archive=arch,
        remove=remove_sources,
        strict=strict,
        jobs=jobs,
        batch_bytes=batch_bytes,
        min_age=check_min_age(min_age, remove_sources),
        max_file_size=parse_size(max_file_size),
        force=force,
    )


#: The longest --min-age: ten years, a bound that keeps the arithmetic exact.
_MAX_AGE: Final = 10 * 365 * 86400.0


def check_min_age(value: float | str | None, remove: bool) -> float:
    """--min-age in seconds: finite, 0 or more; its default is MIN_AGE (with removal)."""
    if value is None:
        return MIN_AGE if remove else 0.0
    try:
        age = float(value)
    except (TypeError, ValueError):
        age = math.nan
    if not (0 <= age <= _MAX_AGE):  # also refuses nan
        raise UsageError(
            f"--min-age must be a number of seconds from 0 to {_MAX_AGE:.0f}, not {value!r}"
        )
    return age


_UNITS: Final = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: int | str) -> int:
    """--max-file-size: bytes, or a number with K, M, G, T (binary units: 16M = 16 MiB)."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        m = re.fullmatch(r"\s*([0-9]+)\s*([kmgtKMGT]?)(?:i?[bB])?\s*", str(value))
        if m is None:
            raise UsageError(
                f"--max-file-size must be a size such as 16M, 512K or 1G (bytes), not {value!r}"
            )
        n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if n < 1:
        raise UsageError(f"--max-file-size must be at least one byte, not {value!r}")
    return n
