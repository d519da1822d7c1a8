"""Task lists: the lines of TASKS, numbered, and the command line of each.

A task list has one task per line. Every line is numbered as awk's ``NR`` numbers it, so
task numbers stay the line numbers a user sees in an editor; blank lines and lines starting
with ``#`` are numbered but never run. Which lines an array element runs is the arithmetic
of :mod:`zotsink._arrays`.

Which lines run is ONE rule, :func:`skipped` (and :func:`runs`), for every reader of a task
list (:func:`task_lines`, :func:`task_of`) and for ``zotsink add``, which refuses a line
that would be numbered and never run: a line is decoded as UTF-8 (other bytes kept as
surrogate escapes) and stripped of Unicode whitespace (a no-break space, an ideographic
space, the ASCII separators, a trailing CR); what is left must be something, and not begin
with ``#``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Container, Iterable, Sequence
from typing import NamedTuple

from .._core.backoff import HEADER_SETTLE, tries
from .._core.fileio import fresh_stat, line_blocks
from ..errors import InputError

__all__ = [
    "Cursor",
    "Task",
    "lines_of",
    "read_ahead",
    "read_tail",
    "read_tasks",
    "runs",
    "skipped",
    "task_argv",
    "task_lines",
    "task_of",
]


class Task(NamedTuple):
    """One runnable line of the task list."""

    num: int  # 1-based line number
    line: str  # the line without its newline


def read_tasks(
    path: str | os.PathLike[str], *, only: Container[int] | None = None
) -> tuple[list[Task], int]:
    """The runnable tasks of ``path`` and its number of lines.

    Lines are decoded as UTF-8 with surrogate escapes, so a file name in another encoding
    reaches the command byte for byte. ``only`` (a :func:`~zotsink._arrays.chunk_range`):
    just those task numbers, the others never made into objects.
    """
    lines, count = task_lines(path, only=only)
    return [Task(num, text) for num, text in lines.items()], count


def task_lines(
    path: str | os.PathLike[str], *, only: Container[int] | None = None
) -> tuple[dict[int, str], int]:
    """The runnable lines of ``path`` by task number (of ``only``, when given), and its
    number of lines: what :func:`read_tasks` gives, without a :class:`Task` per line (for a
    task list of millions of lines, memory that ``status`` does not need)."""
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise InputError(f"task list {p} does not exist", path=p) from None
    except IsADirectoryError:
        raise InputError(f"task list {p} is a directory; give a file", path=p) from None
    except OSError as e:
        raise InputError(f"cannot read task list {p}: {e.strerror or e}", path=p) from None
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise InputError(
            f"task list {p} line {line} holds a NUL byte: is it a binary file?", path=p
        )
    # Decoded whole, then split: a newline never sits inside a UTF-8 sequence, so this is
    # line by line, and each line is one object instead of two.
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    del data
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it starts no new one
    tasks: dict[int, str] = {}
    numbered: Iterable[tuple[int, str]] = enumerate(lines, 1)
    if isinstance(only, (set, frozenset, dict)) and len(only) < len(lines):
        # a look's few tasks of a long list: those lines only, not a test per line
        numbered = ((n, lines[n - 1]) for n in sorted(only) if 0 < n <= len(lines))
        only = None
    for num, text in numbered:
        if only is not None and num not in only:
            continue
        if text.endswith("\r"):
            text = text[:-1]  # a task list saved on Windows
        if runs(text):
            tasks[num] = text
    return tasks, len(lines)


def task_of(num: int, raw: bytes) -> Task | None:
    """Line ``num`` of a task list (its bytes, no newline) as a task; None when it never
    runs (blank, ``#``). The rule of :func:`task_lines`, one line at a time."""
    text = raw.decode("utf-8", "surrogateescape")
    if text.endswith("\r"):
        text = text[:-1]
    return Task(num, text) if runs(text) else None


def skipped(line: bytes | str) -> str | None:
    """Why a line of a task list (without its newline; bytes, or text decoded with
    surrogate escapes) is numbered but never run: ``"blank"`` (nothing but Unicode
    whitespace), ``"a comment"`` (``#`` after the whitespace); None when it runs."""
    text = line.decode("utf-8", "surrogateescape") if isinstance(line, bytes) else line
    text = text.strip()
    if not text:
        return "blank"
    return "a comment" if text.startswith("#") else None


def runs(line: bytes | str) -> bool:
    """Whether a line of a task list ever runs (see :func:`skipped`)."""
    return skipped(line) is None


def read_tail(path: str | os.PathLike[str], offset: int) -> bytes:
    """The bytes of the task list ``path`` from ``offset`` to its end (a followed list:
    only what was appended since the last look is read)."""
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        raise InputError(f"task list {p} does not exist", path=p) from None
    except OSError as e:
        raise InputError(f"cannot read task list {p}: {e.strerror or e}", path=p) from None
    if b"\0" in data:
        raise InputError(f"task list {p} holds a NUL byte: is it a binary file?", path=p)
    return data


def task_argv(command: Sequence[str], line: str, shell: bool) -> list[str]:
    """The command line for a task: ``{}`` replaced by the line, else the line appended;
    with ``shell`` the line itself, for ``/bin/sh -c``. Nothing else is interpreted."""
    if shell:
        return ["/bin/sh", "-c", line]
    if any("{}" in a for a in command):
        return [a.replace("{}", line) for a in command]
    return [*command, line]


class Cursor(NamedTuple):
    """Where a claim by the cursor ended: the next line's number and byte offset, and the
    CRC of the bytes from the cursor's old place to its new one."""

    next: int
    at: int
    span: int
    span_crc: int


def read_ahead(
    path: str | os.PathLike[str],
    start: Cursor,
    want: int,
    *,
    skip: Callable[[int], bool],
    closed_lines: int | None,
    coherent: bool = False,
) -> tuple[list[Task], Cursor, list[int]]:
    """Up to ``want`` tasks of the task list from ``start`` (a claim's cursor, under the
    ledger's lock): the tasks, where the cursor is after them, and the numbers of lines
    with a NUL byte passed by (no task: a producer that wrote binary, or the zero bytes a
    crashed network client leaves).

    The list's bytes the last claim went over (``start.span`` bytes ending at ``start.at``)
    must be the ones that claim read (their CRC, ``start.span_crc``): a list rewritten
    under the runs (emptied and filled anew, truncated, edited) raises
    :class:`InputError`, and nothing is claimed. On a network filesystem (``coherent``)
    that is judged only once this client has read the list again from the server for
    :data:`.backoff.HEADER_SETTLE`'s budget: a client that has not yet seen lines another
    node's claim read (``zotsink add`` through another mount) reads them short or as zero
    bytes for a moment. Lines are taken whole; a last line without its newline is being
    written and waits, unless the list is closed at ``closed_lines`` lines and it is one
    of them. ``skip(num)``: a line claimed by name since (another run's chunk), passed
    over."""
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise InputError(f"cannot read task list {p}: {e.strerror or e}", path=p) from None
    try:
        window = max(1 << 16, 256 * want)
        while True:
            data = _read_from(fd, p, start, start.span + window, coherent)
            eof = len(data) < start.span + window
            tasks, cursor, bad, more = _take(data, start, want, skip, closed_lines, eof)
            if not more or eof:
                return tasks, cursor, bad
            window *= 4  # a window of long lines, or of lines passed over: read further
    finally:
        os.close(fd)


#: A local disk's read is the file as it is: one read judges.
_AT_ONCE = HEADER_SETTLE.replace(tries=1)


def _read_from(fd: int, p: str, start: Cursor, n: int, coherent: bool) -> bytes:
    """``n`` bytes of the list open at ``fd`` from the start of the last claim's span,
    once those the span covers are the ones it read (see :func:`read_ahead`)."""
    import zlib

    begin = start.at - start.span
    for last in tries(HEADER_SETTLE if coherent else _AT_ONCE):
        data = os.pread(fd, n, begin)
        if not start.span or zlib.crc32(data[: start.span]) == start.span_crc:
            return data
        if last:
            break
        fresh_stat(fd, True)  # the server's answer refreshes what this client caches
    raise InputError(
        f"the task list {p} changed under the runs: its bytes before byte "
        f"{start.at} are no longer the lines they claimed (emptied, truncated, "
        "edited or replaced); lines may only ever be added at its end "
        f"(`zotsink add {p} LINE`): nothing more is claimed",
        path=p,
    )


def _take(
    data: bytes,
    start: Cursor,
    want: int,
    skip: Callable[[int], bool],
    closed_lines: int | None,
    eof: bool,
) -> tuple[list[Task], Cursor, list[int], bool]:
    import zlib

    tasks: list[Task] = []
    bad: list[int] = []
    pos = start.span
    num = start.next
    for lines, whole in line_blocks((data[pos:],)):
        if len(tasks) >= want:
            break
        if not whole and (not eof or closed_lines is None or num > closed_lines):
            break  # being written (or past what was read): it waits for its newline
        for raw in lines:
            if len(tasks) >= want:
                break
            pos += len(raw) + (1 if whole else 0)
            if b"\0" in raw:
                bad.append(num)
            elif not skip(num):
                task = task_of(num, raw)
                if task is not None:
                    tasks.append(task)
            num += 1
    more = len(tasks) < want and pos >= len(data)
    span = pos - start.span
    crc = zlib.crc32(data[start.span : pos])
    return tasks, Cursor(num, start.at + span, span, crc), bad, more


def lines_of(path: str | os.PathLike[str], nums: Container[int]) -> dict[int, str]:
    """The runnable lines of ``path`` among the task numbers ``nums`` (a look at the tasks
    of other runs, whose lines are needed: what a claim proves it claimed)."""
    lines, _count = task_lines(path, only=nums)
    return lines
