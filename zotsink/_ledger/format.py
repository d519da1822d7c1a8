"""The ledger's file format, version 2: one line per row, each row whole or not a row.

The first line names the format: ``zotsink-ledger<TAB>2<TAB>zotsink>=RELEASE`` (the release
a reader needs). A ledger of format 1 (``zotsink`` 0.1) begins with its column names
(``event<TAB>time<TAB>...``): it is read through :mod:`zotsink._ledger.v1` and migrated
when a run of this release resumes it. A ledger of a newer format is refused.

Every row after the header is ::

    KIND <TAB> TIME <TAB> RUN <TAB> FIELD ... <TAB> STATE <TAB> CRC

``TIME`` is seconds since the epoch (six decimals); ``RUN`` the 8 hex digits a run named
itself with in its ``run`` row (``-`` for rows no run wrote: ``close``, ``stop``);
``STATE`` the ledger's state after the row (:class:`State`); ``CRC`` the CRC-32 of the row
up to and including the tab before it. A row whose CRC does not match (a writer killed
mid-append, whose fragment the next writer ended with a newline; a region of zero bytes
a crash left) is no row: every reader passes it by, and it changes nothing. The number of
fields of each kind is fixed (:data:`FIELDS`); a kind this release does not know (a newer
release's) is passed over, neither a failure nor a success.

The kinds, with what they say:

- ``run``: a run begins: ``host`` (the node's name), ``hostid`` (its boot and pid
  namespace: two pid tables are never taken for one), ``pid`` and ``start`` (the run
  process and its start time, clock ticks after boot), ``job`` (``CLUSTER:JOB`` where the
  scheduler names a cluster), ``element`` (the array index) and ``settings`` (JSON; empty
  when they are the ledger's recorded ones).
- ``claim``: the run claimed ``tasks`` (:func:`tasks_text`); ``lines`` is the CRC-32 of
  those tasks' lines (each with a newline, in the order named): which lines they were.
- ``begin``: tasks began: ``N.A:PID:START`` each, the process that runs the task (a
  command's own process, or the worker that calls the function).
- ``end``: tasks ended and were committed: ``out`` (``INODE:HEADER``: the file OUT was and
  its header's length), ``blocks`` (``OFFSET:LENGTH:CRC`` of each contiguous block of
  their records in OUT), ``items`` (:class:`EndItem`, :func:`end_items_text`), ``notes``
  (JSON ``{"N.A": text}``, or empty).
- ``release``: claimed tasks given back, never begun: free for any run.
- ``worker``: a ``--call`` worker of the run (``PID:START``): the run's call tasks live
  while one does.
- ``close`` (``lines``: how many lines the task list had), ``open``, ``stop``: what the runs
  are told (see :mod:`zotsink._ledger.control`).
- ``relay``: the chain of jobs that keep a task list's runs allocated (``run --relay``,
  ``add --relay``): ``what`` happened (an element joined or left, a successor was decided,
  submitted or failed, the scheduler no longer has a job, the chain ended, a run was
  refused), the submission's ``ticket``, the ``job`` it concerns, the ``count`` of elements
  a decision saw, and a ``note`` (see :mod:`zotsink._ledger.relay`).

A run's ``element`` is its array index, followed by ``+R`` when the scheduler started the
element again (Slurm's ``SLURM_RESTART_COUNT``: a requeue, a preemption, a node's failure):
``7+2`` is index 7's third start, ``+1`` a job without an array started a second time
(:func:`element_text`, :func:`parse_element`). An element started again is the same job
and index: only its restart tells its runs from the runs of its earlier starts.

A claim reads the ledger's last row, not its history: :class:`State` carries the cursor
(the next task never claimed, ``next``, at byte ``at`` of the task list; the CRC of the
task list's bytes the last cursor claim went over, which tells a list rewritten under the
runs) and two counters, ``xgen`` (rows that claimed or freed tasks by name) and ``ctl``
(control rows and new settings): a run reads the rows between only when one of them moved.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, NamedTuple

__all__ = [
    "FIELDS",
    "FORMAT",
    "INITIAL",
    "MAGIC",
    "READER",
    "Block",
    "EndItem",
    "Row",
    "State",
    "advance",
    "begin_items_text",
    "blocks_text",
    "crc_cut",
    "element_name",
    "element_text",
    "end_items_text",
    "header_format",
    "header_line",
    "iso_time",
    "ledger_time",
    "line_crc",
    "make_row",
    "notes_text",
    "ok_spans",
    "parse_begin_items",
    "parse_blocks",
    "parse_element",
    "parse_end_items",
    "parse_notes",
    "parse_row",
    "parse_settings",
    "parse_tasks",
    "row_state",
    "tasks_text",
]

#: This release's format, and the first release that reads it (what a ledger's header
#: names, the same whichever release of the format wrote it).
FORMAT: Final = 2
READER: Final = "0.2"
#: The first field of a ledger's first line from format 2 on.
MAGIC: Final = "zotsink-ledger"
#: The first field of a format 1 ledger's first line (its first column's name).
_V1_FIRST: Final = b"event\t"
#: The fields of each kind of row, between RUN and STATE.
FIELDS: Final = {
    "run": ("host", "hostid", "pid", "start", "job", "element", "settings"),
    "claim": ("tasks", "lines"),
    "begin": ("items",),
    "end": ("out", "blocks", "items", "notes"),
    "release": ("tasks",),
    "worker": ("process",),
    "close": ("lines",),
    "open": ("note",),
    "stop": ("note",),
    # runs a user declared gone (``zotsink release``): their tasks are free, whatever the
    # pid table or the scheduler says (a host that is gone, with no scheduler to ask)
    "gone": ("runs", "note"),
    "relay": ("what", "ticket", "job", "count", "note"),
}
_WIDTH: Final = {kind: len(names) + 5 for kind, names in FIELDS.items()}


def header_line() -> bytes:
    """The first line of a new ledger: the format, and the release a reader needs."""
    return f"{MAGIC}\t{FORMAT}\tzotsink>={READER}\n".encode()


def header_format(line: bytes) -> tuple[int, str] | None:
    """The format of a ledger whose first line is ``line`` and the release it names (for
    format 1, ""); None when it is no ledger's first line."""
    if line.startswith(_V1_FIRST):
        return 1, ""
    parts = line.rstrip(b"\n").split(b"\t")
    if len(parts) >= 2 and parts[0] == MAGIC.encode() and parts[1].isdigit():
        needs = parts[2].decode("utf-8", "replace") if len(parts) > 2 else ""
        return int(parts[1]), needs
    return None


