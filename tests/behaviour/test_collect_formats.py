"""collect into .jsonl and .parquet: written whole, types inferred, read right by pandas and
DuckDB; Parquet without pyarrow is a clear error naming the extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ZOTSINK = [sys.executable, "-m", "zotsink"]

#: integer, float (an integer among floats), string (a label with a leading zero, a word),
#: a column with an empty value, a column empty everywhere but one file
SPEC = {
    "t1.txt": "task:1 loss:0.5 label:007 note:ok",
    "t2.txt": "task:2 loss:3 label:010 note:",
    "t3.txt": "task:3 loss:-1.25e-3 label:x note:tab\\there extra:9",
}


def make(root: Path) -> Path:
    d = root / "d"
    d.mkdir()
    for name, text in SPEC.items():
        (d / name).write_text(text)
    return d


def cli(*args: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:  # fmt: skip
    r = subprocess.run([*ZOTSINK, "collect", *map(str, args)], cwd=cwd, capture_output=True,
                       env=env)  # fmt: skip
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    return r


EXPECTED = [
    {"source": "t1.txt", "task": 1, "loss": 0.5, "label": "007", "note": "ok", "extra": None},
    {"source": "t2.txt", "task": 2, "loss": 3.0, "label": "010", "note": None, "extra": None},
    {"source": "t3.txt", "task": 3, "loss": -1.25e-3, "label": "x", "note": "tab\\there",
     "extra": 9},
]  # fmt: skip


def test_jsonl_has_typed_values_and_nulls(tmp_path: Path) -> None:
    make(tmp_path)
    r = cli("d", "-o", "out.jsonl", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(ln) for ln in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert rows == EXPECTED
    assert [type(r["loss"]) for r in rows] == [float, float, float]
    assert sorted(os.listdir(tmp_path)) == ["d", "out.jsonl"]  # no temporary file left


def test_a_whole_file_output_is_never_appended_to_or_replaced(tmp_path: Path) -> None:
    make(tmp_path)
    assert cli("d", "-o", "out.jsonl", cwd=tmp_path).returncode == 0
    before = (tmp_path / "out.jsonl").read_bytes()
    r = cli("d", "-o", "out.jsonl", cwd=tmp_path)
    assert r.returncode == 2
    assert b"out.jsonl exists already" in r.stderr and b"written whole" in r.stderr
    assert (tmp_path / "out.jsonl").read_bytes() == before


@pytest.mark.parametrize("ending", [".jsonl", ".parquet"])
def test_force_replaces_a_whole_output_once_the_new_one_is_whole(tmp_path: Path, ending) -> None:
    if ending == ".parquet":
        pq = pytest.importorskip("pyarrow.parquet")
    d = make(tmp_path)
    out = tmp_path / f"out{ending}"
    assert cli("d", "-o", out.name, cwd=tmp_path).returncode == 0
    old_inode = out.stat().st_ino
    (d / "t4.txt").write_text("task:4 loss:1 label:y note:new")
    r = cli("d", "-o", out.name, "--force", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert b": 4 files, 4 records," in r.stderr
    if ending == ".parquet":
        rows = pq.read_table(out).to_pylist()
    else:
        rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    new = {"source": "t4.txt", "task": 4, "loss": 1.0, "label": "y", "note": "new", "extra": None}
    assert rows == [*EXPECTED, new]
    assert out.stat().st_ino != old_inode  # a new file renamed over the old one
    assert sorted(os.listdir(tmp_path)) == sorted(["d", out.name])


def test_force_leaves_the_old_output_when_collect_fails(tmp_path: Path) -> None:
    d = make(tmp_path)
    assert cli("d", "-o", "out.jsonl", cwd=tmp_path).returncode == 0
    before = (tmp_path / "out.jsonl").read_bytes()
    (d / "t4.txt").write_bytes(b"task:4\0")
    r = cli("d", "-o", "out.jsonl", "--force", "--strict", cwd=tmp_path)
    assert r.returncode == 1
    assert b"t4.txt: binary (NUL byte at offset 6); nothing was written (--strict)" in r.stderr
    assert (tmp_path / "out.jsonl").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["d", "out.jsonl"]


def test_force_is_refused_for_an_out_that_is_appended_to(tmp_path: Path) -> None:
    make(tmp_path)
    r = cli("d", "-o", "out.tsv", "--force", cwd=tmp_path)
    assert r.returncode == 2
    assert b"--force replaces a .jsonl or .parquet OUT" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_parquet_without_pyarrow_names_the_extra_and_writes_nothing(tmp_path: Path) -> None:
    make(tmp_path)
    stub = tmp_path / "stub" / "pyarrow"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('No module named pyarrow')\n")
    path = [str(tmp_path / "stub"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    r = cli("d", "-o", "out.parquet", cwd=tmp_path, env=env)
    assert r.returncode == 2
    assert b"zotsink[parquet]" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["d", "stub"]


def test_pandas_and_duckdb_read_parquet_and_jsonl_with_the_right_types(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    duckdb = pytest.importorskip("duckdb")
    pytest.importorskip("pyarrow")
    make(tmp_path)
    assert cli("d", "-o", "out.parquet", cwd=tmp_path).returncode == 0
    assert cli("d", "-o", "out.jsonl", cwd=tmp_path).returncode == 0

    df = pd.read_parquet(tmp_path / "out.parquet")
    assert list(df.columns) == ["source", "task", "loss", "label", "note", "extra"]
    assert str(df["task"].dtype) == "int64" and str(df["loss"].dtype) == "float64"
    assert df["label"].tolist() == ["007", "010", "x"]
    assert df["note"].isna().tolist() == [False, True, False]
    assert df["extra"].isna().tolist() == [True, True, False] and df["extra"].iloc[2] == 9

    dj = pd.read_json(tmp_path / "out.jsonl", lines=True, dtype=False)
    assert str(dj["task"].dtype) == "int64" and str(dj["loss"].dtype) == "float64"
    assert dj["label"].tolist() == ["007", "010", "x"]  # a label stays a label

    con = duckdb.connect()
    for name in ("out.parquet", "out.jsonl"):
        reader = "read_parquet" if name.endswith("parquet") else "read_json_auto"
        rel = con.sql(f"SELECT * FROM {reader}('{tmp_path / name}')")
        types = dict(zip(rel.columns, map(str, rel.types)))
        assert types == {
            "source": "VARCHAR",
            "task": "BIGINT",
            "loss": "DOUBLE",
            "label": "VARCHAR",
            "note": "VARCHAR",
            "extra": "BIGINT",
        }, name
        assert rel.fetchall() == [tuple(r.values()) for r in EXPECTED], name


# -- cat OUT -o FILE: the same writer, from a snapshot of OUT -----------------------------
def test_export_of_an_out_gives_the_same_typed_rows(tmp_path: Path) -> None:
    from zotsink import UsageError, export

    make(tmp_path)
    assert cli("d", "-o", "out.tsv", cwd=tmp_path).returncode == 0
    assert cli("d", "-o", "direct.jsonl", cwd=tmp_path).returncode == 0
    assert export(tmp_path / "out.tsv", tmp_path / "copy.jsonl") == 3
    assert (tmp_path / "copy.jsonl").read_bytes() == (tmp_path / "direct.jsonl").read_bytes()
    with pytest.raises(UsageError, match="exists already"):
        export(tmp_path / "out.tsv", tmp_path / "copy.jsonl")
    (tmp_path / "copy.jsonl").write_bytes(b"old\n")
    assert export(tmp_path / "out.tsv", tmp_path / "copy.jsonl", force=True) == 3
    assert (tmp_path / "copy.jsonl").read_bytes() == (tmp_path / "direct.jsonl").read_bytes()
    with pytest.raises(UsageError, match=r"cat -o writes \.jsonl or \.parquet"):
        export(tmp_path / "out.tsv", tmp_path / "copy.csv")
    with pytest.raises(UsageError, match=r"does not write \.json files"):
        export(tmp_path / "out.tsv", tmp_path / "copy.json")
