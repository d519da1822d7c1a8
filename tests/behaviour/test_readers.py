"""The README's read recipes, run as written on a TSV of hostile values.

Each recipe is the code block after a ``<!-- recipe: NAME -->`` line in README.md; the test
runs that exact text against an ``out.tsv`` that zotsink wrote, and compares every cell with
the value that went in. pandas, DuckDB, polars and csvkit are test extras; Miller (``mlr``)
is a Debian package that scripts/test installs as root. The README says every recipe is run:
in CI (``CI`` set, as CI services do) a recipe whose reader is missing fails, elsewhere it
skips with the reason.
"""

from __future__ import annotations

import csv
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

from zotsink import append_records

ROOT = Path(__file__).resolve().parents[2]

#: What readers get wrong by default: zotsink's escapes, quote characters, words that
#: readers take for missing values, an empty string, a literal backslash before n or N.
HOSTILE = [
    "a\tb", "a\nb", "a\rb", "a\\b", "a\\nb", "\\", "\\N", '"abc', 'x "q" y', "'s'",
    "", " x ", "NA", "null", "NaN", "007", "1e3", "-", "zoë ✓ 日本", "\x01",
]  # fmt: skip
COLUMNS = [f"c{i}" for i in range(len(HOSTILE))]
ROWS = [HOSTILE, HOSTILE[::-1]]


IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")


def unavailable(reason: str) -> NoReturn:
    """A reader is missing: a skip on a workstation, a failure in CI (no recipe goes unrun)."""
    if IN_CI:
        pytest.fail(
            f"{reason}, so a README recipe would go unrun: in CI every one must run "
            "(pip install -e '.[test]' brings the Python readers; scripts/test, as root, "
            "installs Miller)",
            pytrace=False,
        )
    pytest.skip(reason)


