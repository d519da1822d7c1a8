"""The log of ``zotsink run``: each stderr line behind its task number and attempt."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def test_retries_write_their_attempt_in_front_of_each_line(tmp_path: Path, zotsink: Run) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    # task b fails on its first attempt only: the marker file says it ran once
    script = 'echo "$0 try" >&2; [ "$0" = a ] || [ -e seen ] || { touch seen; exit 1; }'
    r = zotsink("run", "tasks.txt", "out.txt", "--retries", "2", "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    log = sorted((tmp_path / "out.txt.log").read_text().splitlines())
    assert log == ["1.1\ta try", "2.1\tb try", "2.2\tb try"]
