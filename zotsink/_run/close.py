"""``zotsink close``, ``zotsink stop`` and ``zotsink release``: the control rows written
into the ledger, under its lock and fsynced like every row; what close and stop mean is
:mod:`zotsink._ledger.control`, what a ``gone`` row means is the view's
(:mod:`zotsink._ledger.view`: the runs it names are dead, their tasks free)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

from .._core.snapshot import snapshot
from .._ledger.control import Control
from .._ledger.read import Snapshot
from .._ledger.view import LedgerView
from ..errors import InputError, UsageError
from .add import count_lines
from .alive import SCHEDULER_WAIT, Judge
from .ledger import write_control
from .tasks import task_lines

__all__ = ["Released", "close_tasks", "read_control", "release_runs", "stop_runs"]


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


class Released(NamedTuple):
    """A run ``zotsink release`` declared gone: who it was and the tasks it held."""

    id: str
    host: str
    pid: str
    job: str
    claimed: int
    running: int


def release_runs(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    runs: Sequence[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> list[Released]:
    """Declare the runs ``runs`` (each its id, or ``HOST:PID``, as ``status`` names them)
    gone: a ``gone`` row in ``ledger``, after which every run and ``status`` take their
    tasks as free (claimed ones) or lost (begun ones, run again as a dead run's). For a run
    that died on a host nobody here can ask (another host, no scheduler that answers): its
    tasks are otherwise held for ever. Refused (UsageError) for a run this host sees alive,
    for a name that matches no run or several, and for a run that holds no task. The
    user's word is taken for a run nothing here can tell of: a run that lives after all
    would have its tasks run twice at once."""
    path, tasks_path = os.fspath(ledger), os.fspath(tasks)
    if not os.path.lexists(path):
        raise UsageError(f"the ledger {path} does not exist: no run to release", path=path)
    keys, _ = task_lines(tasks_path)
    view = LedgerView(keys)
    with Snapshot(path, lock=lock, timeout=timeout) as snap:
        view.feed(snap.rows())
    judge = Judge(wait=SCHEDULER_WAIT)
    view.settle(judge)
    held = view.held_by()
    found: list[Released] = []
    for name in runs:
        matches = [r for r in view.runs if name in (r.id, f"{r.host}:{r.pid}")]
        if not matches:
            raise UsageError(
                f"no run of {path} is named {name}: give a run's id or HOST:PID as `zotsink "
                f"status {tasks_path} --ledger {path}` names it",
                path=path,
            )
        run = max(matches, key=lambda r: r.first_at)  # a pid used again: the latest run
        claimed, running = held.get(run.index, (0, 0))
        if not claimed and not running:
            raise UsageError(f"run {name} holds no task of {path}: nothing to release")
        if judge.run_alive(run):
            raise UsageError(
                f"run {name} ({run.host} pid {run.pid}) is alive: stop it (`zotsink stop`, or "
                "its scheduler's cancel) and its tasks are given back as it ends",
                path=path,
            )
        found.append(Released(run.id, run.host, run.pid, run.job, claimed, running))
    note = f"released by {os.uname().nodename} pid {os.getpid()}"
    write_control(path, "gone", runs=[r.id for r in found], note=note, lock=lock, timeout=timeout)
    return found
