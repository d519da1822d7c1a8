"""collect's progress on a terminal: done/total, percent, rate and ETA once the total is
known; nothing of it when stderr is not a terminal."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from zotsink.cli.collect import render

ZOTSINK = [sys.executable, "-m", "zotsink"]


def make(root: Path, n: int) -> Path:
    for i in range(n):
        p = root / f"c{i % 3}" / f"f{i:04d}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"i:{i}")
    return root


def on_terminal(args: list[str], cwd: Path) -> tuple[int, bytes]:
    """Run zotsink with stderr on a pseudo-terminal; its exit code and what it drew."""
    master, slave = pty.openpty()
    p = subprocess.Popen([*ZOTSINK, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    return p.wait(), seen


def test_progress_on_a_terminal_shows_total_percent_rate_and_eta(tmp_path: Path) -> None:
    make(tmp_path / "d", 1100)
    code, seen = on_terminal(["collect", "d", "-o", "o.tsv"], tmp_path)
    assert code == 0, seen
    text = seen.decode()
    assert re.search(r"reading: \[#{30}\]  1,100/1,100  100%  [\d,]+ files/s  ETA 0:00:00", text)
    assert re.search(r"writing: \[#{30}\]  1,100/1,100  100%  [\d,]+ records/s", text)
    assert "collected into o.tsv: 1100 files" in text


def test_no_progress_when_stderr_is_no_terminal(tmp_path: Path) -> None:
    make(tmp_path / "d", 600)
    r = subprocess.run([*ZOTSINK, "collect", "d", "-o", "o.tsv"], cwd=tmp_path,
                       capture_output=True)  # fmt: skip
    assert r.returncode == 0
    assert b"\r" not in r.stderr and b"ETA" not in r.stderr and b"%" not in r.stderr


def test_an_archive_shows_count_and_rate_until_its_total_is_known(tmp_path: Path) -> None:
    assert render("read", 500, 0, 2.0) == "reading: 500 files  250 files/s"
    assert render("read", 250, 1000, 1.0) == (
        "reading: [#######-----------------------]  250/1,000   25%  250 files/s  ETA 0:00:03"
    )
