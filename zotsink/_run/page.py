"""The ``status --html`` page: one self-contained file (inline CSS and SVG, no script, no
network) that shows a run as it was.

:func:`status_page` draws it from a :class:`~zotsink._run.status.StatusReport`, the
failures grouped, and ONE pass over the attempts (an iterator of
:func:`~zotsink._run.report.iter_attempts` keeps memory flat), summed by a
:class:`~zotsink._run.timeline.Timeline`: the counts; the attempts on a lane per slot of
each host and array element (elements compressed to one lane each, then hosts, when the
lanes would not fit); throughput and busy slots over time; the attempts' times; peak memory
and CPU per host and element, when measured; the failures; the slowest tasks; a table per
host. :func:`write_page` puts it in place whole.

Invariant: the page is bounded whatever the number of attempts: lanes within
:data:`LANES_HEIGHT`, bars merged where they are closer than a unit of the drawing, bins
rather than one mark per attempt, tables cut to their first rows (what is cut is said).
"""

from __future__ import annotations

import html
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Final

from .._arrays import array_spec
from .._core.wholefile import whole_file
from .failures import FailureGroup
from .report import Attempt, natural, rate_text
from .spread import Spread
from .status import StatusReport
from .timeline import STATES_DRAWN, RowKey, Timeline, Use

__all__ = ["COLOURS", "status_page", "write_page"]

#: A colour per state, readable on white and told apart by the colour-blind (Okabe-Ito).
COLOURS: Final = {
    "ok": "#009e73",
    "failed": "#d55e00",
    "killed": "#cc79a7",
    "oom": "#882255",
    "timeout": "#e69f00",
    "interrupted": "#999999",
    "given-up": "#7a1f00",
    "running": "#0072b2",
    "lost": "#56b4e9",
    "never": "#dddddd",
}
_WIDTH: Final = 1000  # the SVGs' width in their own units; they scale to the page
_LABEL: Final = 190  # the timeline's label column
_PLOT: Final = _WIDTH - _LABEL - 10
#: The lanes' height in all, at most, in SVG units.
LANES_HEIGHT: Final = 380
_LANE_MOST: Final = 14  # a lane's height, at most
_LANE_LEAST: Final = 2  # below this the lanes are compressed (an element's into one)
_BUCKETS: Final = 200  # bars across the throughput and busy charts
_ROWS: Final = 8  # rows of a table, at most
_FAILURE_GROUPS: Final = 3
_FAILURE_LINES: Final = 3
_SPEC_CHARS: Final = 100  # of a failure group's task numbers
_USE_BINS: Final = 24

