"""scripts/make_zot_dir.py and scripts/bench/collect.py run and report (tiny sizes, no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_zot_dir_makes_every_kind(tmp_path: Path) -> None:
    d = tmp_path / "mess"
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts/make_zot_dir.py"), str(d), "-n", "50",
         "--kind", "mixed", "--dups", "5", "--empty", "2", "--binary", "2"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = sorted(str(p.relative_to(d)).split("/")[0] for p in d.rglob("*") if p.is_file())
    assert len(got) == 50 + 5 + 2 + 2
    assert {"binary", "copies", "csv", "empty", "json", "runs", "tasks"} <= set(got)
    seed = next(p for p in d.rglob("*.JPEG.txt") if "copies" not in str(p)).read_bytes()
    assert seed.startswith(b"filename:/data/imagenet/train/") and not seed.endswith(b"\n")


def test_bench_collect_speed_and_memory_modes(tmp_path: Path) -> None:
    bench = str(ROOT / "scripts/bench/collect.py")
    r = subprocess.run(
        [sys.executable, bench, "--files", "300", "--runs", "1", "--json", "--tmp", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["rows"] == 300 and res["ratio_cat"] > 0
    assert "zotsink collect" in res["wall"] and "find -exec cat" in res["wall"]
    r = subprocess.run(
        [sys.executable, bench, "--memory", "300", "--json", "--tmp", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["rows"] == 300 and 0 < res["peak_rss_mb"] < 500
    assert list(tmp_path.iterdir()) == []  # the bench cleans up after itself
