"""``zotsink close`` and ``zotsink stop``: the control rows written into the ledger, under
its lock and fsynced like every row; what they mean is :mod:`zotsink._run.control`."""

from __future__ import annotations

import json
import os

from .._core.snapshot import snapshot
from .._ledgerfile import CLOSE_EVENT, OPEN_EVENT, STOP_EVENT
from ..errors import InputError, UsageError
from .add import count_lines
from .control import Control, read_control
from .ledger import Ledger

__all__ = ["close_tasks", "stop_runs"]


def _task_list_lines(tasks: str, lock: str, timeout: float) -> int:
    """How many lines the task list has, read under its shared lock (``add`` appends under
    the exclusive one)."""
    if not os.path.isfile(tasks):
        what = "is not a file" if os.path.lexists(tasks) else "does not exist"
        raise InputError(f"task list {tasks} {what}", path=tasks)
    fd, size = snapshot(tasks, lock=lock, timeout=timeout)
    try:
        return count_lines(fd, size)
    finally:
        os.close(fd)


def _append(row: bytes, book: Ledger) -> None:
    try:
        book.append([row], spill=False)
    finally:
        book.close()


def close_tasks(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    reopen: bool = False,
    lock: str = "auto",
    timeout: float = 600.0,
) -> tuple[Control, bool]:
    """Record in ``ledger`` that the task list ``tasks`` is closed (no more lines will come;
    follow runs end once every task is done), or with ``reopen`` open again. Creates the
    ledger when no run has yet. Returns the state now, and whether a row was written: a
    list closed already at the same number of lines (or open already) gets none."""
    path, tasks_path = os.fspath(ledger), os.fspath(tasks)
    lines = _task_list_lines(tasks_path, lock, timeout)
    state, _size = read_control(path, lock=lock, timeout=timeout)
    if reopen and not state.closed:
        return state, False
    if not reopen and state.closed and state.closed_lines == lines:
        return state, False
    book = Ledger(path, lock=lock, timeout=timeout)
    if reopen:
        row = book.control_row(OPEN_EVENT)
    else:
        row = book.control_row(CLOSE_EVENT, json.dumps({"lines": str(lines)}))
    _append(row, book)
    state, _size = read_control(path, lock=lock, timeout=timeout)
    return state, True


def stop_runs(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Control:
    """Record in ``ledger`` that the runs live now are to stop: each finishes the tasks it
    is running, claims nothing more and exits; a run started after this proceeds. Each
    call writes a row (a second stop reaches the runs begun since the first)."""
    path, tasks_path = os.fspath(ledger), os.fspath(tasks)
    _task_list_lines(tasks_path, lock, timeout)  # a mistyped task list is refused
    if not os.path.lexists(path):
        raise UsageError(
            f"the ledger {path} does not exist, so no run has begun to stop: check the path "
            "(`zotsink run` writes OUT.ledger beside OUT, or the file given with --ledger)",
            path=path,
        )
    book = Ledger(path, lock=lock, timeout=timeout)
    _append(book.control_row(STOP_EVENT), book)
    state, _size = read_control(path, lock=lock, timeout=timeout)
    return state
