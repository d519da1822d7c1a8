"""``zotsink cat OUT -o FILE.jsonl``: the snapshot in a format people load in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


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


def _rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    return [json.loads(ln) for ln in path.read_text().splitlines()]


@pytest.mark.parametrize("ending", [".jsonl", ".parquet"])
def test_cat_force_replaces_dest_and_without_it_refuses(tmp_path: Path, zotsink, ending) -> None:
    if ending == ".parquet":
        pytest.importorskip("pyarrow")
    out, dest = tmp_path / "o.tsv", tmp_path / f"o{ending}"
    out.write_bytes(b"name\tn\na\t1\n")
    assert zotsink("cat", out, "-o", dest).returncode == 0
    before = dest.read_bytes()
    out.write_bytes(b"name\tn\na\t1\nb\t2\n")
    r = zotsink("cat", out, "-o", dest)
    assert r.returncode == 2
    assert f"{dest} exists already".encode() in r.stderr and b"give --force" in r.stderr
    assert dest.read_bytes() == before
    r = zotsink("cat", out, "-o", dest, "--force")
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"zotsink: wrote 2 rows to {dest}\n".encode()
    assert _rows(dest) == [{"name": "a", "n": 1}, {"name": "b", "n": 2}]
    assert sorted(os.listdir(tmp_path)) == sorted(["o.tsv", dest.name])  # no temporary file


def test_cat_force_that_fails_leaves_the_old_dest(tmp_path: Path, zotsink) -> None:
    out, dest = tmp_path / "o.tsv", tmp_path / "o.jsonl"
    dest.write_bytes(b'{"name":"old"}\n')
    out.write_bytes(b"name\tn\na\t1\nb\n")  # line 3 lacks a field
    r = zotsink("cat", out, "-o", dest, "--force")
    assert r.returncode == 1
    assert b"line 3 has 1 fields where the header has 2" in r.stderr
    assert dest.read_bytes() == b'{"name":"old"}\n'
    assert sorted(os.listdir(tmp_path)) == ["o.jsonl", "o.tsv"]


def test_cat_force_without_dest_is_a_usage_error(tmp_path: Path, zotsink) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\n1\n")
    r = zotsink("cat", out, "--force")
    assert r.returncode == 2
    assert b"--force replaces the file of -o DEST" in r.stderr and r.stdout == b""
