"""The protocol between a ``run --call`` and its function workers: frames and marks.

Both ends are :mod:`zotsink._run.worker` (the run's handle on a worker) and
:mod:`zotsink._run.serve` (the worker process); what they must agree on is here.

A frame is a 4-byte big-endian length and a :mod:`marshal` dump (both ends are the same
interpreter, and marshal reads only plain values: it cannot run code the way unpickling can).
Frames, worker to run, each naming the worker's pid: ``("ready", pid)`` once FUNC is
loaded, ``("unloadable", pid, text)`` when it cannot be, and for each task
``("done", pid, tasknum, attempt, items, use)`` or ``("raised", pid, tasknum, attempt,
traceback, exit, use)``, ``use`` what the call used (peak KiB, user and system seconds; each
None when not measured); ``("part", pid, tasknum, attempt, items)`` ahead of a large
result's ``done``;
``("back", pid, [(tasknum, attempt), ...])`` for the tasks it held and did not begin at a
stop. ``items`` are the records: ``(LINES, text)`` for lines, ``(RECORD, {column: value})``
for one record by name, ``(PIECE, text)`` for text the next item goes on with. Run to
worker: a batch, a list of ``(tasknum, attempt, line)``, called in that order; end of the
stream: stop.

A page shared with the run (a memory file of :data:`FLAG_SIZE` bytes) carries one byte the
run sets at a stop. The worker marks each call's end in its prints (:data:`MARK_LINE`, after
the run's random token): ``N`` when the next call of the batch begins at once (and which),
``E`` when none does, ``T`` when the call left a thread alive, ``B`` when a call begins
after a ``T`` or between batches; each with the call's task and attempt and, at an end, the
microseconds it took. ``A`` and ``R`` enclose an aside: whole lines a thread printed that
outlived the call they name (0.0: one FUNC's load started), whatever call runs meanwhile.
"""

from __future__ import annotations

import marshal
import mmap
import os
import re
import struct
from typing import IO, Any, Final

__all__ = [
    "FLAG_SIZE",
    "FRAME_HEAD",
    "FRAME_SIZES",
    "LINES",
    "MARK_LINE",
    "PART_SIZE",
    "PIECE",
    "RECORD",
    "WORKER_VAR",
    "names_file",
    "receive_frame",
    "send_frame",
]

#: A frame's head: the length of its marshal dump.
FRAME_HEAD: Final = struct.Struct(">I")
#: Kinds of result items: text of lines (its last piece), one record by name, a piece of
#: text that the next item goes on with.
LINES: Final = 0
RECORD: Final = 1
PIECE: Final = 2
#: Bytes of result items in one frame, about: a large result comes in frames of this size,
#: held by the run as a command's output is (memory, then a file), never copied whole.
PART_SIZE: Final = 1 << 20
#: Set by a worker process to its own pid: a run started inside it is refused.
WORKER_VAR: Final = "ZOTSINK_WORKER_PID"
#: The length of each kind of frame a worker sends (see the module's docstring).
FRAME_SIZES: Final = {"ready": 2, "unloadable": 3, "back": 3, "part": 5, "done": 6, "raised": 7}
#: Bytes of the page a worker shares with its run: its first byte says "hold".
FLAG_SIZE: Final = mmap.PAGESIZE
#: A mark line in a worker's prints, after the run's token (see above).
MARK_LINE: Final = re.compile(rb"([ABENRT])(\d+)\.(\d+)(?: (\d+)\.(\d+))?(?: (\d+))?\n")


def names_file(where: str) -> bool:
    """Whether the part before ``:FUNC`` of a ``--call`` spec names a file, not a module:
    both ends read a spec, the run to check it, the worker to load it."""
    return where.endswith(".py") or os.sep in where


def send_frame(f: IO[bytes], message: tuple[Any, ...]) -> None:
    """One frame written whole to a blocking pipe (the worker's end)."""
    data = marshal.dumps(message)
    f.write(FRAME_HEAD.pack(len(data)) + data)
    f.flush()


def receive_frame(f: IO[bytes]) -> tuple[Any, ...] | None:
    """The next frame from a blocking pipe; None at its end (the worker's end)."""
    head = f.read(FRAME_HEAD.size)
    if len(head) < FRAME_HEAD.size:
        return None
    (size,) = FRAME_HEAD.unpack(head)
    data = f.read(size)
    if len(data) < size:
        return None
    return marshal.loads(data)  # type: ignore[no-any-return]
