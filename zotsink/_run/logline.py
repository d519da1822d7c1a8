"""The log's lines: ``TASKNUM.ATTEMPT<TAB>text``, one line of a task's stderr each.

``run`` writes them (:class:`~zotsink._run.pool.Pool`), the ``zotsink-array.*`` job
templates write the same from the shell (``--stamp tasknum`` with ``ZOTSINK_TASKNUM`` set
to ``TASK.ATTEMPT``), and ``status --failed`` reads them. The attempt sits in the first
field, after a dot, so that a log begun by an older release (``TASKNUM<TAB>text``, no
attempt) reads without doubt: its first field never holds a dot, and a stderr line that
begins with a number and a tab stays text. ``grep -P '^12\\.3\\t' OUT.log`` picks one
attempt, ``awk -F'\\t'`` sees two fields as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple

from .._core.fileio import capped_lines

__all__ = ["LogLine", "log_line", "log_lines", "parse_log_line"]

#: Bytes of a line's start that may come before its text (``TASKNUM.ATTEMPT<TAB>``).
_HEAD_ROOM: Final = 64


class LogLine(NamedTuple):
    """One line of the log, parsed."""

    tasknum: int
    attempt: int | None  # None: a line of an older log, which had no attempt
    text: bytes


def log_line(tasknum: int, attempt: int, text: bytes) -> bytes:
    """The log line for ``text`` (one stderr line, no newline) of a task's attempt."""
    # a NUL byte would end the line for C tools reading the log: written as \0
    return b"%d.%d\t%s\n" % (tasknum, attempt, text.replace(b"\0", b"\\0"))


def parse_log_line(line: bytes) -> LogLine | None:
    """A log line (without its newline) parsed; None when it is not a log line."""
    head, tab, text = line.partition(b"\t")
    if not tab:
        return None
    num, dot, attempt = head.partition(b".")
    if not num.isdigit() or (dot and not attempt.isdigit()):
        return None
    return LogLine(tasknum=int(num), attempt=int(attempt) if dot else None, text=text)


def log_lines(chunks: Iterable[bytes], keep: int) -> Iterator[LogLine]:
    """The log lines of a stream of chunks, parsed, each text cut to its first ``keep``
    bytes; a final piece with no newline (a line still being written) is left out. No line
    is held whole (:func:`~zotsink._core.fileio.capped_lines`): a crash can leave a run of
    zero bytes where lines were being written."""
    for line in capped_lines(chunks, keep + _HEAD_ROOM):
        parsed = parse_log_line(line)
        if parsed is not None:
            yield parsed._replace(text=parsed.text[:keep])
