"""A ledger's rows as what happened to each task, in order: the listing readers (the
attempts of ``status --by`` and the HTML page, :func:`zotsink.read_ledger`) read rows
through :func:`task_events`, as the fold readers do through
:class:`~zotsink._ledger.view.LedgerView`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

from .format import Row, parse_begin_items, parse_blocks, parse_end_items, parse_notes, parse_tasks

__all__ = ["TaskEvent", "task_events"]


class TaskEvent(NamedTuple):
    """One thing a ledger says of one task's attempt: ``claim``, ``begin``, ``end`` or
    ``release``, with the run that wrote it; an end's facts (``seconds``: the task's own
    time; ``wait``: from its claim to its begin, None when not known; ``peak_kib``, CPU:
    None when not measured); ``offset``: where its records begin in OUT (-1: none there).
    ``key``: the task's line, when the reader was given the task list."""

    event: str
    time: float
    tasknum: int
    attempt: int
    run: str
    host: str
    pid: str
    job: str
    array_task: str
    status: str = ""
    exit: str = ""
    signal: str = ""
    seconds: float | None = None
    wait: float | None = None
    records: int = 0
    bytes: int = 0
    peak_kib: int | None = None
    cpu_user: float | None = None
    cpu_sys: float | None = None
    note: str = ""
    offset: int = -1
    process: str = ""  # a begin's: PID:START of the task's own process
    key: str = ""


def task_events(
    rows: Iterable[tuple[int, Row]], keys: Mapping[int, str] | None = None
) -> Iterator[TaskEvent]:
    """Each row's events, task by task, in the ledger's order: the one way every reader
    that lists what happened (``status --by``, the HTML page, ``read_ledger``) reads rows."""
    runs: dict[str, tuple[str, str, str, str]] = {}  # id -> host, pid, job, element
    get = (keys or {}).get
    for _at, row in rows:
        kind = row.kind
        if kind == "run":
            f = row.fields
            runs[row.run] = (f["host"], f["pid"], f["job"], f["element"])
            continue
        who = runs.get(row.run, ("", "", "", ""))
        t = row.time
        if kind in ("claim", "release"):
            for first, last, att, _fresh in parse_tasks(row.fields["tasks"]):
                for num in range(first, last + 1):
                    yield TaskEvent(kind, t, num, att, row.run, *who, key=get(num, ""))
        elif kind == "begin":
            for num, att, pid, start in parse_begin_items(row.fields["items"]):
                yield TaskEvent(
                    kind, t, num, att, row.run, *who, process=f"{pid}:{start}", key=get(num, "")
                )
        elif kind == "end":
            f = row.fields
            blocks = parse_blocks(f["blocks"])
            notes = parse_notes(f["notes"])
            bi, pos = 0, 0
            for it in parse_end_items(f["items"]):
                offset = -1
                if it.in_out and it.size:
                    while bi < len(blocks) and pos >= blocks[bi].length:
                        bi, pos = bi + 1, 0
                    if bi < len(blocks):
                        offset = blocks[bi].offset + pos
                        pos += it.size
                code = it.code
                numeric = code.lstrip("-").isdigit() or code == ""
                user, system = (
                    (None, None) if it.cpu is None else (it.cpu[0] / 1e3, it.cpu[1] / 1e3)
                )
                yield TaskEvent(
                    "end",
                    t,
                    it.num,
                    it.attempt,
                    row.run,
                    *who,
                    status=it.status,
                    exit=code if numeric else "",
                    signal="" if numeric else code,
                    seconds=it.seconds / 1e6,
                    wait=None if it.wait is None else it.wait / 1e3,
                    records=it.records,
                    bytes=it.size,
                    peak_kib=it.peak,
                    cpu_user=user,
                    cpu_sys=system,
                    note=notes.get(f"{it.num}.{it.attempt}", ""),
                    offset=offset,
                    key=get(it.num, ""),
                )
