"""``zotsink cat OUT -o FILE.jsonl``: the snapshot in a format people load in one line."""

from __future__ import annotations

import json
from pathlib import Path


def test_cat_writes_typed_jsonl(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"name\tn\tx\na\t1\t0.5\nb\t\t2\n")
    r = zotsink("cat", out, "-o", tmp_path / "o.jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(ln) for ln in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert rows == [{"name": "a", "n": 1, "x": 0.5}, {"name": "b", "n": None, "x": 2.0}]


def test_cat_refuses_an_ending_it_cannot_write(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\n1\n")
    r = zotsink("cat", out, "-o", tmp_path / "o.xlsx")
    assert r.returncode == 2, r.stderr
    assert not (tmp_path / "o.xlsx").exists()
