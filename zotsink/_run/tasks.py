"""Task lists: which lines of TASKS an array element runs.

A task list has one task per line. Every line is numbered as awk's ``NR`` numbers it, so
task numbers stay the line numbers a user sees in an editor; blank lines and lines starting
with ``#`` are numbered but never run. Array element ``index`` with ``chunk`` K and ``base``
B runs the lines ``(index - B) * K + 1`` ... ``(index - B + 1) * K``.
"""

from __future__ import annotations

import os
from collections.abc import Container, Mapping, Sequence
from typing import Final, NamedTuple

from .._check.missing import array_spec
from ..errors import InputError, UsageError

__all__ = [
    "INDEX_VARS",
    "Task",
    "chunk_of",
    "chunk_range",
    "read_tasks",
    "scheduler_index",
    "split_spec",
    "task_argv",
    "task_lines",
]

#: Where schedulers put the array index, in the order they are looked at.
INDEX_VARS: Final = (
    "SLURM_ARRAY_TASK_ID",
    "SGE_TASK_ID",
    "PBS_ARRAY_INDEX",
    "PBS_ARRAYID",
    "LSB_JOBINDEX",
)


class Task(NamedTuple):
    """One runnable line of the task list."""

    num: int  # 1-based line number
    line: str  # the line without its newline


def read_tasks(
    path: str | os.PathLike[str], *, only: Container[int] | None = None
) -> tuple[list[Task], int]:
    """The runnable tasks of ``path`` and its number of lines.

    Lines are decoded as UTF-8 with surrogate escapes, so a file name in another encoding
    reaches the command byte for byte. ``only`` (a :func:`chunk_range`): just those task
    numbers, the others never made into objects.
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
    for num, text in enumerate(lines, 1):
        if only is not None and num not in only:
            continue
        if text.endswith("\r"):
            text = text[:-1]  # a task list saved on Windows
        if text.strip() and not text.lstrip().startswith("#"):
            tasks[num] = text
    return tasks, len(lines)


def scheduler_index(env: Mapping[str, str] | None = None) -> int | None:
    """This array element's index from the scheduler's variables, or None outside an array."""
    env = os.environ if env is None else env
    for var in INDEX_VARS:
        val = env.get(var, "")
        if not val or val == "undefined":  # SGE says "undefined" outside arrays
            continue
        if var == "LSB_JOBINDEX" and val == "0":  # LSF: 0 outside arrays
            continue
        try:
            return int(val)
        except ValueError:
            raise UsageError(f"{var}={val!r} is not an array index; give --index N") from None
    return None


def chunk_range(index: int, chunk: int, base: int) -> range:
    """Task numbers that array element ``index`` runs."""
    if chunk < 1:
        raise UsageError(f"--chunk must be at least 1, not {chunk}")
    first = (index - base) * chunk + 1
    if first < 1:
        raise UsageError(
            f"array index {index} is below --base {base}: it would run task {first}; "
            "check --base (0 for arrays that start at 0)"
        )
    return range(first, first + chunk)


def chunk_of(tasknum: int, chunk: int, base: int) -> int:
    """The array index whose chunk holds task ``tasknum``."""
    return (tasknum - 1) // chunk + base


def split_spec(chunks: Sequence[int], base: int, max_array: int | None) -> list[tuple[str, int]]:
    """Array specs for the chunk numbers ``chunks`` (1-based), each with the base to run it.

    Chunk c runs as index ``c - 1 + base``. When the largest index would not stay below
    ``max_array`` (Slurm's MaxArraySize: indices run up to MaxArraySize - 1), the chunks are
    split into groups that each fit, and each group gets its own base, so index ``a`` of a
    group still runs chunk ``a - base + 1``.
    """
    if not chunks:
        return []
    if max_array is None or max(chunks) - 1 + base < max_array:
        return [(array_spec(c - 1 + base for c in chunks), base)]
    low = max(base, 0)  # the smallest index a group uses: the user's own base, never negative
    cap = max_array - low  # chunks per group
    if cap < 1:
        raise UsageError(f"--max-array {max_array} leaves no index at or above --base {base}")
    groups: dict[int, list[int]] = {}
    for c in sorted(set(chunks)):
        groups.setdefault((c - 1) // cap, []).append(c)
    out = []
    for g, members in sorted(groups.items()):
        b = low - g * cap
        out.append((array_spec(c - 1 + b for c in members), b))
    return out


def task_argv(command: Sequence[str], line: str, shell: bool) -> list[str]:
    """The command line for a task: ``{}`` replaced by the line, else the line appended;
    with ``shell`` the line itself, for ``/bin/sh -c``. Nothing else is interpreted."""
    if shell:
        return ["/bin/sh", "-c", line]
    if any("{}" in a for a in command):
        return [a.replace("{}", line) for a in command]
    return [*command, line]