class State(NamedTuple):
    """The ledger's state after a row: what a claim needs, read from the last row alone."""

    next: int  # the next task number no cursor claim has passed
    at: int  # its byte offset in the task list
    span: int  # bytes of the task list the last cursor claim went over, ending at ``at``
    span_crc: int  # their CRC-32
    xgen: int  # rows that claimed or freed tasks by name, so far
    ctl: int  # control rows and rows of new settings, so far

    def text(self) -> str:
        return f"{self.next}:{self.at}:{self.span}:{self.span_crc:x}:{self.xgen}:{self.ctl}"


#: The state of a ledger with no row.
INITIAL: Final = State(1, 0, 0, 0, 0, 0)


def _state(text: str) -> State | None:
    parts = text.split(":")
    if len(parts) != 6:
        return None
    try:
        return State(
            int(parts[0]),
            int(parts[1]),
            int(parts[2]),
            int(parts[3], 16),
            int(parts[4]),
            int(parts[5]),
        )
    except ValueError:
        return None


def advance(state: State, kind: str, fields: dict[str, str] | Sequence[str]) -> State:
    """The state after a row of ``kind`` with ``fields`` (by name, or in order), other than
    a cursor's claim (which moves the cursor itself): a claim or release by name moves
    ``xgen``, a control row, a relay row or a run of new settings ``ctl`` (every run reads
    them at its next claim: what the runs are told, and the chain they belong to). The one
    rule every writer stamps rows by."""
    if kind in ("claim", "release"):
        return state._replace(xgen=state.xgen + 1)
    if kind in ("close", "open", "stop", "gone", "relay"):
        return state._replace(ctl=state.ctl + 1)
    if kind == "run":
        settings = fields["settings"] if isinstance(fields, dict) else fields[-1]
        if settings:
            return state._replace(ctl=state.ctl + 1)
    return state


