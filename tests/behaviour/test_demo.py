"""scripts/demo runs the main job and reports a matching count."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_prints_a_matching_count() -> None:
    env = dict(os.environ, DEMO_RECORDS="400")
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "records written: 3200 (distinct 3200); writers produced: 3200; MATCH" in r.stdout
