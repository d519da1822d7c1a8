"""``zotsink missing``: the job-array tasks that have no record in OUT yet.

INPUTS is the task list a job script reads one line of (``awk NR==$SLURM_ARRAY_TASK_ID``):
line N is task N. A task is done when OUT has a record whose key column holds the task's
line (compared exactly, or by base name, or by base name without its extension).
:func:`zotsink._arrays.array_spec` turns the missing line numbers into a Slurm ``--array``
spec.

Blank task lines (empty or only whitespace) are counted, because ``awk NR`` counts them,
but never reported: a task with nothing to work on cannot produce a record, and reporting
it would make every resubmission run it again.

Backslashes in a tsv OUT. Two kinds of writers share one OUT: ``producer | zotsink OUT``
passes a row through as it was printed (a task line ``data\\new\\file.txt`` lands as
typed), while the Python API escapes each value (``\\`` becomes ``\\\\``, TAB ``\\t``). The
bytes of a cell do not say which writer made them, so a cell counts for the task line it
spells either way: as it is, or unescaped. Only when those two readings are two different
task lines (``a\\\\b`` is the task ``a\\\\b`` written raw, or the task ``a\\b`` written
escaped) is the cell no proof for either: both are reported, with a warning. A task is
never taken for done on a record that another task may have written. csv cells are quoted,
never escaped; a lines OUT is bytes: both are compared as they are.
"""

from __future__ import annotations

import os
import posixpath
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Union

from .._core.records import format_for, unescape_tsv
from .._read import read_records
from ..errors import InputError, UsageError, ZotsinkWarning

__all__ = ["MATCHES", "missing", "missing_lines"]

#: Values of ``--match``.
MATCHES: Final = ("exact", "basename", "stem")
#: Ambiguous cells described one by one in the warning; the rest are counted.
_SHOW: Final = 5

Key = Union[str, int]


def _basename(value: str) -> str:
    return posixpath.basename(value.rstrip("/"))


def _stem(value: str) -> str:
    return posixpath.splitext(_basename(value))[0]


def _matcher(match: str) -> Callable[[str], str]:
    if match == "exact":
        return lambda v: v
    if match == "basename":
        return _basename
    if match == "stem":
        return _stem
    raise UsageError(f"unknown --match {match!r}: use one of {', '.join(MATCHES)}")


def _column(key: Key, first_row: list[str] | None, fmt: str, out: str) -> tuple[int, bool]:
    """The 0-based column index for ``key`` and whether OUT's first line is a header.

    Every way ``key`` can miss OUT is a usage error (exit 2): the command line names a
    column this OUT does not have. Answering "every task is missing" instead would make a
    resubmission script run the whole array again.
    """
    if isinstance(key, str) and first_row is not None and fmt != "lines" and key in first_row:
        return first_row.index(key), True
    number = key if isinstance(key, int) else int(key) if key.strip().isdigit() else None
    if number is None:
        if first_row is None:
            return 0, True  # OUT has no records yet: every task is missing, whatever the key
        if fmt == "lines":
            raise UsageError(
                f"{out} is in lines format: one column and no header; use --key 1, "
                "or --format tsv|csv to split its lines",
                path=out,
            )
        raise UsageError(
            f"{out} has no column {key!r}; its columns are: {', '.join(first_row)} "
            "(or give a 1-based column number)",
            path=out,
        )
    if number < 1:
        raise UsageError(f"--key {key!r}: column numbers start at 1", path=out)
    if fmt == "lines" and number != 1:
        raise UsageError(
            f"{out} is in lines format: the whole line is column 1; use --format tsv|csv "
            "to split its lines",
            path=out,
        )
    if first_row is not None and number > len(first_row):
        raise UsageError(
            f"--key {number}: {out} has {len(first_row)} columns"
            f" (its first line: {', '.join(first_row)}); give a number from 1 to "
            f"{len(first_row)} or a header name",
            path=out,
        )
    return number - 1, False


def _rows(out: str, fmt: str, lock: str, timeout: float) -> Iterator[list[str]]:
    """OUT's records as lists of cells as they are in the file (tsv: not unescaped)."""
    if fmt == "tsv":
        for row in read_records(out, format="lines", lock=lock, timeout=timeout):
            yield row[0].split("\t")  # type: ignore[index]
    else:
        yield from read_records(out, format=fmt, lock=lock, timeout=timeout)  # type: ignore[misc]


