"""Views of a run for people who would rather look than read: the attempts of a ledger per
host or per array element, and one self-contained HTML page (inline SVG, no script, no
network) with the counts, a timeline of the attempts, a histogram of task times, the
failures grouped and the slowest tasks.

The page is written whole (:func:`write_status_page`, through
:func:`~zotsink._core.wholefile.whole_file`) and is valid UTF-8 whatever the names in it:
a task list's file name or task line that is not UTF-8 (held as surrogate escapes) shows its
bytes as replacement characters.
"""

from __future__ import annotations

import html
import math
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, Final, NamedTuple

from .._arrays import array_spec
from .._core.wholefile import whole_file
from .._ledger.events import TaskEvent, task_events
from .._ledger.read import Snapshot
from .._ledger.view import STATES
from .failures import FailureGroup
from .status import StatusReport
from .tasks import task_lines

__all__ = [
    "Attempt",
    "attempts_by",
    "rate_text",
    "read_attempts",
    "read_ledger",
    "status_page",
    "write_status_page",
]


class Attempt(NamedTuple):
    """One attempt of a task: its start row and, once it ended, its end row."""

    tasknum: int
    line: str
    attempt: int
    job: str
    array_task: str  # the array element that ran it ("" outside an array)
    host: str
    start: float | None  # seconds since the epoch
    end: float | None  # None while it runs (or when its run was lost)
    status: str  # the end row's status, else "running"
    seconds: float | None

    @property
    def element(self) -> str:
        """The array element that ran it, as ``JOB[INDEX]`` (``JOB``, or the host's run
        outside an array)."""
        if not self.job:
            return "-"
        return f"{self.job}[{self.array_task}]" if self.array_task else self.job


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def read_ledger(
    path: str | os.PathLike[str],
    *,
    tasks: str | os.PathLike[str] | None = None,
    lock: str = "auto",
    timeout: float = 600.0,
) -> Iterator[TaskEvent]:
    """What a ledger says happened to each task, in its order (claims, begins, ends,
    releases: :class:`~zotsink._ledger.events.TaskEvent`), from a consistent snapshot;
    nothing when it does not exist yet. With ``tasks`` (the task list) each event carries
    its task's line as ``key``. A torn row is passed by with a warning."""
    keys = task_lines(tasks)[0] if tasks is not None else None
    with Snapshot(path, lock=lock, timeout=timeout) as snap:
        yield from task_events(snap.rows(), keys)