class Row(NamedTuple):
    """One whole row, its fields as text by name (:data:`FIELDS`)."""

    kind: str
    time: float
    run: str
    fields: dict[str, str]
    state: State


def make_row(kind: str, time: float, run: str, fields: Sequence[str], state: State) -> bytes:
    """A row's bytes, newline included. Fields hold no tab or newline (JSON escapes them;
    every other field is numbers and names)."""
    body = f"{kind}\t{time:.6f}\t{run}\t" + "\t".join(fields) + f"\t{state.text()}\t"
    raw = body.encode("utf-8", "surrogateescape")
    return raw + b"%08x\n" % zlib.crc32(raw)


def crc_cut(line: bytes) -> int:
    """Where a whole row's CRC field begins (the tab before it); -1 when ``line`` is no
    whole row: its CRC is missing or does not match."""
    cut = line.rfind(b"\t")
    if cut < 0 or len(line) - cut != 9:
        return -1
    try:
        return cut if int(line[cut + 1 :], 16) == zlib.crc32(line[: cut + 1]) else -1
    except ValueError:
        return -1


def parse_row(line: bytes) -> Row | None:
    """A row (bytes, no newline) decoded; None when it is not a whole row of a kind this
    release knows (torn, damaged, or a newer release's kind)."""
    cut = crc_cut(line)
    if cut < 0:
        return None
    parts = line[:cut].decode("utf-8", "surrogateescape").split("\t")
    names = FIELDS.get(parts[0])
    if names is None or len(parts) != len(names) + 4:
        return None
    state = _state(parts[-1])
    if state is None:
        return None
    try:
        time = float(parts[1])
    except ValueError:
        return None
    return Row(parts[0], time, parts[2], dict(zip(names, parts[3:-1])), state)


def row_state(line: bytes) -> State | None:
    """The state a whole row carries, without decoding the rest (the claim's tail read);
    None when it is no whole row."""
    cut = crc_cut(line)
    if cut < 0:
        return None
    start = line.rfind(b"\t", 0, cut) + 1
    return _state(line[start:cut].decode("ascii", "replace"))


def line_crc(lines: Iterable[str], crc: int = 0) -> int:
    """The CRC-32 of task lines (each with a newline): a claim's proof of which lines it
    named."""
    for text in lines:
        crc = zlib.crc32(text.encode("utf-8", "surrogateescape") + b"\n", crc)
    return crc


# -- a run's array element: INDEX[+RESTART] -----------------------------------------------


def element_text(index: str, restart: int) -> str:
    """A ``run`` row's ``element``: the array index, and ``+R`` after a restart (R > 0)."""
    return f"{index}+{restart}" if restart > 0 else index


def parse_element(text: str) -> tuple[str, int]:
    """The array index and the restart of a ``run`` row's ``element`` (see
    :func:`element_text`); a restart that is no number counts as 0."""
    index, plus, restart = text.partition("+")
    return index, int(restart) if plus and restart.isdigit() else 0


def element_name(job: str, element: str) -> str:
    """An element as a person reads it: ``JOB[INDEX]`` (``JOB`` without an array), with
    `` restart R`` when the scheduler started it again; "" without a job."""
    if not job:
        return ""
    index, restart = parse_element(element)
    name = f"{job}[{index}]" if index else job
    return f"{name} restart {restart}" if restart else name


# -- task lists: 5-68,70.2,80-90.3 ------------------------------------------------------


def tasks_text(items: Iterable[tuple[int, ...]]) -> str:
    """Task numbers with their attempts (and, third, whether the task's line is another
    than its earlier attempts ran: ``!``), in the order given, as ranges where numbers
    follow each other with one attempt: ``(5,1) (6,1) (7,1) (9,2) (12,3,True)`` is
    ``5-7,9.2,12.3!``."""
    out: list[str] = []
    first = last = attempt = -1
    for item in items:
        num, att = item[0], item[1]
        if len(item) > 2 and item[2]:
            if first >= 0:
                out.append(_range(first, last, attempt))
                first = last = -1
            out.append(f"{num}.{att}!")
            continue
        if num == last + 1 and att == attempt and first >= 0:
            last = num
            continue
        if first >= 0:
            out.append(_range(first, last, attempt))
        first = last = num
        attempt = att
    if first >= 0:
        out.append(_range(first, last, attempt))
    return ",".join(out)


