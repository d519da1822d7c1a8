"""scripts/bench/run.py runs every comparison and reports ratios (tiny sizes; nothing timed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_run_benchmark_reports_ratios_and_overhead(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench" / "run.py"),
            "--tasks",
            "6",
            "--rounds",
            "1",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for needle in ("run / xargs: median", "run / tiny: median", "run's own overhead per task"):
        assert needle in out, out
    assert list(tmp_path.iterdir()) == []  # it cleans up after itself