def read_attempts(
    tasks: str | os.PathLike[str],
    ledger: str | os.PathLike[str],
    *,
    lock: str = "auto",
    timeout: float = 600.0,
) -> list[Attempt]:
    """Every attempt of the tasks of ``tasks`` that ``ledger`` holds that began (a task
    claimed and given back never ran), in the order they began. An ended one ran for its
    own seconds from its begin (its claim's time and its wait); one still running, from its
    begin; one whose task was claimed again by another attempt while it had not ended is
    ``lost`` (its run died): it ends where its run's last row is."""
    keys, _ = task_lines(tasks)
    opened: dict[tuple[int, int], list[Any]] = {}  # claim time, begin time, run
    runs: dict[str, tuple[str, str, str]] = {}  # run -> job, element, host
    last_row: dict[str, float] = {}  # run -> its latest row's time
    lost: list[tuple[tuple[int, int], list[Any]]] = []
    out: list[Attempt] = []
    with Snapshot(ledger, lock=lock, timeout=timeout) as snap:
        for ev in task_events(snap.rows()):
            last_row[ev.run] = ev.time
            runs.setdefault(ev.run, (ev.job, ev.array_task, ev.host))
            if keys.get(ev.tasknum) is None:
                continue
            key = (ev.tasknum, ev.attempt)
            if ev.event == "claim":
                for other in [k for k in opened if k[0] == ev.tasknum and k != key]:
                    got = opened.pop(other)
                    if got[1] is not None:
                        lost.append((other, got))  # begun, never ended: its run died
                opened[key] = [ev.time, None, ev.run]
            elif ev.event == "begin":
                got = opened.get(key)
                if got is not None:
                    got[1] = ev.time
            elif ev.event == "release":
                opened.pop(key, None)
            elif ev.event == "end":
                got = opened.pop(key, None)
                secs = ev.seconds
                claimed = got[0] if got is not None else None
                if claimed is not None and ev.wait is not None:
                    begun: float | None = claimed + ev.wait
                elif got is not None and got[1] is not None:
                    begun = got[1]
                else:
                    begun = ev.time - (secs or 0.0)
                end = None if begun is None or secs is None else begun + secs
                job, element, host = runs.get(ev.run, ("", "", ""))
                out.append(
                    Attempt(
                        ev.tasknum,
                        keys[ev.tasknum],
                        ev.attempt,
                        job,
                        element,
                        host,
                        begun,
                        end,
                        ev.status or "failed",
                        secs,
                    )
                )
    for (num, att), (_claimed, begun, run) in lost:
        job, element, host = runs.get(run, ("", "", ""))
        end = last_row.get(run)
        secs = None if end is None or begun is None else max(end - begun, 0.0)
        out.append(Attempt(num, keys[num], att, job, element, host, begun, end, "lost", secs))
    for (num, att), (_claimed, begun, run) in opened.items():
        if begun is None:
            continue  # claimed, never begun: no attempt ran
        job, element, host = runs.get(run, ("", "", ""))
        out.append(Attempt(num, keys[num], att, job, element, host, begun, None, "running", None))
    out.sort(key=lambda a: (a.start is None, a.start or 0.0, a.tasknum))
    return out


#: The columns of :func:`attempts_by`'s rows, in order.
BY_COLUMNS: Final = ("attempts", "ok", "not_ok", "running", "busy_s", "mean_s", "max_s")


def attempts_by(attempts: Iterable[Attempt], by: str) -> list[tuple[str, dict[str, Any]]]:
    """The attempts summed per ``by``: ``host``, ``job`` (the array job) or ``element``
    (``JOB[INDEX]``): attempts, ok, not ok, running, the seconds they took in all, their
    mean and their longest; in the order of their names."""
    if by not in ("host", "job", "element"):
        raise ValueError(f"attempts_by: by {by!r}: host, job or element")
    rows: dict[str, dict[str, Any]] = {}
    for a in attempts:
        name = a.host if by == "host" else a.element if by == "element" else a.job or "-"
        r = rows.setdefault(name, dict.fromkeys(BY_COLUMNS, 0))
        r["attempts"] += 1
        if a.status == "ok":
            r["ok"] += 1
        elif a.status == "running":
            r["running"] += 1
        else:
            r["not_ok"] += 1
        if a.seconds is not None:
            r["busy_s"] += a.seconds
            r["max_s"] = max(r["max_s"], a.seconds)
    for r in rows.values():
        ended = r["attempts"] - r["running"]
        r["mean_s"] = r["busy_s"] / ended if ended else 0.0
    return sorted(rows.items(), key=lambda kv: _natural(kv[0]))


def _natural(name: str) -> tuple[Any, ...]:
    # node2 before node10, 7[2] before 7[10]
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def rate_text(per_second: float) -> str:
    """A rate in the unit that gives it a few digits before the point: tasks/s, /min, /h."""
    for unit, per in (("s", 1.0), ("min", 60.0), ("h", 3600.0)):
        value = per_second * per
        if value >= 1 or unit == "h":
            break
    if value >= 100:
        return f"{value:,.0f} tasks/{unit}"
    return f"{value:.{1 if value >= 10 else 2}f} tasks/{unit}"


# -- the page -------------------------------------------------------------------------------

