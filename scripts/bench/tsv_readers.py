#!/usr/bin/env python3
"""What pandas, polars, DuckDB, Miller and csvkit read BY DEFAULT from a TSV of hostile values.

    python scripts/bench/tsv_readers.py

Needs pandas, polars, duckdb, csvkit in this Python (``pip install pandas polars duckdb
csvkit``) and ``mlr`` on PATH; a missing reader is shown as such. Two conventions are written
for the same row of values: zotsink's (escapes ``\\\\ \\t \\n \\r``, the PostgreSQL text and
Miller 6 TSV convention, one record per line) and CSV quoting with a tab delimiter (what
Python's ``csv`` writes with ``delimiter="\\t"``; a newline in a value spans two lines). Each
cell shows ``ok`` when the reader gave back the exact string, else what it gave.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

VALUES = {
    "tab": "a\tb",
    "newline": "a\nb",
    "cr": "a\rb",
    "backslash": "a\\b",
    "lead_quote": '"abc',
    "quotes": 'x "q" y',
    "empty": "",
    "unicode": "zoë ✓ 日本",
    "na_word": "NA",
}
COLS = list(VALUES)


def write_zotsink(path: Path) -> None:
    from zotsink import append_records

    append_records(path, [list(VALUES.values())], columns=COLS, format="tsv")


def write_csv_tab(path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerows([COLS, list(VALUES.values())])


def pandas_read(path: Path) -> dict[str, object]:
    import pandas as pd

    df = pd.read_csv(path, sep="\t")
    return {c: df[c][0] if c in df else "<no column>" for c in COLS}


def polars_read(path: Path) -> dict[str, object]:
    import polars as pl

    return pl.read_csv(path, separator="\t").row(0, named=True)


def duckdb_read(path: Path) -> dict[str, object]:
    import duckdb

    cur = duckdb.connect().execute("SELECT * FROM read_csv(?)", [str(path)])
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def mlr_read(path: Path) -> dict[str, object]:
    out = subprocess.run(
        ["mlr", "--itsv", "--ojson", "cat", str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)[0]


def csvkit_read(path: Path) -> dict[str, object]:
    tool = shutil.which("csvjson") or str(Path(sys.executable).parent / "csvjson")
    out = subprocess.run([tool, "-t", str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]


READERS: dict[str, Callable[[Path], dict[str, object]]] = {
    "pandas read_csv(sep='\\t')": pandas_read,
    "polars read_csv(separator='\\t')": polars_read,
    "duckdb read_csv()": duckdb_read,
    "mlr --itsv": mlr_read,
    "csvkit csvjson -t": csvkit_read,
}


def cell(got: object, want: str) -> str:
    if got == want:
        return "ok"
    return repr(got)[:14]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = {"zotsink (escapes)": Path(tmp) / "z.tsv", "csv quoting, tab": Path(tmp) / "c.tsv"}
        write_zotsink(files["zotsink (escapes)"])
        write_csv_tab(files["csv quoting, tab"])
        print("| convention | reader | " + " | ".join(COLS) + " | exact |")
        print("|---" * (len(COLS) + 3) + "|")
        for conv, path in files.items():
            for name, read in READERS.items():
                try:
                    row = read(path)
                except Exception as e:  # a reader that refuses the file is a result too
                    msg = f"error: {type(e).__name__}"
                    print(f"| {conv} | {name} | {msg} |" + " |" * len(COLS))
                    continue
                cells = [cell(row.get(c, "<no column>"), VALUES[c]) for c in COLS]
                exact = sum(c == "ok" for c in cells)
                print(f"| {conv} | {name} | " + " | ".join(cells) + f" | {exact}/{len(COLS)} |")
    print(f"\n(python {sys.version.split()[0]}, {os.uname().sysname})")


if __name__ == "__main__":
    main()
