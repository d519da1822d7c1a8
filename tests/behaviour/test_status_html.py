"""``zotsink status --html FILE`` draws one self-contained page, checked in a real browser
(headless Chromium: a screenshot, the DOM it built, its console); ``status --by`` as a table;
``--html FILE --refresh S`` rewrites the page while runs live.

The large page is drawn from a ledger of 100,000 tasks run by 64 array elements two at a
time (tests/behaviour/synthetic.py writes it row by row): within 2,000 pixels of height and
5 MB, two lanes for each element, a lost attempt ending where its run's rows end, an axis
from the first start to the last end, nothing in the console; and ``status --by`` and
``--html`` there within 1.5 times the memory of plain ``status``.

Chromium is installed by scripts/test (as root); where it is missing the browser test
skips with the reason, except where ZOTSINK_CLUSTER_REQUIRED=1 (CI) makes that a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.behaviour.waiting import wait_for
from tests.ledgers import begins

Run = Callable[..., subprocess.CompletedProcess[bytes]]

#: Tasks 7, 14, 21, ... fail alike; the rest return a record.
MEASURE = """
def measure(line):
    n = int(line[4:])
    if n % 7 == 0:
        raise ValueError("no pixels in " + line)
    return {"item": line, "n": n}
"""
OK_GREEN = (0x00, 0x9E, 0x73)
FAILED_ORANGE = (0xD5, 0x5E, 0x00)


def two_elements(tmp_path: Path, zotsink: Run) -> Path:
    """40 tasks run by two array elements of job 900, 20 each."""
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"item{n:02d}\n" for n in range(1, 41)))
    (tmp_path / "measure.py").write_text(MEASURE)
    for index in ("1", "2"):
        env = {"SLURM_ARRAY_JOB_ID": "900", "SLURM_ARRAY_TASK_ID": index, "SLURM_JOB_ID": "9"}
        r = zotsink(
            "run", tasks, "out.tsv", "--chunk", "20", "--jobs", "2", "--call",
            "measure.py:measure", env=env,
        )  # fmt: skip
        assert r.returncode == 1, r.stderr  # a task of each failed
    return tasks


class _Svg(HTMLParser):
    """What the page's DOM holds: attempts and lanes of the timeline, bins of the histogram,
    counts."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts: list[dict[str, str]] = []
        self.lanes: list[dict[str, str]] = []
        self.timeline: dict[str, str] = {}
        self.bins: list[int] = []
        self.counts: dict[str, str] = {}
        self.tags: set[str] = set()
        self._count: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.add(tag)
        if tag == "rect" and a.get("class", "").split()[:1] == ["attempt"]:
            self.attempts.append(a)
        elif tag == "g" and a.get("class") == "lane":
            self.lanes.append(a)
        elif tag == "svg" and a.get("id") == "timeline":
            self.timeline = a
        elif tag == "rect" and a.get("class") == "bin":
            self.bins.append(int(a["data-count"]))
        elif tag == "div" and "data-state" in a:
            self._count = a["data-state"]
        elif tag == "b" and self._count is not None:
            self.counts[self._count] = ""

    def handle_data(self, data: str) -> None:
        if self._count is not None and self.counts.get(self._count) == "":
            self.counts[self._count] = data
            self._count = None


def parse(page: str) -> _Svg:
    p = _Svg()
    p.feed(page)
    return p


def test_html_page_is_one_self_contained_file(tmp_path: Path, zotsink: Run) -> None:
    tasks = two_elements(tmp_path, zotsink)
    r = zotsink("status", tasks, "out.tsv", "--html", "page.html")
    assert r.returncode == 1  # not every task is ok
    assert b"zotsink: wrote page.html (40 attempts)" in r.stderr
    page = (tmp_path / "page.html").read_text()
    # nothing fetched, nothing run: no script, no link, no image from elsewhere
    for needle in ("<script", "src=", "href=", "@import", "url("):
        assert needle not in page
    dom = parse(page)
    assert sorted(int(a["data-task"]) for a in dom.attempts) == list(range(1, 41))
    failed = sorted(int(a["data-task"]) for a in dom.attempts if a["data-status"] == "failed")
    assert failed == [7, 14, 21, 28, 35]
    assert sum(dom.bins) == 40
    assert dom.counts == {"ok": "35", "failed": "5"}
    # the failures grouped, with the tail of the first
    assert "5 failed</b>: tasks 7,14,21,28,35; the first, task 7" in page
    assert "ValueError: no pixels in item07" in page
    # no leftover of the writing
    assert sorted(p.name for p in tmp_path.glob("page.html*")) == ["page.html"]