_STYLE: Final = """
body{font:13px/1.35 system-ui,sans-serif;margin:16px 24px;color:#222;max-width:1100px}
h1{font-size:19px;margin:0 0 2px}h2{font-size:15px;margin:16px 0 4px}
.sub{color:#666;margin-bottom:8px}.note{color:#666;margin:2px 0}
.counts{display:flex;flex-wrap:wrap;gap:6px}
.count{border-radius:5px;padding:4px 10px;min-width:60px;color:#fff}
.count b{display:block;font-size:18px}.count.never{color:#333}
.row{display:flex;gap:24px;flex-wrap:wrap;align-items:flex-start}
table{border-collapse:collapse;margin:2px 0;font-size:12px}td,th{padding:1px 8px;
border-bottom:1px solid #eee;text-align:left;vertical-align:top}th{background:#f6f6f6}
td.n{text-align:right}
#failures p{overflow-wrap:anywhere}
pre{background:#f6f6f6;padding:4px 8px;margin:2px 0;font-size:11px;white-space:pre-wrap}
p{margin:4px 0}
svg{width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif;fill:#333}
.legend span{display:inline-block;margin-right:12px}
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


def _kib(kib: float) -> str:
    for unit, size in (("GiB", 1 << 20), ("MiB", 1 << 10)):
        if kib >= size:
            value = kib / size
            return f"{value:.{0 if value >= 100 else 1}f} {unit}"
    return f"{kib:.0f} KiB"


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _counts(report: StatusReport) -> str:
    boxes = [
        f'<div class="count {_e(state)}" style="background:{COLOURS.get(state, "#000")}" '
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


def _svg(ident: str, height: float, label: str, body: Iterable[str], attrs: str = "") -> str:
    return (
        f'<svg id="{ident}" viewBox="0 0 {_WIDTH} {height:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{_e(label)}"{attrs}>'
        + "".join(body)
        + "</svg>"
    )


# -- the timeline ---------------------------------------------------------------------------


class _Row:
    """A row as drawn: a lane, or an element's or a host's lanes merged."""

    def __init__(self, key: RowKey, cells: bytearray, lanes: int) -> None:
        self.key = key
        self.host, element, self.slot = key
        self.element = element if element is not None else "(all elements)"
        self.cells = cells
        self.lanes = lanes  # the lanes merged in it
        self.y = 0.0
        self.h = 0.0

    def place(self, y: float, h: float) -> None:
        """Where it is drawn: its top and height."""
        self.y, self.h = y, h


def _rows(tl: Timeline) -> list[list[_Row]]:
    """The timeline's rows in groups: an element's lanes side by side in time, else each
    row alone."""
    per_host: dict[str, int] = {}
    for (host, _), frees in tl.frees.items():
        per_host[host] = per_host.get(host, 0) + len(frees)
    keys = tl.row_keys()
    shown = {host for host, _, _ in keys}
    other = sum(n for host, n in per_host.items() if host not in shown)
    groups: list[list[_Row]] = []
    last: tuple[str, str | None] | None = None
    for key in keys:
        host, element, slot = key
        if slot is not None:
            lanes = 1
        elif element is not None:
            lanes = tl.lanes((host, element))
        else:
            lanes = per_host.get(host, other)
        row = _Row(key, tl.rows[key], lanes)
        if slot is not None and last == (host, element):
            groups[-1].append(row)
        else:
            groups.append([row])
        last = (host, element)
    return groups


def _timeline(tl: Timeline) -> str:
    """A lane per slot of each host and array element (see :func:`_rows`), the attempts on
    it: one by one while they are few, else the cells merged into bars of their state."""
    span = tl.span()
    if span is None:
        return "<p>No attempt has started yet.</p>"
    t0, t1 = span
    length = max(t1 - t0, 1e-6)
    mode, groups = tl.mode, _rows(tl)
    nrows = sum(len(g) for g in groups)
    gap = 2.0 if len(groups) <= 40 else 1.0 if len(groups) <= 150 else 0.0
    lane_h = min(_LANE_MOST, max(1.0, (LANES_HEIGHT - gap * len(groups)) / nrows))
    top = 22.0
    y = top
    for group in groups:
        for row in group:
            row.place(y, lane_h)
            y += lane_h
        y += gap
    bottom = y
    # a label where its group has room for one, else on every few groups
    block = lane_h * nrows / len(groups) + gap
    every = max(1, math.ceil(10 / block))
    size = min(11.0, max(7.0, block - 1)) if every == 1 else 10.0

    def x_of(t: float) -> float:
        return _LABEL + (t - t0) / length * _PLOT

    parts: list[str] = []
    for k, group in enumerate(groups):
        first = group[0]
        height = lane_h * len(group)
        if k % 2:
            parts.append(
                f'<rect x="0" y="{first.y:.1f}" width="{_WIDTH}" height="{height:.1f}" '
                'fill="#f3f3f3"/>'
            )
        if k % every == 0:
            name = first.host if mode == "hosts" else f"{first.host} {first.element}"
            parts.append(
                f'<text x="4" y="{first.y + min(height, size) - 1:.1f}" '
                f'style="font-size:{size:.0f}px">{_e(name[:34])}</text>'
            )
    detail = tl.detail if mode == "slots" else None
    for group in groups:
        for row in group:
            attrs = (
                f'class="lane" data-host="{_e(row.host)}" data-element="{_e(row.element)}" '
                f'data-y="{row.y:.1f}" data-h="{row.h:.1f}"'
            )
            if row.slot is not None:
                attrs += f' data-slot="{row.slot}"'
            else:
                attrs += f' data-slots="{row.lanes}"'
            body = "" if detail is not None else _cell_bars(tl, row, x_of)
            parts.append(f"<g {attrs}>{body}</g>")
    rows_of = {r.key: r for g in groups for r in g}
    kept = detail if detail is not None else tl.marked

    def row_for(group: tuple[str, str], lane: int) -> _Row:
        return rows_of[tl.row_key(group, lane)]

    # ok first: a failure drawn over its neighbours stays in sight
    for k in sorted(kept, key=lambda k: k.attempt.status == "ok", reverse=True):
        a = k.attempt
        row = row_for(k.group, k.lane)
        x = x_of(k.start)
        w = max(0.6, x_of(k.end) - x)
        marked = " marked" if a.status in ("lost", "running") else ""
        parts.append(
            f'<rect class="attempt{marked}" x="{x:.2f}" y="{row.y + 0.5:.1f}" '
            f'width="{w:.2f}" height="{max(0.6, row.h - 1):.1f}" '
            f'fill="{COLOURS.get(a.status, "#000")}" data-task="{a.tasknum}" '
            f'data-status="{_e(a.status)}" data-start="{k.start:.6f}" data-end="{k.end:.6f}">'
            f"<title>task {a.tasknum} attempt {a.attempt} {_e(a.status)}"
            f"{'' if a.seconds is None else ', ' + _secs(a.seconds)}: {_e(a.line[:80])}"
            "</title></rect>"
        )
    axis = bottom + 14
    for k in range(5):
        x = _LABEL + k / 4 * _PLOT
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        parts.append(
            f'<text x="{x:.0f}" y="{axis:.0f}" text-anchor="{anchor}">'
            f"+{_secs(k / 4 * length)}</text>"
        )
    lanes_said = {
        "slots": "a lane per slot",
        "elements": "an element's slots in one lane",
        "hosts": "a host's slots in one lane",
    }[mode]
    head = (
        f'<text x="{_LABEL}" y="12">{lanes_said}; time from the first start, '
        f"{_e(_clock(t0))} UTC, to the last end, {_e(_clock(t1))} UTC</text>"
    )
    attrs = (
        f' data-t0="{t0:.6f}" data-t1="{t1:.6f}" data-mode="{mode}" '
        f'data-x0="{_LABEL}" data-x1="{_LABEL + _PLOT}"'
    )
    return _svg("timeline", axis + 6, f"timeline of {tl.attempts} attempts", [head, *parts], attrs)


def _cell_bars(tl: Timeline, row: _Row, x_of: Callable[[float], float]) -> str:
    """A row's cells as bars: runs of one state, one path per state; bars of one state
    closer than a unit of the drawing merged."""
    cells = row.cells
    c0, c1 = tl.cell_range()
    width = tl.width
    ends: dict[int, list[list[float]]] = {}
    p = c0
    while p <= c1:
        code = cells[p]
        q = p
        while q + 1 <= c1 and cells[q + 1] == code:
            q += 1
        if code:
            x0 = x_of(tl.cell_time(p))
            x1 = x_of(tl.cell_time(q) + width)
            x0, x1 = max(x0, _LABEL), min(x1, _LABEL + _PLOT)
            bars = ends.setdefault(code, [])
            if bars and x0 - bars[-1][1] < 1.0:
                bars[-1][1] = max(bars[-1][1], x1)
            else:
                bars.append([x0, max(x1, x0 + 0.6)])
        p = q + 1
    out = []
    y = row.y + row.h / 2
    stroke = max(0.6, row.h - (1 if row.h >= 3 else 0))
    for code, bars in sorted(ends.items()):
        # each bar from where it begins: relative moves would add up their rounding
        d = "".join(f"M{x0:.1f} {y:.1f}h{x1 - x0:.1f}" for x0, x1 in bars)
        state = STATES_DRAWN[code - 1]
        out.append(
            f'<path class="bars" data-status="{state}" d="{d}" '
            f'stroke="{COLOURS.get(state, "#000")}" stroke-width="{stroke:.1f}" fill="none"/>'
        )
    return "".join(out)


# -- throughput and busy slots --------------------------------------------------------------


def _over_time(tl: Timeline) -> str:
    """Attempts ended per unit of time (ok, not ok stacked), and the slots busy on average,
    in buckets across the run."""
    span = tl.span()
    if span is None or tl.extent is None:
        return ""
    t0, t1 = span
    c0, c1 = tl.cell_range()
    per = max(1, math.ceil((c1 - c0 + 1) / _BUCKETS))
    width = tl.width * per
    buckets = []
    for b in range(c0, c1 + 1, per):
        ok = sum(tl.ended_ok[b : b + per])
        bad = sum(tl.ended_bad[b : b + per])
        busy = sum(tl.busy[b : b + per]) / width
        buckets.append((tl.cell_time(b), ok, bad, busy))
    length = max(t1 - t0, 1e-6)
    most_rate = max((ok + bad) / width for _, ok, bad, _ in buckets) or 1.0
    most_busy = max(busy for *_, busy in buckets) or 1.0
    plot_h, gap = 40.0, 16.0
    parts = []

    def x_of(t: float) -> float:
        return _LABEL + min(max((t - t0) / length, 0.0), 1.0) * _PLOT

    y_rate, y_busy = 16.0, 16.0 + plot_h + gap
    for start, ok, bad, busy in buckets:
        x0, x1 = x_of(start), x_of(start + width)
        if x1 - x0 <= 0:
            continue
        base = y_rate + plot_h
        for n, state in ((ok, "ok"), (bad, "failed")):
            if n:
                h = n / width / most_rate * plot_h
                base -= h
                parts.append(
                    f'<rect class="rate" x="{x0:.1f}" y="{base:.1f}" width="{x1 - x0:.1f}" '
                    f'height="{h:.1f}" fill="{COLOURS[state]}"/>'
                )
        if busy:
            h = busy / most_busy * plot_h
            parts.append(
                f'<rect class="busy" x="{x0:.1f}" y="{y_busy + plot_h - h:.1f}" '
                f'width="{x1 - x0:.1f}" height="{h:.1f}" fill="{COLOURS["running"]}"/>'
            )
    for y, label, top_label in (
        (y_rate, "attempts ended (ok, not ok)", rate_text(most_rate)),
        (y_busy, "slots busy, on average", f"{most_busy:.1f} slots"),
    ):
        parts.append(
            f'<line x1="{_LABEL}" y1="{y + plot_h}" x2="{_LABEL + _PLOT}" y2="{y + plot_h}" '
            'stroke="#999"/>'
        )
        parts.append(f'<text x="4" y="{y + 10:.0f}">{_e(label)}</text>')
        parts.append(f'<text x="4" y="{y + 24:.0f}">top: {_e(top_label)}</text>')
    return _svg(
        "overtime",
        y_busy + plot_h + 6,
        "throughput and busy slots over time",
        parts,
        f' data-most-busy="{most_busy:.3f}"',
    )


# -- task times -----------------------------------------------------------------------------


def _histogram(tl: Timeline) -> str:
    """How long the ended attempts took, ok and not ok stacked, in equal bins."""
    bins = tl.times.used()
    if not bins:
        return "<p>No attempt has ended yet.</p>"
    most = max(ok + bad for _, _, ok, bad in bins) or 1
    left, top, plot_h = 50, 10, 90
    plot_w = _WIDTH - left - 10
    bar_w = plot_w / len(bins)
    parts = []
    for i, (lo, hi, ok, bad) in enumerate(bins):
        x = left + i * bar_w
        y = top + plot_h
        for n, state in ((ok, "ok"), (bad, "failed")):
            if not n:
                continue
            h = n / most * plot_h
            y -= h
            parts.append(
                f'<rect class="bin" x="{x + 0.5:.1f}" y="{y:.1f}" width="{max(bar_w - 1, 0.5):.1f}"'
                f' height="{h:.1f}" fill="{COLOURS[state]}" data-count="{n}">'
                f"<title>{n} {'ok' if state == 'ok' else 'not ok'}, "
                f"{_secs(lo)} to {_secs(hi)}</title></rect>"
            )
        if ok + bad and bar_w >= 7 * len(str(ok + bad)):
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{y - 2:.1f}" text-anchor="middle">'
                f"{ok + bad}</text>"
            )
    base = top + plot_h
    parts.append(f'<line x1="{left}" y1="{base}" x2="{_WIDTH - 10}" y2="{base}" stroke="#999"/>')
    high = bins[-1][1]
    for k in range(6):
        x = left + k / 5 * plot_w
        anchor = "start" if k == 0 else "end" if k == 5 else "middle"
        parts.append(
            f'<text x="{x:.0f}" y="{base + 14}" text-anchor="{anchor}">{_secs(k / 5 * high)}</text>'
        )
    parts.append(
        f'<text x="{left}" y="{base + 30}">time per attempt ({tl.times.count} ended; '
        f"the most in one bin: {most})</text>"
    )
    return _svg("histogram", base + 36, f"histogram of {tl.times.count} task times", parts)


# -- what the attempts used -----------------------------------------------------------------


def _usage(tl: Timeline) -> str:
    """Peak memory and CPU per host and per element, their distributions and the attempts
    that used most; or what was not measured."""
    uses = list(tl.by_host.values())
    peak, cpu = Spread(), Spread()
    unmeasured = 0
    for u in uses:
        peak.merge(u.peak)
        cpu.merge(u.cpu)
        unmeasured += u.unmeasured
    ended = peak.count + unmeasured
    if not peak.count and not cpu.count:
        return (
            f'<p id="usage">Peak memory and CPU: not measured for any of the {ended} ended '
            "attempts.</p>"
        )
    note = (
        f'<p class="note" id="usage">Measured for {peak.count} of {ended} ended attempts'
        f"{f' ({unmeasured} not measured)' if unmeasured else ''}; peak: the largest resident "
        "size (a command's largest process, not their sum; a function's worker in its call)."
        "</p>"
    )
    charts = _use_charts(peak, cpu)
    hosts = _use_table("host", tl.by_host)
    return (
        note + charts + _per_element(tl.by_element) + f'<div class="row">{hosts}{_most(tl)}</div>'
    )


def _most(tl: Timeline) -> str:
    """The attempts that used most memory, and most CPU: tables beside the host table."""
    out = []
    for measure, title, shown in (("peak", "most memory", _kib), ("cpu", "most CPU", _secs)):
        top = tl.biggest(measure)[:5]
        if top:
            rows = ((t, a, el, shown(v)) for v, t, a, el in top)
            out.append(
                f"<div><b>{title}</b>"
                + _table(("task", "attempt", "element", measure), rows, 3)
                + "</div>"
            )
    return "".join(out)


def _use_charts(peak: Spread, cpu: Spread) -> str:
    """The distributions of peaks and of CPU times, side by side, on log scales."""
    parts = []
    half = _WIDTH / 2
    for k, (spread, title, shown) in enumerate(
        ((peak, "peak memory", _kib), (cpu, "CPU time (user + system)", _secs))
    ):
        left = k * half + 10
        plot_w, plot_h, top = half - 30, 70.0, 16.0
        bins = list(spread.bins(_USE_BINS))
        parts.append(f'<text x="{left:.0f}" y="11">{_e(title)}</text>')
        if not bins:
            parts.append(f'<text x="{left:.0f}" y="40">not measured</text>')
            continue
        most = max(n for *_, n in bins) or 1
        w = plot_w / len(bins)
        for i, (lo, hi, n) in enumerate(bins):
            if n:
                h = n / most * plot_h
                parts.append(
                    f'<rect class="use" x="{left + i * w:.1f}" y="{top + plot_h - h:.1f}" '
                    f'width="{max(w - 1, 0.5):.1f}" height="{h:.1f}" fill="#0072b2" '
                    f'data-count="{n}"><title>{n}: {shown(lo)} to {shown(hi)}</title></rect>'
                )
        base = top + plot_h
        parts.append(
            f'<line x1="{left:.0f}" y1="{base}" x2="{left + plot_w:.0f}" y2="{base}" '
            'stroke="#999"/>'
        )
        q50, q95 = spread.quantile(0.5), spread.quantile(0.95)
        parts.append(
            f'<text x="{left:.0f}" y="{base + 13}">{_e(shown(bins[0][0]))}</text>'
            f'<text x="{left + plot_w:.0f}" y="{base + 13}" text-anchor="end">'
            f"{_e(shown(bins[-1][1]))}</text>"
            f'<text x="{left + plot_w / 2:.0f}" y="{base + 13}" text-anchor="middle">'
            f"median {_e(shown(q50 or 0))}, 95% {_e(shown(q95 or 0))}, "
            f"most {_e(shown(spread.high))}</text>"
        )
    return _svg("use", 106, "distributions of peak memory and CPU", parts)


def _use_table(by: str, uses: dict[str, Use]) -> str:
    """Per host (or element): attempts measured, the peak's median, 95% and most, CPU."""
    names = sorted(uses, key=natural)
    rows = []
    for name in names[:_ROWS]:
        u = uses[name]
        p50, p95 = u.peak.quantile(0.5), u.peak.quantile(0.95)
        c95 = u.cpu.quantile(0.95)
        rows.append(
            (
                name,
                u.peak.count,
                "-" if p50 is None else _kib(p50),
                "-" if p95 is None else _kib(p95),
                "-" if not u.peak.count else _kib(u.peak.high),
                "-" if c95 is None else _secs(c95),
            )
        )
    more = len(names) - _ROWS
    head = (by, "measured", "peak median", "95%", "most", "CPU 95%")
    return (
        "<div>"
        + _table(head, rows, 1)
        + (f'<p class="note">and {more} more {by}s</p>' if more > 0 else "")
        + "</div>"
    )