def _range(first: int, last: int, attempt: int) -> str:
    nums = str(first) if first == last else f"{first}-{last}"
    return nums if attempt == 1 else f"{nums}.{attempt}"


def parse_tasks(text: str) -> Iterator[tuple[int, int, int, bool]]:
    """``(first, last, attempt, fresh)`` of each range of a task list (:func:`tasks_text`)."""
    if not text:
        return
    for part in text.split(","):
        fresh = part.endswith("!")
        if fresh:
            part = part[:-1]
        nums, _, att = part.partition(".")
        first, _, last = nums.partition("-")
        lo = int(first)
        yield lo, int(last) if last else lo, int(att) if att else 1, fresh


# -- begin items: N.A:PID:START ----------------------------------------------------------


def begin_items_text(items: Iterable[tuple[int, int, int, str]]) -> str:
    return ",".join(f"{n}.{a}:{pid}:{start}" for n, a, pid, start in items)


def parse_begin_items(text: str) -> Iterator[tuple[int, int, int, str]]:
    """``(task, attempt, pid, start)`` of each begun task."""
    if not text:
        return
    for part in text.split(","):
        task, pid, start = part.split(":")
        n, _, a = task.partition(".")
        yield int(n), int(a or 1), int(pid), start


# -- end items ---------------------------------------------------------------------------


class EndItem(NamedTuple):
    """One task's end, as an ``end`` row's ``items`` field holds it.

    ``seconds`` is the task's own time (its process or call, begin to end), in
    microseconds; ``wait`` the time from its claim to its begin, in milliseconds (None: not
    known). ``code`` is the exit code or the signal's name. ``in_out``: its ``size`` bytes
    of records are in OUT, the next part of the row's blocks (False: they could not be
    appended and are in a spill file). ``peak`` (KiB) and ``cpu`` (user, system
    milliseconds) are None when not measured."""

    num: int
    attempt: int
    status: str  # ok, failed, killed, timeout, interrupted, oom
    code: str
    seconds: int
    wait: int | None
    records: int
    size: int
    in_out: bool
    peak: int | None
    cpu: tuple[int, int] | None


def end_items_text(items: Iterable[EndItem]) -> str:
    """The ``items`` field: ``N[.A]:STATUS:SECONDS:WAIT:RECORDS:BYTES:PEAK:CPU`` each, joined
    by commas. An empty ``N`` is the item before's plus one; an empty status is ``ok``
    (else ``status/code``); ``BYTES`` is ``~B`` for records not in OUT; an empty or left
    out ``RECORDS``, ``PEAK`` or ``CPU`` is the item before's (``-``: not measured): a
    group of quick tasks of one worker costs a dozen bytes a task."""
    out: list[str] = []
    prev_num = -1
    prev = (-1, "", "")  # records, peak, cpu of the item before, as text
    for it in items:
        num = "" if it.num == prev_num + 1 else str(it.num)
        if it.attempt != 1:
            num = f"{it.num}.{it.attempt}"
        status = "" if it.status == "ok" and it.code in ("", "0") else f"{it.status}/{it.code}"
        wait = "" if it.wait is None else str(it.wait)
        size = str(it.size) if it.in_out else f"~{it.size}"
        peak = "-" if it.peak is None else str(it.peak)
        cpu = "-" if it.cpu is None else f"{it.cpu[0]}/{it.cpu[1]}"
        tail = [str(it.records), peak, cpu]
        same = [tail[0] == str(prev[0]), peak == prev[1], cpu == prev[2]]
        while tail and same[len(tail) - 1]:
            tail.pop()  # left out: the same as the item before's
        fields = [num, status, str(it.seconds), wait, tail[0] if tail else "", size, *tail[1:]]
        out.append(":".join(fields))
        prev_num = it.num
        prev = (it.records, peak, cpu)
    return ",".join(out)