def test_status_by_host_and_element_as_a_table(tmp_path: Path, zotsink: Run) -> None:
    tasks = two_elements(tmp_path, zotsink)
    r = zotsink("status", tasks, "out.tsv", "--by", "element")
    rows = [line.split() for line in r.stdout.decode().splitlines()]
    assert rows[0] == ["element", "attempts", "ok", "not", "ok", "running", "mean", "longest"]
    assert [row[:5] for row in rows[1:]] == [
        ["900[1]", "20", "18", "2", "0"],
        ["900[2]", "20", "17", "3", "0"],
    ]
    r = zotsink("status", tasks, "out.tsv", "--by", "host", "--json")
    d = json.loads(r.stdout)
    assert [(x["host"], x["attempts"], x["ok"], x["not_ok"]) for x in d["by"]] == [
        (os.uname().nodename, 40, 35, 5)
    ]


#: Task "a" waits for the file "go" (its pid in a.pid); any other prints its line.
WAIT_FOR_GO = """
import os, sys, time
if sys.argv[1] == "a" and not os.path.exists("go"):
    with open("a.pid.new", "w") as f:
        f.write(str(os.getpid()))
    os.rename("a.pid.new", "a.pid")
    while not os.path.exists("go"):
        time.sleep(0.01)
print(sys.argv[1])
"""