def _per_element(uses: dict[str, Use]) -> str:
    """A bar per element: its peaks' 95% (the bar) and their most (a mark above it)."""
    names = [n for n in sorted(uses, key=natural) if uses[n].peak.count]
    if not names or len(names) > _PLOT:
        return ""
    high = max(uses[n].peak.high for n in names) or 1.0
    left, top, plot_h = 10.0, 16.0, 50.0
    w = (_WIDTH - 20) / len(names)
    parts = [
        f'<text x="{left:.0f}" y="11">peak per element, 95% (bar) and most (mark), '
        f"{len(names)} elements; the most {_e(_kib(high))}</text>"
    ]
    for i, name in enumerate(names):
        u = uses[name]
        q = u.peak.quantile(0.95) or 0.0
        x = left + i * w
        h = q / high * plot_h
        parts.append(
            f'<rect class="element-peak" x="{x:.1f}" y="{top + plot_h - h:.1f}" '
            f'width="{max(w - 1, 0.5):.1f}" height="{h:.1f}" fill="#0072b2" '
            f'data-element="{_e(name)}"><title>{_e(name)}: 95% {_e(_kib(q))}, most '
            f"{_e(_kib(u.peak.high))}</title></rect>"
        )
        y = top + plot_h - u.peak.high / high * plot_h
        parts.append(
            f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + max(w - 1, 0.5):.1f}" y2="{y:.1f}" '
            'stroke="#d55e00"/>'
        )
    return _svg("element-peaks", top + plot_h + 4, "peak memory per element", parts)


