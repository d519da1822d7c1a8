"""``collect`` of files that hold one ``key: value`` pair a line (a YAML-like result per
file): each file is one row, never a row per line that other files' lines then repeat."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import zotsink as zs

ZOTSINK = [sys.executable, "-m", "zotsink"]


def _collect(d: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZOTSINK_")}
    return subprocess.run(
        [*ZOTSINK, "collect", *args], cwd=d, capture_output=True, env=env, timeout=120, check=False
    )


def _results(d: Path) -> Path:
    res = d / "res"
    res.mkdir()
    for i in (1, 2, 3):
        (res / f"r{i}.txt").write_text(f"filename: img{i}.png\nmin: 1\nmax: 9\n")
    return res


def test_a_file_of_one_pair_a_line_is_one_row(tmp_path: Path) -> None:
    _results(tmp_path)
    r = _collect(tmp_path, "res", "-o", "out.tsv")
    assert r.returncode == 0, r.stderr.decode()
    assert "3 files, 3 records, 0 duplicates dropped" in r.stderr.decode()
    assert (tmp_path / "out.tsv").read_text() == (
        "source\tfilename\tmin\tmax\n"
        "r1.txt\timg1.png\t1\t9\nr2.txt\timg2.png\t1\t9\nr3.txt\timg3.png\t1\t9\n"
    )


def test_remove_sources_keeps_every_value_of_a_removed_file(tmp_path: Path) -> None:
    _results(tmp_path)
    r = _collect(
        tmp_path, "res", "-o", "out.tsv", "--archive", "res.tar.gz", "--remove-sources",
        "--min-age", "0",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    assert not list((tmp_path / "res").iterdir())  # removed: every value is in OUT
    rows = list(zs.read_records(tmp_path / "out.tsv", header=True))
    assert sorted((x["filename"], x["min"], x["max"]) for x in rows) == [
        (f"img{i}.png", "1", "9") for i in (1, 2, 3)
    ]
    with tarfile.open(tmp_path / "res.tar.gz") as t:
        assert len(t.getnames()) == 3


def test_lines_of_one_pair_with_a_key_again_stay_rows(tmp_path: Path) -> None:
    # the same key on every line: a column of values, one row each, as before
    res = tmp_path / "res"
    res.mkdir()
    (res / "a.txt").write_text("value: 1\nvalue: 2\nvalue: 3\n")
    r = _collect(tmp_path, "res", "-o", "out.tsv")
    assert r.returncode == 0, r.stderr.decode()
    assert (tmp_path / "out.tsv").read_text() == "source\tvalue\na.txt\t1\na.txt\t2\na.txt\t3\n"