def parse_end_items(text: str) -> list[EndItem]:
    """The items of an ``end`` row's ``items`` field (see :func:`end_items_text`)."""
    items: list[EndItem] = []
    if not text:
        return items
    prev_num = -1
    records, peak, cpu = 0, "-", "-"
    for part in text.split(","):
        f = part.split(":")
        task = f[0]
        if task:
            n, _, a = task.partition(".")
            num, attempt = int(n), int(a) if a else 1
        else:
            num, attempt = prev_num + 1, 1
        status, _, code = f[1].partition("/") if f[1] else ("ok", "", "0")
        if len(f) > 4 and f[4]:
            records = int(f[4])
        size_text = f[5]
        if len(f) > 6:
            peak = f[6]
        if len(f) > 7:
            cpu = f[7]
        in_out = not size_text.startswith("~")
        u, _, s = cpu.partition("/")
        items.append(
            EndItem(
                num,
                attempt,
                status,
                code,
                int(f[2]),
                int(f[3]) if f[3] else None,
                records,
                int(size_text.lstrip("~")),
                in_out,
                None if peak == "-" else int(peak),
                None if cpu == "-" else (int(u), int(s)),
            )
        )
        prev_num = num
    return items


#: The bytes of ok items (numbers, their separators, ``~`` and ``-``): any other byte (a
#: status's letters) sends an ``end`` row to the item-by-item read.
_OK_ITEM_BYTES: Final = b"0123456789:,.-/~"
#: An item that names its number (after the first), and the first item's number.
_NAMED_ITEM: Final = re.compile(r",([0-9]+)")
_FIRST_NUMBER: Final = re.compile(r"[0-9]+")


def ok_spans(text: str) -> list[tuple[int, int]] | None:
    """The task numbers of an ``end`` row's ``items`` (see :func:`end_items_text`) as runs
    of consecutive numbers, ``(first, count)``, when every item is ``ok``; None when one
    may not be. Found by scans at C speed, a step per item that names its number: what a
    run folds of the ok ends of other runs, which it needs as counts, not items."""
    if not text:
        return []
    first = _FIRST_NUMBER.match(text)
    if first is None or text.encode().translate(None, _OK_ITEM_BYTES):
        return None
    spans: list[tuple[int, int]] = []
    at, num = 0, int(first.group())
    for m in _NAMED_ITEM.finditer(text):
        p = m.start()
        spans.append((num, text.count(",", at, p) + 1))
        at, num = p + 1, int(m.group(1))
    spans.append((num, text.count(",", at) + 1))
    return spans


class Block(NamedTuple):
    """A contiguous block of an ``end`` row's records in OUT."""

    offset: int
    length: int
    crc: int


def blocks_text(blocks: Iterable[Block]) -> str:
    return ",".join(f"{b.offset}:{b.length}:{b.crc:x}" for b in blocks)


def parse_blocks(text: str) -> list[Block]:
    out = []
    if text:
        for part in text.split(","):
            off, length, crc = part.split(":")
            out.append(Block(int(off), int(length), int(crc, 16)))
    return out


def notes_text(notes: dict[str, str]) -> str:
    """The ``notes`` field: what is unusual about some tasks' ends (JSON), or empty."""
    return json.dumps(notes, ensure_ascii=True, separators=(",", ":")) if notes else ""


def parse_settings(text: str) -> dict[str, str] | None:
    """The settings a ``run`` row's ``settings`` field holds; None when empty or damaged."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


def parse_notes(text: str) -> dict[str, str]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def iso_time(t: float) -> str:
    """A ledger time (seconds since the epoch) as UTC ISO-8601 with microseconds ("" for 0)."""
    from datetime import datetime, timezone

    if not t:
        return ""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ledger_time(stamp: str) -> float | None:
    """A time as :func:`iso_time` writes it, as seconds since the epoch (None: not one)."""
    from datetime import datetime, timezone

    try:
        t = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return None
    return t.replace(tzinfo=timezone.utc).timestamp()