# -- tables and failures --------------------------------------------------------------------


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
    for g in groups[:_FAILURE_GROUPS]:
        first = g.tasks[0]
        out.append(
            f'<p><b style="color:{COLOURS.get(g.state, "#000")}">{len(g.tasks)} {_e(g.state)}'
            f"</b>: tasks {_e(_cut(array_spec(g.tasknums)))}; the first, task {first.tasknum} "
            f"(attempt {first.attempt}): {_e(first.line)}</p>"
        )
        if first.stderr:
            out.append(f"<pre>{_e(chr(10).join(first.stderr[-_FAILURE_LINES:]))}</pre>")
    more = len(groups) - _FAILURE_GROUPS
    if more > 0:
        out.append(
            f'<p class="note">and {more} more groups: `zotsink status TASKS OUT --failed` '
            "lists them all</p>"
        )
    out.append("</div>")
    return "".join(out)


def _cut(spec: str) -> str:
    """An array spec cut at a comma within :data:`_SPEC_CHARS`."""
    if len(spec) <= _SPEC_CHARS:
        return spec
    return spec[: spec.rfind(",", 0, _SPEC_CHARS)] + ",..."


def _hosts(tl: Timeline) -> str:
    rows = [
        (
            name,
            r["attempts"],
            r["ok"],
            r["not_ok"],
            r["running"],
            _secs(r["mean_s"]),
            _secs(r["max_s"]),
        )
        for name, r in tl.hosts.rows()
    ]
    more = len(rows) - _ROWS
    return _table(
        ("host", "attempts", "ok", "not ok", "running", "mean", "longest"), rows[:_ROWS], 1
    ) + (f'<p class="note">and {more} more hosts: `status --by host`</p>' if more > 0 else "")