def test_status_by_element_counts_an_attempt_whose_run_died_as_lost(
    tmp_path: Path, zotsink: Run
) -> None:
    """Element 2's run and its task die (SIGKILL) while it runs task 1; element 1's run
    runs task 1 again: element 2's attempt is lost, not running."""
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    (tmp_path / "task.py").write_text(WAIT_FOR_GO)
    argv = [sys.executable, "-m", "zotsink", "run", "tasks.txt", "out.tsv", "--pull"]
    argv += ["--jobs", "1", "--", sys.executable, "task.py"]

    def element(index: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOTSINK_", "SLURM_"))}
        return {**env, "SLURM_ARRAY_JOB_ID": "900", "SLURM_ARRAY_TASK_ID": index,
                "SLURM_JOB_ID": f"90{index}"}  # fmt: skip

    first = subprocess.Popen(
        argv, cwd=tmp_path, env=element("2"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(lambda: (tmp_path / "a.pid").exists(), first, "started task a")
        wait_for(lambda: bool(begins(tmp_path / "out.tsv.ledger")), first, "wrote a's begin row")
        os.kill(int((tmp_path / "a.pid").read_text()), signal.SIGKILL)
    finally:
        first.kill()
        first.communicate()
    (tmp_path / "go").touch()
    second = subprocess.run(argv, cwd=tmp_path, env=element("1"), capture_output=True, timeout=60)
    assert second.returncode == 0, second.stderr
    r = zotsink("status", "tasks.txt", "out.tsv", "--by", "element")
    rows = [line.split() for line in r.stdout.decode().splitlines()]
    assert [row[:5] for row in rows[1:]] == [
        ["900[1]", "3", "3", "0", "0"],
        ["900[2]", "1", "0", "1", "0"],  # lost with its run: not ok, not running
    ]
    assert r.returncode == 0, r.stderr  # every task ok


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    reason = "no Chromium here (scripts/test installs the Debian package chromium as root)"
    if os.environ.get("ZOTSINK_CLUSTER_REQUIRED") == "1":
        pytest.fail(f"{reason} (ZOTSINK_CLUSTER_REQUIRED=1)", pytrace=False)
    pytest.skip(reason)


def browser(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    home = tmp_path / "browser-home"
    home.mkdir(exist_ok=True)
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={home / 'profile'}", *args],
        capture_output=True, timeout=180, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip


def test_html_page_in_a_real_browser(tmp_path: Path, zotsink: Run) -> None:
    from PIL import Image

    tasks = two_elements(tmp_path, zotsink)
    assert zotsink("status", tasks, "out.tsv", "--html", "page.html").returncode == 1
    url = (tmp_path / "page.html").as_uri()
    shot = tmp_path / "shot.png"
    r = browser(tmp_path, f"--screenshot={shot}", "--window-size=1200,1400", url)
    assert shot.exists(), r.stderr.decode()[-2000:]
    with Image.open(shot) as im:
        rgb = im.convert("RGB")
        assert rgb.size == (1200, 1400)
        colours = rgb.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 20  # not blank: text, bars, boxes
    by_colour = {c: n for n, c in colours}
    # the ok and the failed boxes and bars were drawn (a count box alone is thousands of
    # pixels), the ok ones more
    assert by_colour.get(OK_GREEN, 0) > by_colour.get(FAILED_ORANGE, 0) > 2000
    # the DOM the browser built: the SVGs, each attempt, the histogram's counts
    r = browser(tmp_path, "--dump-dom", url)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    dom = parse(r.stdout.decode())
    assert {"svg", "rect", "text"} <= dom.tags
    assert sorted(int(a["data-task"]) for a in dom.attempts) == list(range(1, 41))
    assert sum(dom.bins) == 40
    assert dom.counts == {"ok": "35", "failed": "5"}


def content_height(shot: Path) -> int:
    """The lowest row of the screenshot that is not page background: the page's height."""
    from PIL import Image

    with Image.open(shot) as im:
        rgb = im.convert("RGB")
    width, height = rgb.size
    pixels = rgb.load()
    for y in range(height - 1, -1, -1):
        if any(pixels[x, y] != (255, 255, 255) for x in range(0, width, 2)):
            return y + 1
    return 0


def console(stderr: bytes) -> list[str]:
    """What the page said in the browser's console (with --enable-logging=stderr)."""
    return [line for line in stderr.decode(errors="replace").splitlines() if ":CONSOLE" in line]


def look(tmp_path: Path, page: Path, name: str) -> tuple[int, list[str], _Svg]:
    """(content height in pixels at 1,200 wide, console lines, the DOM) of ``page``."""
    shot = tmp_path / f"{name}.png"
    url = page.as_uri()
    r = browser(
        tmp_path,
        "--enable-logging=stderr",
        "--v=0",
        f"--screenshot={shot}",
        "--window-size=1200,4000",
        url,
    )
    assert shot.exists(), r.stderr.decode()[-2000:]
    said = console(r.stderr)
    r = browser(tmp_path, "--dump-dom", url)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return content_height(shot), said, parse(r.stdout.decode())


def test_the_console_scan_sees_what_a_page_says(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom'); nosuch();</script></body></html>")
    height, said, _ = look(tmp_path, bad, "bad")
    assert any('"boom"' in line for line in said) and any("nosuch" in line for line in said)
    assert height == 0  # an empty page: no content


def test_a_large_run_in_a_real_browser(tmp_path: Path, zotsink: Run) -> None:
    from tests.behaviour.synthetic import write_run

    run = write_run(tmp_path)
    r = zotsink("status", "tasks.txt", "out.tsv", "--html", "page.html")
    assert r.returncode == 1, r.stderr  # failed and killed tasks
    assert b"zotsink: wrote page.html (100002 attempts)" in r.stderr
    page = tmp_path / "page.html"
    assert page.stat().st_size <= 5_000_000
    height, said, dom = look(tmp_path, page, "large")
    assert 600 < height <= 2000
    assert said == []
    # a lane per slot: each element ran two at a time
    per_element: dict[str, set[str]] = {}
    for lane in dom.lanes:
        per_element.setdefault(lane["data-element"], set()).add(lane["data-slot"])
    assert per_element == {element: {"0", "1"} for element in run.elements}
    # the axis spans the run, from its first start to its last end (not the page's moment)
    t0, t1 = float(dom.timeline["data-t0"]), float(dom.timeline["data-t1"])
    assert abs(t0 - run.first_start) < 1e-5 and abs(t1 - run.last_end) < 1e-5
    x0, x1 = float(dom.timeline["data-x0"]), float(dom.timeline["data-x1"])
    # the lost attempts end where their run's last row is
    lost = {int(a["data-task"]): a for a in dom.attempts if a["data-status"] == "lost"}
    assert sorted(lost) == sorted(run.lost)
    for task, rect in lost.items():
        end = float(rect["data-end"])
        assert abs(end - run.lost[task]) < 1e-5
        left, width = float(rect["x"]), float(rect["width"])
        at = x0 + (end - t0) / (t1 - t0) * (x1 - x0)
        # its right edge is its end (a bar shorter than the least width drawn ends past it)
        assert abs(left + width - at) < 0.05 or (width == 0.6 and left - 0.01 <= at <= left + width)


def test_a_large_run_with_what_it_used(tmp_path: Path) -> None:
    """The same page with every attempt's peak and CPU (as the engine will record them):
    the memory section stays within the page's bounds."""
    import random

    import zotsink
    from tests.behaviour.synthetic import write_run

    run = write_run(tmp_path)
    rng = random.Random(1)
    report = zotsink.task_status(run.tasks, run.ledger)
    found, _ = zotsink.failed_tasks(run.tasks, run.ledger, run.log)

    def measured() -> Iterator[zotsink.Attempt]:
        for a in zotsink.iter_attempts(run.tasks, run.ledger):
            if a.seconds is not None:
                cpu = a.seconds * rng.uniform(0.5, 1.0)
                a = a._replace(peak_kib=rng.randint(300_000, 400_000), user_s=cpu, sys_s=0.01)
            yield a

    page = tmp_path / "used.html"
    zotsink.write_page(page, zotsink.status_page(report, measured(), zotsink.group_failures(found)))
    assert page.stat().st_size <= 5_000_000
    height, said, _ = look(tmp_path, page, "used")
    assert 600 < height <= 2000
    assert said == []
    text = page.read_text()
    assert "Measured for 100000 of 100000 ended attempts" in text


def test_views_of_a_large_run_use_the_memory_plain_status_does(tmp_path: Path) -> None:
    from tests.behaviour.synthetic import write_run

    write_run(tmp_path)

    def peak(*args: str) -> int:
        p = subprocess.Popen(
            [sys.executable, "-m", "zotsink", "status", "tasks.txt", "out.tsv", *args],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _, status, rusage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        assert p.returncode == 1
        return int(rusage.ru_maxrss)

    plain = peak()
    assert peak("--by", "element") <= 1.5 * plain
    assert peak("--html", "page.html") <= 1.5 * plain


#: Task "a" runs until the file "go" exists; the others end at once.
WAITS = """
import os, sys, time
while sys.argv[1] == "a" and not os.path.exists("go"):
    time.sleep(0.01)
print(sys.argv[1])
"""


def test_refresh_rewrites_the_page_while_runs_live(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    (tmp_path / "task.py").write_text(WAITS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZOTSINK_")}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zotsink",
            "run",
            "tasks.txt",
            "out.tsv",
            "--jobs",
            "2",
            "--",
            sys.executable,
            "task.py",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    page = tmp_path / "page.html"
    refresh = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zotsink",
            "status",
            "tasks.txt",
            "out.tsv",
            "--html",
            "page.html",
            "--refresh",
            "0.1",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(
            lambda: page.exists() and b'data-state="running"' in page.read_bytes(),
            refresh,
            "drew a",
        )
        first = page.stat().st_ino
        # written again, whole, under the same name
        wait_for(lambda: page.stat().st_ino != first, refresh, "rewrote the page")
        assert page.read_text().endswith("</body></html>\n")
        (tmp_path / "go").touch()
        assert run.wait(timeout=60) == 0
        # nothing runs or waits: the last page shows every task ok, and it exits by itself
        _, err = refresh.communicate(timeout=60)
    finally:
        for p in (run, refresh):
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert refresh.returncode == 0, err
    assert b"nothing runs or waits to run" in err
    dom = parse(page.read_text())
    assert dom.counts == {"ok": "3"}
    assert sorted(p.name for p in tmp_path.iterdir() if "page" in p.name) == ["page.html"]


def test_refresh_stops_at_a_signal(tmp_path: Path) -> None:
    (tmp_path / "tasks.txt").write_text("a\n")
    (tmp_path / "task.py").write_text(WAITS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZOTSINK_")}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zotsink",
            "run",
            "tasks.txt",
            "out.tsv",
            "--",
            sys.executable,
            "task.py",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    page = tmp_path / "page.html"
    refresh = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zotsink",
            "status",
            "tasks.txt",
            "out.tsv",
            "--html",
            "page.html",
            "--refresh",
            "30",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(
            lambda: page.exists() and b'data-state="running"' in page.read_bytes(),
            refresh,
            "drew a",
        )
        refresh.send_signal(signal.SIGTERM)
        _, err = refresh.communicate(timeout=30)
        assert run.poll() is None  # the run goes on: only the refreshing stopped
    finally:
        (tmp_path / "go").touch()
        run.communicate(timeout=60)
        if refresh.poll() is None:
            refresh.kill()
            refresh.communicate()
    assert b"stopped refreshing page.html" in err
    assert page.read_text().endswith("</body></html>\n")
