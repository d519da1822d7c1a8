"""``zotsink add``: whole task lines appended to a task list while runs may be reading it.

The lines go through the one locked append path (a :class:`~zotsink._core.writer.Writer`
of the ``lines`` format, through an :class:`~zotsink._core.outlet.Outlet`), in one write
under the task list's exclusive lock: producers adding at once never interleave, and a
torn tail (a line without its newline) is ended first, as in any OUT. Under the same lock
the lines already there are counted, so the task numbers returned are exact: task N is
line N, 1-based, as :mod:`zotsink._run.tasks` numbers it.

A line that could never be a task is refused before anything is written: a NUL byte, a
newline inside, over :data:`~zotsink._core.records.MAX_LINE` (the rule ``append`` refuses
by). A line the task list would number but never run (blank, or a ``#`` comment, by
the one rule of :func:`~zotsink._run.tasks.skipped`: Unicode whitespace counts as blank;
a producer's spacing, a note) is left out, and a warning counts them; the others are
added. Given only such lines, nothing is added and it is an error: no task came. Nothing
is ever spilled: lines that are not in the list have no task number, so a lock timeout
raises and the producer adds them again.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable

from .._core.fileio import pread_chunks
from .._core.outlet import Outlet
from .._core.records import Encoder
from .._core.stop import Stopper
from .._core.writer import Writer, seen_to
from ..errors import RecordError, ZotsinkWarning
from .tasks import skipped

__all__ = ["add_tasks", "count_lines"]


def count_lines(fd: int, size: int) -> int:
    """How many lines the first ``size`` bytes of the open file hold, numbered as
    :func:`~zotsink._run.tasks.task_lines` numbers them: a last line without its newline
    counts."""
    count = 0
    last = b"\n"
    for chunk in pread_chunks(fd, size, 1 << 22):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")


def _encode(lines: Iterable[str | bytes]) -> tuple[bytes, int, int]:
    """The lines as one block, each checked (RecordError names the first refused one); how
    many lines it holds, and how many were left out (blank, or ``#`` comments)."""
    enc = Encoder("lines")
    parts: list[bytes] = []
    left_out = 0
    for n, line in enumerate(lines, 1):
        try:
            data = enc.encode(line)
        except RecordError as e:
            raise RecordError(
                f"task line {n} of the input: {e.message}; nothing was added"
            ) from None
        if skipped(data[:-1]) is not None:
            left_out += 1  # numbered but never run: no task
            continue
        parts.append(data)
    return b"".join(parts), len(parts), left_out


def add_tasks(
    tasks: str | os.PathLike[str],
    lines: Iterable[str | bytes],
    *,
    lock: str = "auto",
    sync: str = "auto",
    timeout: float = 600.0,
    stopper: Stopper | None = None,
) -> range:
    """Append ``lines`` to the task list ``tasks`` (created when missing) as whole lines, in
    one write under its exclusive lock; the task numbers they got (empty when none given).
    A line may end with its newline (the lines of a file read in binary: ``lines`` may be
    the file itself); any other newline in it is refused. Blank and ``#`` lines are left
    out, with a :class:`ZotsinkWarning` that counts them.

    Raises :class:`RecordError` for a line that cannot be a task (nothing written), and
    when every line given was blank or a ``#`` comment (no task came),
    :class:`LockTimeout` when the lock did not come within ``timeout`` seconds, and
    :class:`WriteError` on an I/O error; then nothing was added and no line is saved
    elsewhere: add them again.
    """
    path = os.fspath(tasks)
    data, count, left_out = _encode(lines)
    if left_out and not count:
        given = (
            "the line given is blank or a # comment"
            if left_out == 1
            else f"all {left_out} lines given are blank or # comments"
        )
        raise RecordError(
            f"no task line to add to {path}: {given}, which a task list never runs (nothing "
            "was added)"
        )
    if not count:
        return range(1, 1)
    before = [-1]

    def numbered(fd: int, st: os.stat_result, block: bytes) -> bytes:
        # under the lock: what is in the list now says where these lines begin
        size = st.st_size
        seen_to(fd, size)  # a network client may still read a cached, shorter file
        before[0] = count_lines(fd, size)
        return block

    writer = Writer(path, lock=lock, sync=sync, prepare=numbered)
    outlet = Outlet(writer, timeout=timeout, stopper=stopper)
    try:
        outlet.write_or_raise(data)
    finally:
        outlet.close()
    first = before[0] + 1
    if left_out:
        warnings.warn(
            ZotsinkWarning(
                f"left out {left_out} blank or # line{'' if left_out == 1 else 's'}, which a "
                f"task list never runs; added the other {count} to {path}"
            ),
            stacklevel=2,
        )
    return range(first, first + count)