# -- the page -------------------------------------------------------------------------------


def status_page(
    report: StatusReport,
    attempts: Iterable[Attempt],
    groups: Sequence[FailureGroup] = (),
    *,
    title: str = "zotsink run",
    now: float | None = None,
    until: float | None = None,
) -> str:
    """The HTML page of a run: ``report`` (:func:`task_status`), the ``attempts``
    (:func:`iter_attempts`, read once) and the failures grouped (:func:`group_failures`).
    ``now``: the moment it is drawn (said on the page); ``until``: where attempts still
    running end, when their runs live (else at the run's last end). One file with
    everything inline: it opens from a cluster's file system, offline, with scripts off."""
    now = time.time() if now is None else now
    tl = Timeline(until=until, rows=LANES_HEIGHT // _LANE_LEAST).feed(attempts).finish()
    c = report.counts
    shown = ", ".join(f"{n} {state}" for state, n in c.items() if n)
    rate = "" if not report.rate else f"; {rate_text(report.rate)}"
    states_seen = [s for s in (*STATES_DRAWN, *tl.states) if tl.states.get(s)]
    states_seen = list(dict.fromkeys(states_seen))
    slow = [(n, _secs(s), line[:40]) for n, s, line in report.slowest[:_ROWS]]
    marked_left = (
        f'<p class="note">{tl.marked_left} more lost or running attempts are drawn in their '
        "lanes only</p>"
        if tl.marked_left
        else ""
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<div class="sub">{report.total} tasks: {_e(shown or "none")}{_e(rate)}; '
        f"{tl.attempts} attempts; drawn {_e(_clock(now))} UTC</div>",
        _counts(report),
        "<h2>Attempts per host and array element</h2>",
        _legend(states_seen),
        _timeline(tl),
        marked_left,
        _over_time(tl),
        "<h2>Task times</h2>",
        _histogram(tl),
        "<h2>Memory and CPU</h2>",
        _usage(tl),
        "<h2>Failures, grouped by their last line</h2>",
        _failures(groups),
        '<div class="row"><div><h2>Slowest tasks</h2>',
        _table(("task", "took", "line"), slow, 1) if slow else "<p>None ended yet.</p>",
        "</div><div><h2>Per host</h2>",
        _hosts(tl),
        "</div></div>",
        "</body></html>\n",
    ]
    return "\n".join(parts)


def write_page(path: str | os.PathLike[str], page: str) -> None:
    """Put ``page`` at ``path`` whole, or leave what was there (a browser may be reading
    it; see :func:`~zotsink._core.wholefile.whole_file`: never through a link planted at
    its name), as UTF-8 with a replacement character for each byte of a name that is not
    UTF-8. Raises :class:`~zotsink.errors.WriteError` or
    :class:`~zotsink.errors.UsageError`."""
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
