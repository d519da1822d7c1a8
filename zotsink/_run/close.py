"""``zotsink close`` and ``zotsink stop``: the control rows written into the ledger, under
its lock and fsynced like every row; what they mean is :mod:`zotsink._ledger.control`."""

from __future__ import annotations

import os

from .._core.snapshot import snapshot
from .._ledger.control import Control
from .._ledger.read import Snapshot
from .._ledger.view import LedgerView
from ..errors import InputError, UsageError
from .add import count_lines
from .ledger import write_control

__all__ = ["close_tasks", "read_control", "stop_runs"]


def _task_list_lines(tasks: str, lock: str, timeout: float) -> int:
    """How many lines the task list has, read under its shared lock (``add`` appends under
    the exclusive one); a last line without its newline counts: once the list is closed no
    byte will end it, and the runs take it as it is."""
    if not os.path.isfile(tasks):
        what = "is not a file" if os.path.lexists(tasks) else "does not exist"
        raise InputError(f"task list {tasks} {what}", path=tasks)
    fd, size = snapshot(tasks, lock=lock, timeout=timeout)
    try:
        return count_lines(fd, size)
    finally:
        os.close(fd)


def read_control(
    ledger: str | os.PathLike[str], *, lock: str = "auto", timeout: float = 600.0
) -> tuple[Control, int]:
    """The control rows of a snapshot of ``ledger`` folded (none when it does not exist
    yet), and the snapshot's size."""
    view = LedgerView()
    with Snapshot(ledger, lock=lock, timeout=timeout) as snap:
        view.feed(snap.rows())
        return view.control, snap.size


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
    if reopen:
        write_control(path, "open", lock=lock, timeout=timeout)
    else:
        write_control(path, "close", lines=lines, lock=lock, timeout=timeout)
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
    read_control(path, lock=lock, timeout=timeout)  # a file that is no ledger is refused
    write_control(path, "stop", lock=lock, timeout=timeout)
    state, _size = read_control(path, lock=lock, timeout=timeout)
    return state
