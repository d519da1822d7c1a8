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
from typing import Final, NamedTuple, Protocol

from .._core.fileio import capped_lines, line_blocks

__all__ = ["LOG_HEAD", "LogLine", "LogLines", "log_line", "log_lines", "parse_log_line"]

#: Bytes of a line's start that may come before its text (``TASKNUM.ATTEMPT<TAB>``).
_HEAD_ROOM: Final = 64
#: The bytes of a line over the limit that go to the log (the rest is counted).
LOG_HEAD: Final = 1024


class LogLine(NamedTuple):
    """One line of the log, parsed."""

    tasknum: int
    attempt: int | None  # None: a line of an older log, which had no attempt
    text: bytes


def log_line(tasknum: int, attempt: int, text: bytes) -> bytes:
    """The log line for ``text`` (one stderr line, no newline) of a task's attempt."""
    # a NUL byte would end the line for C tools reading the log: written as \0
    return b"%d.%d\t%s\n" % (tasknum, attempt, text.replace(b"\0", b"\\0"))


class _Log(Protocol):
    def add(self, data: bytes, count: int) -> None: ...


class LogLines:
    """Where the lines of a pipe that is for a person go (a task's stderr, a function
    worker's prints): the log, each under its task's number and attempt (task 0: the run's
    own). A line over the limit has its head logged and a note of its length.
    A :class:`~zotsink._core.pump.LineSink`. ``last``: where the last line that is not
    blank is kept, under (task number, attempt)."""

    __slots__ = ("attempt", "last", "log", "num")

    def __init__(
        self, log: _Log, num: int, attempt: int, last: dict[tuple[int, int], bytes] | None = None
    ) -> None:
        self.log = log
        self.num = num
        self.attempt = attempt
        self.last = last

    def line(self, text: bytes) -> None:
        self.log.add(log_line(self.num, self.attempt, text), 1)  # the one writer of the format
        if self.last is not None and text.strip():
            self.last[self.num, self.attempt] = text

    def lines(self, block: bytes) -> None:
        for lines, _whole in line_blocks((block,)):  # whole lines: one list
            for text in lines:
                self.line(text)

    def long_begin(self, head: bytes) -> None:
        self.line(head[:LOG_HEAD])

    def long_more(self, piece: bytes) -> None:
        pass  # counted by the cutter, never held

    def long_end(self, size: int, how: str) -> None:
        self.line(f"zotsink: the line above was {size} bytes long, cut to {LOG_HEAD}{how}".encode())


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
