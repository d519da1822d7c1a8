"""The benchmark harness runs and reports every figure (tiny sizes; no timing is judged)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = {"stream", "concurrent", "record", "sink", "contention", "tinyfiles", "startup", "stamp"}


def test_bench_quick_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    work = tmp_path / "work"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench" / "bench.py"),
            "--quick",
            "--json",
            str(out),
            "--dir",
            str(work),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "ZOTSINK_BENCH_ROOT"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(out.read_text())
    assert set(report["figures"]) == FIGURES
    for name, fig in report["figures"].items():
        for key in ("title", "zotsink", "baseline", "target", "met", "load1"):
            assert key in fig, (name, key)
        assert fig["met"] is None  # --quick judges nothing
        assert name in proc.stdout
    # what the harness checks besides speed: every record landed, whole
    conc = report["figures"]["concurrent"]
    assert conc["lines_check"]["zotsink"] == {"lines": 3 * 20_000, "torn": 0}
    cont = report["figures"]["contention"]["zotsink"]["representative"]
    assert cont["lines"] == cont["expected"] == 3 * 300
    assert report["figures"]["startup"]["lines_written"] >= 3
    for key in ("date", "machine", "filesystem", "command"):
        assert key in report
