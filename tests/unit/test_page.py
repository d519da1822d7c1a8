"""zotsink._run.page: the page drawn from attempts (no browser here; the browser's view is
tests/behaviour/test_status_html.py), and its writing, whole or not at all."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from zotsink._ledger.view import STATES
from zotsink._run.page import status_page, write_page
from zotsink._run.report import Attempt
from zotsink._run.status import StatusReport
from zotsink.errors import UsageError

T0 = 1_795_514_400.0


def report(**counts: int) -> StatusReport:
    full = dict.fromkeys(STATES, 0)
    full.update(counts)
    return StatusReport(
        total=sum(counts.values()), counts=full, rate=None, eta=None, slowest=[], states={}
    )


def attempt(
    n: int,
    start: float,
    end: float | None,
    status: str = "ok",
    *,
    element: str = "1",
    peak: int | None = None,
    cpu: float | None = None,
) -> Attempt:
    seconds = None if end is None or status == "lost" else end - start
    user = None if cpu is None else cpu * 0.8
    system = None if cpu is None else cpu * 0.2
    return Attempt(
        n, f"item{n}", 1, "7", element, "node1", start, end, status, seconds, peak, user, system
    )


def lanes(page: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    lane = r'<g class="lane" data-host="[^"]*" data-element="([^"]*)"[^>]*?data-slot="(\d+)"'
    for m in re.finditer(lane, page):
        out.setdefault(m.group(1), []).append(m.group(2))
    return out


def test_a_few_attempts_each_drawn_and_named() -> None:
    attempts = [
        attempt(1, T0, T0 + 2),
        attempt(2, T0 + 0.5, T0 + 1.5, "failed"),
        attempt(3, T0 + 2, T0 + 3),
        attempt(4, T0, T0 + 1.2, "lost", element="2"),
    ]
    page = status_page(report(ok=2, failed=1, running=1), iter(attempts))
    for needle in ("<script", "src=", "href=", "@import", "url("):
        assert needle not in page
    tasks = sorted(int(t) for t in re.findall(r'class="attempt[^"]*"[^>]*data-task="(\d+)"', page))
    assert tasks == [1, 2, 3, 4]
    assert lanes(page) == {"7[1]": ["0", "1"], "7[2]": ["0"]}  # 1 and 2 side by side
    m = re.search(r'<svg id="timeline"[^>]*data-t0="([\d.]+)" data-t1="([\d.]+)"', page)
    assert m is not None and (float(m.group(1)), float(m.group(2))) == (T0, T0 + 3)
    lost_rect = r'data-task="4" data-status="lost" data-start="[\d.]+" data-end="([\d.]+)"'
    (lost,) = re.findall(lost_rect, page)
    assert float(lost) == T0 + 1.2  # where its run's rows end, not the page's moment
    assert "Peak memory and CPU: not measured for any of the 3 ended attempts" in page


def test_what_the_attempts_used() -> None:
    attempts = [
        attempt(n, T0 + n, T0 + n + 1, peak=(300 + n) * 1024, cpu=0.5, element=str(n % 3))
        for n in range(1, 61)
    ] + [attempt(61, T0, T0 + 1)]
    page = status_page(report(ok=61), attempts)
    assert "Measured for 60 of 61 ended attempts (1 not measured)" in page
    assert "a command's largest process, not their sum" in page
    most = page[page.index("most memory") :]
    assert re.search(r"<td>60</td><td>1</td><td>7\[0\]</td><td[^>]*>360 MiB</td>", most)
    assert page.count('class="element-peak"') == 3


def test_many_attempts_are_drawn_in_cells_and_bounded() -> None:
    attempts = (
        attempt(
            n, T0 + n // 2, T0 + n // 2 + 1.0, "failed" if n % 97 == 0 else "ok", element=str(n % 2)
        )
        for n in range(60_000)
    )
    page = status_page(report(ok=60_000), attempts)
    assert len(page) < 1_000_000
    assert 'class="attempt' not in page  # too many to draw one by one
    assert lanes(page) == {"7[0]": ["0"], "7[1]": ["0"]}
    # each failure's bar where its attempt ran, however many bars come before it
    t0, t1 = T0, T0 + 30_000
    failed = {n // 2 for n in range(60_000) if n % 97 == 0}
    at = [190 + (t0 + k + 0.5 - t0) / (t1 - t0) * 800 for k in sorted(failed)]
    bars = re.findall(r'class="bars" data-status="failed" d="([^"]+)"', page)
    assert len(bars) == 2
    xs = [float(x) for d in bars for x in re.findall(r"M([\d.]+) ", d)]
    assert len(xs) >= len(failed) // 2
    assert all(min(abs(x - a) for a in at) < 1.5 for x in xs)


def test_write_page_puts_it_whole(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    write_page(target, "one")
    write_page(target, "two")
    assert target.read_text() == "two"
    assert os.listdir(tmp_path) == ["page.html"]


def test_write_page_replaces_a_link_never_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "page.html").symlink_to(victim)
    write_page(tmp_path / "page.html", "page")
    assert victim.read_text() == "keep"
    assert not (tmp_path / "page.html").is_symlink()
    assert (tmp_path / "page.html").read_text() == "page"


def test_write_page_leaves_nothing_when_it_fails(tmp_path: Path) -> None:
    (tmp_path / "page.html").mkdir()  # a directory where the page goes: refused
    with pytest.raises(UsageError, match="is a directory, not a file zotsink may replace"):
        write_page(tmp_path / "page.html", "page")
    assert os.listdir(tmp_path) == ["page.html"]
    with pytest.raises(OSError):
        write_page(tmp_path / "no" / "page.html", "page")