#: A colour per state, readable on white and told apart by the colour-blind (Okabe-Ito).
COLOURS: Final = {
    "ok": "#009e73",
    "failed": "#d55e00",
    "killed": "#cc79a7",
    "timeout": "#e69f00",
    "interrupted": "#999999",
    "given-up": "#7a1f00",
    "running": "#0072b2",
    "lost": "#56b4e9",
    "never": "#dddddd",
}
_WIDTH: Final = 1000  # the SVGs' width in their own units; they scale to the page
_LANE: Final = 14  # a timeline lane's height
_MAX_LANES: Final = 400  # more elements than this: a lane per host
_BINS: Final = 30

_STYLE: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.sub{color:#666;margin-bottom:16px}
.counts{display:flex;flex-wrap:wrap;gap:8px}
.count{border-radius:6px;padding:8px 12px;min-width:70px;color:#fff}
.count b{display:block;font-size:22px}.count.never{color:#333}
table{border-collapse:collapse;margin:4px 0}td,th{padding:3px 10px;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}th{background:#f6f6f6}td.n{text-align:right}
pre{background:#f6f6f6;padding:8px;margin:4px 0;font-size:12px;white-space:pre-wrap}
svg{width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif;fill:#333}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _secs(seconds: float) -> str:
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _counts(report: StatusReport) -> str:
    boxes = [
        f'<div class="count {_e(state)}" style="background:{COLOURS[state]}" '
        f'data-state="{_e(state)}"><b>{n}</b>{_e(state)}</div>'
        for state, n in report.counts.items()
        if n
    ]
    return f'<div class="counts" id="counts">{"".join(boxes)}</div>'


def _legend(states: Iterable[str]) -> str:
    items = "".join(
        f'<span><i style="background:{COLOURS.get(s, "#000")}"></i>{_e(s)}</span>' for s in states
    )
    return f'<div class="legend">{items}</div>'


def _slots(attempts: Sequence[Attempt], now: float) -> list[list[Attempt]]:
    """The attempts of one lane in rows that do not overlap (tasks side by side, as
    ``--jobs`` runs them): each goes into the first row free at its start."""
    rows: list[list[Attempt]] = []
    ends: list[float] = []
    for a in sorted(attempts, key=lambda a: a.start or 0.0):
        end = a.end if a.end is not None else now
        for i, free in enumerate(ends):
            if free <= (a.start or 0.0):
                rows[i].append(a)
                ends[i] = end
                break
        else:
            rows.append([a])
            ends.append(end)
    return rows


def _timeline(attempts: Sequence[Attempt], now: float) -> str:
    """One lane per host and array element, a bar per attempt from its start to its end;
    the tasks an element ran side by side on rows of their own within its lane."""
    timed = [a for a in attempts if a.start is not None]
    if not timed:
        return "<p>No attempt has started yet.</p>"
    t0 = min(a.start for a in timed if a.start is not None)
    t1 = max(a.end if a.end is not None else now for a in timed)
    span = max(t1 - t0, 1e-3)
    lanes: dict[tuple[str, str], list[Attempt]] = {}
    for a in timed:
        lanes.setdefault((a.host, a.element), []).append(a)
    names = sorted(lanes, key=lambda k: (_natural(k[0]), _natural(k[1])))
    if len(names) > _MAX_LANES:  # one lane per host: the page stays a page
        lanes = {}
        for a in timed:
            lanes.setdefault((a.host, "(all elements)"), []).append(a)
        names = sorted(lanes, key=lambda k: _natural(k[0]))
    label_w, top = 200, 20
    plot_w = _WIDTH - label_w - 10
    slots = {name: _slots(lanes[name], now) for name in names}
    bar = max(2, min(_LANE - 4, 40 // max(len(s) for s in slots.values())))
    parts: list[str] = []
    y = top
    for k, name in enumerate(names):
        rows = slots[name]
        height = max(_LANE, len(rows) * bar + 4)
        if k % 2:
            parts.append(f'<rect x="0" y="{y}" width="{_WIDTH}" height="{height}" fill="#f3f3f3"/>')
        parts.append(
            f'<text x="4" y="{y + min(height, _LANE) - 3}">{_e(" ".join(name)[:34])}</text>'
        )
        # ok first: a failure drawn over its neighbours stays in sight
        bars = [(r, a) for r, row in enumerate(rows) for a in row]
        bars.sort(key=lambda ra: ra[1].status != "ok")
        for r, a in bars:
            x = label_w + (a.start - t0) / span * plot_w  # type: ignore[operator]
            end = a.end if a.end is not None else now
            w = max(1.0, (end - a.start) / span * plot_w)  # type: ignore[operator]
            parts.append(
                f'<rect class="attempt" x="{x:.1f}" y="{y + 2 + r * bar}" width="{w:.1f}" '
                f'height="{max(1, bar - 1)}" fill="{COLOURS.get(a.status, "#000")}" '
                f'data-task="{a.tasknum}" data-status="{_e(a.status)}"><title>task {a.tasknum} '
                f"attempt {a.attempt} {_e(a.status)}: {_e(a.line[:80])}</title></rect>"
            )
        y += height
    axis = y + 14
    for k in range(5):
        x = label_w + k / 4 * plot_w
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        parts.append(
            f'<text x="{x:.0f}" y="{axis}" text-anchor="{anchor}">+{_secs(k / 4 * span)}</text>'
        )
    head = (
        f'<svg id="timeline" viewBox="0 0 {_WIDTH} {axis + 10}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="timeline of {len(timed)} attempts">'
        f'<text x="{label_w}" y="12">host and array element; time from the first start, '
        f"{_e(_clock(t0))} UTC</text>"
    )
    return head + "".join(parts) + "</svg>"


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _histogram(attempts: Sequence[Attempt]) -> str:
    """How long the ended attempts took, ok and not ok stacked, in equal bins."""
    ended = [a for a in attempts if a.seconds is not None and a.status != "running"]
    if not ended:
        return "<p>No attempt has ended yet.</p>"
    top_s = max(a.seconds for a in ended if a.seconds is not None) or 1.0
    bins = [[0, 0] for _ in range(_BINS)]
    for a in ended:
        i = min(_BINS - 1, int(a.seconds / top_s * _BINS))  # type: ignore[operator]
        bins[i][a.status != "ok"] += 1
    most = max(ok + bad for ok, bad in bins)
    left, top, plot_h = 50, 10, 180
    plot_w = _WIDTH - left - 10
    bar_w = plot_w / _BINS
    parts = [
        f'<svg id="histogram" viewBox="0 0 {_WIDTH} {top + plot_h + 40}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="histogram of {len(ended)} task times">'
    ]
    for i, (ok, bad) in enumerate(bins):
        x = left + i * bar_w
        y = top + plot_h
        lo, hi = i / _BINS * top_s, (i + 1) / _BINS * top_s
        for n, state in ((ok, "ok"), (bad, "failed")):
            if not n:
                continue
            h = n / most * plot_h
            y -= h
            parts.append(
                f'<rect class="bin" x="{x + 1:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" '
                f'height="{h:.1f}" fill="{COLOURS[state]}" data-count="{n}">'
                f"<title>{n} {'ok' if state == 'ok' else 'not ok'}, "
                f"{_secs(lo)} to {_secs(hi)}</title></rect>"
            )
        if ok + bad:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{y - 2:.1f}" text-anchor="middle">'
                f"{ok + bad}</text>"
            )
    base = top + plot_h
    parts.append(f'<line x1="{left}" y1="{base}" x2="{_WIDTH - 10}" y2="{base}" stroke="#999"/>')
    for k in range(6):
        x = left + k / 5 * plot_w
        anchor = "start" if k == 0 else "end" if k == 5 else "middle"
        tick = _secs(k / 5 * top_s)
        parts.append(f'<text x="{x:.0f}" y="{base + 16}" text-anchor="{anchor}">{tick}</text>')
    parts.append(
        f'<text x="{left}" y="{base + 34}">time per attempt ({len(ended)} ended)</text></svg>'
    )
    return "".join(parts)


def _table(head: Sequence[str], rows: Iterable[Sequence[object]], numeric: int = 0) -> str:
    """A table; the columns from ``numeric`` on are right-aligned (0: none)."""
    out = ["<table><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr>"]
    for row in rows:
        out.append("<tr>")
        for i, cell in enumerate(row):
            cls = ' class="n"' if numeric and i >= numeric else ""
            out.append(f"<td{cls}>{_e(cell)}</td>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def _failures(groups: Sequence[FailureGroup]) -> str:
    if not groups:
        return "<p>No task failed.</p>"
    out = ['<div id="failures">']
    for g in groups:
        first = g.tasks[0]
        out.append(
            f'<p><b style="color:{COLOURS.get(g.state, "#000")}">{len(g.tasks)} {_e(g.state)}'
            f"</b>: tasks {_e(array_spec(g.tasknums))}; the first, task {first.tasknum} "
            f"(attempt {first.attempt}): {_e(first.line)}</p>"
        )
        if first.stderr:
            out.append(f"<pre>{_e(chr(10).join(first.stderr))}</pre>")
    out.append("</div>")
    return "".join(out)


def status_page(
    report: StatusReport,
    attempts: Sequence[Attempt],
    groups: Sequence[FailureGroup] = (),
    *,
    title: str = "zotsink run",
    now: float | None = None,
) -> str:
    """The HTML page of a run: ``report`` (:func:`task_status`), the ``attempts``
    (:func:`read_attempts`) and the failures grouped (:func:`group_failures`). One file
    with everything inline: it opens from a cluster's file system, offline, with
    scripts off."""
    import time

    now = time.time() if now is None else now
    c = report.counts
    shown = ", ".join(f"{n} {state}" for state, n in c.items() if n)
    rate = "" if not report.rate else f"; {rate_text(report.rate)}"
    states_seen = [s for s in STATES if any(a.status == s for a in attempts)]
    by_host = attempts_by(attempts, "host")
    host_rows = [
        (
            name,
            r["attempts"],
            r["ok"],
            r["not_ok"],
            r["running"],
            _secs(r["mean_s"]),
            _secs(r["max_s"]),
        )
        for name, r in by_host
    ]
    slow = [(n, _secs(s), line) for n, s, line in report.slowest]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<div class="sub">{report.total} tasks: {_e(shown or "none")}{_e(rate)}; '
        f"{len(attempts)} attempts; drawn {_e(_clock(now))} UTC</div>",
        _counts(report),
        "<h2>Attempts per host and array element</h2>",
        _legend(states_seen),
        _timeline(attempts, now),
        "<h2>Task times</h2>",
        _histogram(attempts),
        "<h2>Failures, grouped by their last line</h2>",
        _failures(groups),
        "<h2>Slowest tasks</h2>",
        _table(("task", "took", "line"), slow) if slow else "<p>None ended yet.</p>",
        "<h2>Per host</h2>",
        _table(("host", "attempts", "ok", "not ok", "running", "mean", "longest"), host_rows, 1),
        "</body></html>\n",
    ]
    return "\n".join(parts)


def write_status_page(
    path: str | os.PathLike[str],
    report: StatusReport,
    attempts: Sequence[Attempt],
    groups: Sequence[FailureGroup] = (),
    *,
    title: str = "zotsink run",
    now: float | None = None,
) -> None:
    """Write :func:`status_page` to ``path``, whole or not at all (a browser may be
    reading it; see :func:`~zotsink._core.wholefile.whole_file`), as UTF-8 with a
    replacement character for each byte of a name that is not UTF-8. Raises
    :class:`~zotsink.errors.WriteError` or :class:`~zotsink.errors.UsageError`."""
    page = status_page(report, attempts, groups, title=title, now=now)
    with whole_file(os.fspath(path)) as w:
        w.write(_utf8(page))


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8, surrogate escapes (the bytes of a name that is not UTF-8) shown as
    replacement characters."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that escapes no byte
        raw = text.encode("utf-8", "replace")
    return raw.decode("utf-8", "replace").encode("utf-8")
