"""``zotsink missing``: the job-array tasks that have no record in OUT yet.

INPUTS is the task list a job script reads one line of (``awk NR==$SLURM_ARRAY_TASK_ID``):
line N is task N. A task is done when OUT has a record whose key column holds the task's
line (compared exactly, or by base name, or by base name without its extension).
:func:`array_spec` turns the missing line numbers into a Slurm ``--array`` spec.

Blank task lines (empty or only whitespace) are counted, because ``awk NR`` counts them,
but never reported: a task with nothing to work on cannot produce a record, and reporting
it would make every resubmission run it again.
"""

from __future__ import annotations

import os
import posixpath
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Union

from .._core.records import format_for
from .._read import read_records
from ..errors import InputError, UsageError

__all__ = ["MATCHES", "array_spec", "done_keys", "missing", "missing_lines"]

#: Values of ``--match``.
MATCHES: Final = ("exact", "basename", "stem")

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
    """The 0-based column index for ``key`` and whether OUT's first line is a header."""
    if isinstance(key, str) and first_row is not None and fmt != "lines" and key in first_row:
        return first_row.index(key), True
    number = key if isinstance(key, int) else int(key) if key.strip().isdigit() else None
    if number is None:
        if first_row is None:
            return 0, True  # OUT has no records yet: every task is missing, whatever the key
        if fmt == "lines":
            raise UsageError(
                f"{out} is in lines format: one column and no header; use --key 1, "
                "or --format tsv|csv to split its lines"
            )
        # a data error (exit 1), not a usage error: the same --key works on another OUT
        raise InputError(
            f"{out} has no column {key!r}; its columns are: {', '.join(first_row)} "
            "(or give a 1-based column number)"
        )
    if number < 1:
        raise UsageError(f"--key {key!r}: column numbers start at 1")
    if fmt == "lines" and number != 1:
        raise UsageError(
            f"{out} is in lines format: the whole line is column 1; use --format tsv|csv "
            "to split its lines"
        )
    return number - 1, False


def done_keys(
    path: str | os.PathLike[str],
    key: Key,
    *,
    match: str = "exact",
    format: str | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> set[str]:
    """The values of OUT's column ``key`` (a header name or a 1-based number), matched."""
    out = os.fspath(path)
    fmt = format_for(out, format)
    norm = _matcher(match)
    if not os.path.exists(out):
        raise InputError(
            f"{out} does not exist: no task has written to it yet (to resubmit them all, "
            "use the whole range)",
            path=out,
        )
    if os.path.isdir(out):
        raise InputError(f"{out} is a directory, not a zotsink output", path=out)
    rows = read_records(out, format=fmt, lock=lock, timeout=timeout)
    first = next(rows, None)
    col, has_header = _column(key, first, fmt, out)
    keys: set[str] = set()
    if first is not None and not has_header and col < len(first):
        keys.add(norm(first[col]))
    for row in rows:
        if col < len(row):  # a damaged shorter line holds no key: `zotsink verify` shows it
            keys.add(norm(row[col]))
    return keys


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

    ``inputs``: the task list file (``"-"`` for stdin) or an iterable of lines.
    """
    lines = _input_lines(inputs)
    first = next(lines, None)  # a missing task list is reported before OUT is read
    keys = done_keys(path, key, match=match, format=format, lock=lock, timeout=timeout)
    norm = _matcher(match)
    if first is None:
        return
    for number, line in enumerate(_chain(first, lines), 1):
        if line.strip() and norm(line) not in keys:
            yield number, line


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
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


def array_spec(numbers: Iterable[int]) -> str:
    """A compact Slurm ``--array`` spec: ``[3, 7, 8, 9, 15]`` -> ``"3,7-9,15"``."""
    parts: list[str] = []
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            parts.append(_run(run))
        run = [n]
    if run:
        parts.append(_run(run))
    return ",".join(parts)


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"