def reader(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        why = f"could not import {module!r} ({e})"
    unavailable(why)  # outside the handler: the CI failure reads without a chained traceback


def recipes() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = dict(re.findall(r"<!-- recipe: (\w+) -->\n```\w+\n(.*?)```", text, re.S))
    want = {"parquet", "parquet_read", "pandas", "duckdb", "polars", "miller", "csvkit"}
    assert want <= set(found), found.keys()
    return found


@pytest.fixture
def out_tsv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the recipes name "out.tsv"
    append_records(tmp_path / "out.tsv", ROWS, columns=COLUMNS)
    return tmp_path / "out.tsv"


def test_the_file_holds_one_line_per_record(out_tsv: Path) -> None:
    # the premise of the convention: escapes keep every record on one line
    assert out_tsv.read_bytes().count(b"\n") == 1 + len(ROWS)


def test_pandas_recipe_reads_every_value_exactly(out_tsv: Path) -> None:
    reader("pandas")
    ns: dict[str, object] = {}
    exec(recipes()["pandas"], ns)
    df = ns["df"]
    assert list(df.columns) == COLUMNS  # type: ignore[attr-defined]
    assert df.values.tolist() == ROWS  # type: ignore[attr-defined]


def test_duckdb_recipe_reads_every_value_exactly(out_tsv: Path) -> None:
    duckdb = reader("duckdb")
    con = duckdb.connect()
    *setup, query = [s for s in recipes()["duckdb"].split(";\n") if s.strip()]
    for statement in setup:
        con.execute(statement)
    cur = con.execute(query)
    assert [d[0] for d in cur.description] == COLUMNS
    assert [list(r) for r in cur.fetchall()] == ROWS


def test_polars_recipe_reads_every_value_exactly(out_tsv: Path) -> None:
    reader("polars")
    ns: dict[str, object] = {}
    exec(recipes()["polars"], ns)
    df = ns["df"]
    assert df.columns == COLUMNS  # type: ignore[attr-defined]
    assert [list(r) for r in df.rows()] == ROWS  # type: ignore[attr-defined]


def run_command_recipe(name: str, tools: tuple[str, ...], cwd: Path) -> bytes:
    """Run the recipe's command line in ``cwd``; returns what it printed on stdout."""
    # csvkit's commands and zotsink itself sit beside pytest
    venv_bin = str(Path(sys.executable).parent)
    path = f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    for tool in tools:
        if shutil.which(tool, path=path) is None:
            unavailable(f"{tool} is not installed")
    command = recipes()[name].strip()
    assert "\n" not in command, command
    r = subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, env={**os.environ, "PATH": path},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def shell_recipe(name: str, tools: tuple[str, ...], out_tsv: Path) -> list[list[str]]:
    """Run the recipe's command line (csv on stdout) and parse what it printed."""
    out = run_command_recipe(name, tools, out_tsv.parent)
    return list(csv.reader(io.StringIO(out.decode("utf-8"), newline="")))


def test_miller_recipe_reads_every_value_exactly(out_tsv: Path) -> None:
    rows = shell_recipe("miller", ("mlr",), out_tsv)
    assert rows == [COLUMNS, *ROWS]


def test_csvkit_recipe_reads_every_value_exactly(out_tsv: Path) -> None:
    rows = shell_recipe("csvkit", ("mlr", "csvformat"), out_tsv)
    # csvkit reads its input with universal newlines: a CR inside a value comes out as a
    # newline (documented in the README); every other value is exact
    assert rows == [COLUMNS, *[[v.replace("\r", "\n") for v in row] for row in ROWS]]
    assert any("\r" in v for v in HOSTILE)


def parquet_readers() -> dict[str, str]:
    """The Parquet read lines of the README, by the module each one imports."""
    lines = recipes()["parquet_read"].strip().splitlines()
    return {line.split()[1].rstrip(";"): line for line in lines}


def read_parquet_recipe(module: str) -> tuple[list[list[object]], list[str]]:
    """Run the README's line for ``module``; the rows (null as None) and the column types."""
    reader(module)
    ns: dict[str, object] = {}
    exec(parquet_readers()[module], ns)
    df: Any = ns["df"]
    if module == "polars":
        return [list(r) for r in df.rows()], [str(t) for t in df.dtypes]
    # pandas, and DuckDB's .df(): a pandas DataFrame, where a null string is None or NaN
    rows = [[None if v is None or v != v else v for v in r] for r in df.values.tolist()]
    return rows, [str(t) for t in df.dtypes]


def test_parquet_readers_are_the_three() -> None:
    assert sorted(parquet_readers()) == ["duckdb", "pandas", "polars"]


@pytest.mark.parametrize("module", ["pandas", "polars", "duckdb"])
def test_parquet_recipe_reads_every_value_exactly(out_tsv: Path, module: str) -> None:
    reader("pyarrow")  # zotsink cat -o X.parquet writes with it
    run_command_recipe("parquet", ("zotsink",), out_tsv.parent)
    rows, _ = read_parquet_recipe(module)
    # every value exact; the one difference from the TSV: an empty cell is null
    assert rows == [[v if v != "" else None for v in row] for row in ROWS]


@pytest.mark.parametrize(
    ("module", "types"),
    [
        ("pandas", ["int64", "float64", "str"]),
        ("polars", ["Int64", "Float64", "String"]),
        ("duckdb", ["int64", "float64", "str"]),
    ],
)
def test_parquet_recipe_gives_typed_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, types: list[str]
) -> None:
    reader("pyarrow")
    monkeypatch.chdir(tmp_path)
    table = [[1, 2.5, "007"], [-20, 1e3, "x"]]
    append_records(tmp_path / "out.tsv", table, columns=["n", "x", "s"])
    run_command_recipe("parquet", ("zotsink",), tmp_path)
    rows, got = read_parquet_recipe(module)
    assert rows == table
    # pandas 3 names its string dtype "str"; pandas 2 kept strings as "object"
    assert [t.replace("object", "str") for t in got] == types


def test_recipes_are_one_statement_each() -> None:
    """'One line' to read: a recipe is an import and one statement (SQL: macro + query)."""
    for name, code in recipes().items():
        if name == "parquet_read":  # one line per reader, each its import and one statement
            assert all(ln.count("; ") == 1 for ln in code.strip().splitlines()), code
            continue
        lines = [ln for ln in code.strip().splitlines() if not ln.startswith("import")]
        assert len(lines) == (2 if name == "duckdb" else 1), (name, lines)