def _scan(
    out: str,
    key: Key,
    tasks: dict[str, int],
    norm: Callable[[str], str],
    fmt: str,
    lock: str,
    timeout: float,
) -> tuple[set[str], list[tuple[str, str, str]]]:
    """The task values OUT's column proves done, and the cells that could be two tasks.

    ``tasks``: each task value (matched) -> its first line number.
    """
    if not os.path.exists(out):
        raise InputError(
            f"{out} does not exist: no task has written to it yet (to resubmit them all, "
            "use the whole range)",
            path=out,
        )
    if os.path.isdir(out):
        raise InputError(f"{out} is a directory, not a zotsink output", path=out)
    rows = _rows(out, fmt, lock, timeout)
    first = next(rows, None)
    header = [unescape_tsv(c) for c in first] if fmt == "tsv" and first else first
    col, has_header = _column(key, header, fmt, out)
    done: set[str] = set()
    ambiguous: dict[str, tuple[str, str]] = {}
    escaped = fmt == "tsv"
    for row in rows if has_header or first is None else _chain(first, rows):
        if col >= len(row):  # a damaged shorter line holds no key: `zotsink verify` shows it
            continue
        cell = row[col]
        as_is = norm(cell)
        if not escaped or "\\" not in cell:
            if as_is in tasks:
                done.add(as_is)
            continue
        unescaped = norm(unescape_tsv(cell))
        hits = [v for v in dict.fromkeys((as_is, unescaped)) if v in tasks]
        if len(hits) == 1:
            done.add(hits[0])
        elif hits:
            ambiguous.setdefault(cell, (as_is, unescaped))
    return done, [(cell, a, b) for cell, (a, b) in ambiguous.items()]


def _warn_ambiguous(
    out: str, key: Key, cases: list[tuple[str, str, str]], tasks: dict[str, int]
) -> None:
    for cell, as_is, unescaped in cases[:_SHOW]:
        warnings.warn(
            f"{out}: the value {cell!r} in column {key} is the record of task line "
            f"{tasks[as_is]} ({as_is!r}) written as it is, or of task line {tasks[unescaped]} "
            f"({unescaped!r}) escaped as the Python API writes it; missing cannot tell "
            "which ran, so it lists both. Write such keys one way only (all through the "
            "API, or all as raw rows)",
            ZotsinkWarning,
            stacklevel=3,
        )
    if len(cases) > _SHOW:
        warnings.warn(
            f"{out}: {len(cases) - _SHOW} more values in column {key} could be the record "
            "of either of two task lines; those tasks are listed as missing too",
            ZotsinkWarning,
            stacklevel=3,
        )


def _input_lines(inputs: str | os.PathLike[str] | Iterable[str]) -> Iterator[str]:
    if isinstance(inputs, (str, os.PathLike)):
        name = os.fspath(inputs)
        if name == "-":
            yield from _decoded(sys.stdin.buffer)
            return
        try:
            f = open(name, "rb")  # noqa: SIM115 - closed below; a generator cannot use with early
        except FileNotFoundError:
            raise InputError(f"the task list {name} does not exist", path=name) from None
        except IsADirectoryError:
            raise InputError(
                f"the task list {name} is a directory, not a file", path=name
            ) from None
        with f:
            yield from _decoded(f)
    else:
        for line in inputs:
            yield line.rstrip("\n").rstrip("\r")


def _decoded(lines: Iterable[bytes]) -> Iterator[str]:
    for raw in lines:
        yield raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", "surrogateescape")


def missing_lines(
    inputs: str | os.PathLike[str] | Iterable[str],
    path: str | os.PathLike[str],
    key: Key,
    *,
    match: str = "exact",
    format: str | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of each task in ``inputs`` with no record in OUT, in order.

    ``inputs``: the task list file (``"-"`` for stdin) or an iterable of lines. A cell
    of a tsv OUT counts for the task it spells as it is or unescaped, but not when those
    are two different task lines (see the module's docstring; a :class:`ZotsinkWarning`
    names them). Raises :class:`UsageError` when ``key`` names no column of OUT.
    """
    out = os.fspath(path)
    fmt = format_for(out, format)
    norm = _matcher(match)
    # The whole task list first (a missing one is reported before OUT is read): a cell of
    # OUT is judged against every task line, and only the cells that are tasks are kept.
    lines = list(_input_lines(inputs))
    tasks: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if line.strip():
            tasks.setdefault(norm(line), number)
    done, ambiguous = _scan(out, key, tasks, norm, fmt, lock, timeout)
    if ambiguous:
        _warn_ambiguous(out, key, ambiguous, tasks)
    for number, line in enumerate(lines, 1):
        if line.strip() and norm(line) not in done:
            yield number, line


def _chain(first: list[str], rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield first
    yield from rest


def missing(
    inputs: str | os.PathLike[str] | Iterable[str],
    path: str | os.PathLike[str],
    key: Key,
    *,
    match: str = "exact",
    format: str | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[str]:
    """The lines of ``inputs`` (the task list) that have no record in OUT's column ``key``.

    ``key``: a header name, or a 1-based column number (then OUT may have no header).
    ``match``: ``exact``, ``basename`` or ``stem`` (base name without its extension).
    """
    for _number, line in missing_lines(
        inputs, path, key, match=match, format=format, lock=lock, timeout=timeout
    ):
        yield line
