"""scripts/bench/executor.py runs both ways and reports the ratio and the memory (tiny
sizes; nothing timed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_executor_benchmark_reports_the_ratio_and_the_memory() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench" / "executor.py"),
            *("--items", "50", "--rounds", "1", "--memory", "300", "--work", "0.0001"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for needle in ("median executor / pool: ", "300 items: pool ", " MiB", "executor "):
        assert needle in out, out
