"""Format 1 ledgers (zotsink 0.1), read as format 2 rows: one row view for every reader.

A format 1 ledger has a header of column names and one row per task event: ``start`` when
a run claimed a task (its liveness was the run's: the row notes the run process's start
time), ``end`` with the status and the piece of OUT the attempt wrote (``out_offset``,
``bytes``, ``out_ino``, ``out_crc``), ``run`` rows of settings, and ``close``/``open``/
``stop`` rows. :func:`translate` turns them into the rows a format 2 ledger would hold:
each run named once by a ``run`` row (its id made from its host, pid, start time and job),
a ``start`` into a ``claim`` (its lines' CRC from the row's key: the line it ran as) and a
``begin`` naming the run's own process, an ``end`` into an ``end`` with one item and its
piece as one block. The state each row carries is the initial one: readers of a snapshot
do not look at it, and a run that resumes a format 1 ledger migrates it
(:mod:`zotsink._run.ledger`), writing the states anew.

A row with fewer fields than the header is torn (a run killed mid-append): passed by with a
warning; one with more, or whose task number is not a number, is damage: InputError.
"""

from __future__ import annotations

import json
import math
import warnings
import zlib
from collections.abc import Iterable, Iterator
from typing import Final

from .._core.records import decode_row
from ..errors import InputError, ZotsinkWarning
from .format import (
    INITIAL,
    Block,
    EndItem,
    Row,
    blocks_text,
    end_items_text,
    line_crc,
    notes_text,
    tasks_text,
)

__all__ = ["COLUMNS", "translate"]

#: A format 1 ledger's columns, in order (later ones may be missing in an older one).
COLUMNS: Final = (
    "event",
    "time",
    "tasknum",
    "key",
    "attempt",
    "job",
    "array_task",
    "host",
    "pid",
    "status",
    "exit",
    "signal",
    "seconds",
    "records",
    "bytes",
    "note",
    "out_offset",
    "out_header",
    "out_ino",
    "out_crc",
)
_FIRST: Final = 16  # columns every format 1 ledger has
_PROC_START: Final = "proc-start "


def _time(stamp: str) -> float:
    from datetime import datetime, timezone

    try:
        t = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return 0.0
    return t.replace(tzinfo=timezone.utc).timestamp()


def _run_id(host: str, pid: str, start: str, job: str) -> str:
    return f"{zlib.crc32(f'{host} {pid} {start} {job}'.encode()):08x}"


def translate(
    path: str, header: bytes, lines: Iterable[tuple[int, bytes]]
) -> Iterator[tuple[int, Row]]:
    """Format 2 rows of a format 1 ledger's ``lines`` (``(offset, row bytes)`` after the
    header line ``header``), each with the offset of the row it came from."""
    names = decode_row(header.rstrip(b"\n").decode("utf-8", "surrogateescape"), "tsv")
    width = len(names)
    where = {name: names.index(name) for name in COLUMNS if name in names}
    runs: dict[tuple[str, str, str], str] = {}  # (host, pid, job) -> run id
    keys: dict[int, str] = {}  # the line each task number last ran as
    declared: set[str] = set()
    torn = 0
    first_torn = -1
    for at, line in lines:
        text = line.decode("utf-8", "surrogateescape")
        f = decode_row(text, "tsv") if "\\" in text else text.split("\t")
        if len(f) < min(width, _FIRST):  # a row of 0.1 may lack the later columns
            torn += 1
            first_torn = at if first_torn < 0 else first_torn
            continue
        if len(f) > width or not f[2].isdigit():
            raise InputError(
                f"{path}: the row at byte {at} is not a ledger row; run `zotsink verify "
                f"{path} -f tsv`",
                path=path,
            )

        got = {name: f[i] for name, i in where.items() if i < len(f)}
        event, stamp, num = f[0], f[1], int(f[2])
        t = _time(stamp)
        host, pid, job, element = (got.get(c, "") for c in ("host", "pid", "job", "array_task"))
        who = (host, pid, job)
        if event == "start":
            note = got.get("note", "")
            start = note[len(_PROC_START) :].strip() if note.startswith(_PROC_START) else ""
            run = _run_id(host, pid, start, job)
            runs[who] = run
        else:
            run = runs.get(who) or _run_id(host, pid, "", job)
            runs.setdefault(who, run)
            start = ""
        if num == 0 and event in ("close", "open", "stop"):
            lines_note = ""
            if event == "close":
                try:
                    lines_note = str(json.loads(got.get("note", "")).get("lines", ""))
                except (ValueError, AttributeError):
                    lines_note = ""
            fields = {"close": {"lines": lines_note}}.get(event, {"note": ""})
            yield at, Row(event, t, "-", fields, INITIAL)
            continue
        if run not in declared or (num == 0 and event == "run"):
            declared.add(run)
            settings = got.get("note", "") if num == 0 and event == "run" else ""
            fields = {
                "host": host,
                "hostid": "",
                "pid": pid,
                "start": start,
                "job": job,
                "element": element,
                "settings": settings,
            }
            yield at, Row("run", t, run, fields, INITIAL)
        if num == 0 or event not in ("start", "end"):
            continue
        att = got.get("attempt", "")
        attempt = int(att) if att.isdigit() else 1
        if event == "start":
            key = got.get("key", "")
            crc = line_crc([key])
            # a number that ran as another line before: its earlier attempts say nothing
            fresh = keys.get(num, key) != key
            keys[num] = key
            tasks = tasks_text([(num, attempt, fresh)])
            yield at, Row("claim", t, run, {"tasks": tasks, "lines": f"{crc:x}"}, INITIAL)
            if pid.isdigit():
                items = f"{num}.{attempt}:{pid}:{start or '0'}"
                yield at, Row("begin", t, run, {"items": items}, INITIAL)
            continue
        yield at, _end(num, attempt, t, run, got)
    if torn:
        warnings.warn(
            ZotsinkWarning(
                f"{path}: left out {torn} torn row(s), the first at byte {first_torn} (a run "
                "killed while writing it; the task's next row counts)"
            ),
            stacklevel=3,
        )


def _end(num: int, attempt: int, t: float, run: str, got: dict[str, str]) -> Row:
    def get(name: str) -> str:
        return got.get(name, "")

    status = get("status") or "failed"
    try:
        secs = float(get("seconds"))
    except ValueError:
        secs = math.nan
    size = int(get("bytes")) if get("bytes").isdigit() else 0
    offset = get("out_offset")
    placed = offset.isdigit() and size > 0
    item = EndItem(
        num,
        attempt,
        status,
        (get("exit") or get("signal")) if status != "ok" else "0",
        0 if math.isnan(secs) else round(secs * 1e6),
        None,
        int(get("records")) if get("records").isdigit() else 0,
        size if placed else 0,
        True,
        None,
        None,
    )
    # a row of a release before checksums: -1, a piece taken as it is
    crc = int(get("out_crc"), 16) if get("out_crc") else -1
    blocks = [Block(int(offset), size, crc)] if placed else []
    note = get("note")
    fields = {
        "out": f"{get('out_ino')}:{get('out_header')}",
        "blocks": blocks_text(blocks),
        "items": end_items_text([item]),
        "notes": notes_text({f"{num}.{attempt}": note} if note else {}),
    }
    return Row("end", t, run, fields, INITIAL)
