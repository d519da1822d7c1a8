"""The ledger's bytes are cut into rows in one place, by one torn-row rule.

``zotsink._ledgerfile.row_blocks`` is the cutter: every reader of the ledger (a snapshot's
pass, the search for some tasks' rows, a row read again by its offset, the claim's look at
the news, the claim's look back for a task it did not know) reads the ledger's bytes
inside it. A second cutter, reading the ledger with its own ``pread`` and ``find``, fails
these tests.
"""

from __future__ import annotations

import ast
import os
import sys
import warnings
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest
from zotsink._ledgerfile import LedgerScan, claims, read_ledger, row_blocks
from zotsink._run.states import LedgerTally, read_begin

import zotsink
from zotsink import _ledgerfile
from zotsink._core.records import MAX_LINE
from zotsink._run.ledger import Ledger
from zotsink._run.tasks import Task

PACKAGE = Path(zotsink.__file__).parent
#: Modules that import the ledger's format but cut other files: (module, what they cut).
CUT_OTHER_FILES = {
    "zotsink/_recover.py": "a spill file's first line (the ledger's header is a known one)",
    "zotsink/_run/pool.py": "the tasks' pipes (stdout, a worker's prints)",
}
_CUTS = ("find", "rfind", "index", "rindex", "split", "rsplit", "partition", "rpartition")


def _newline_cuts(tree: ast.Module) -> Iterator[int]:
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr == "splitlines" or (
            node.func.attr in _CUTS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == b"\n"
        ):
            yield node.lineno


def _imports_ledger(tree: ast.Module) -> bool:
    names = ("_ledgerfile", "_run.ledger", "_run.states", "ledger", "states")
    return any(
        isinstance(n, ast.ImportFrom) and (n.module or "").endswith(names) for n in ast.walk(tree)
    )


def test_no_module_that_reads_the_ledger_cuts_lines_of_its_own() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel == "zotsink/_ledgerfile.py" or rel in CUT_OTHER_FILES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), rel)
        if rel.startswith(("zotsink/_run/ledger", "zotsink/_run/states")) or _imports_ledger(tree):
            found += [f"{rel}:{no}" for no in _newline_cuts(tree)]
    assert found == [], "cut the ledger's bytes with zotsink._ledgerfile.row_blocks"


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "out.tsv.ledger"
    book = Ledger(path, env={})
    rows = []
    for n in range(1, 40):
        rows += [book.start_row(n, f"t{n}", 1)]
        rows += [book.end_row(n, f"t{n}", 1, status="failed" if n % 3 else "ok", bytes=0)]
    rows += [book.start_row(40, "t40", 1)]
    book.append(rows)
    book.close()
    with open(path, "ab") as f:
        f.write(b"end\t2026\t7\tt7\n")  # a torn row, and a fresh line after it
        # a crash's zeros, longer than any row (and than a block of reading)
        f.write(b"\0" * (MAX_LINE + (1 << 23)) + b"\n")
    book = Ledger(path, env={})
    book.append([book.start_row(41, "t41", 1)])
    book.close()
    return path


def test_every_read_of_the_ledger_is_inside_the_one_cutter(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inode = os.stat(ledger).st_ino
    outside: list[str] = []
    reads = 0
    real = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        nonlocal reads
        if os.fstat(fd).st_ino == inode:
            frame = sys._getframe(1)
            names = []
            while frame is not None:
                names.append((frame.f_code, frame.f_code.co_filename))
                frame = frame.f_back
            if any(code is row_blocks.__code__ for code, _ in names):
                reads += 1
            # the write path's own look at the header and at a torn tail (any side file)
            elif not any(f.endswith(("_core/writer.py", "_core/header.py")) for _, f in names):
                outside.append(" <- ".join(c.co_name for c, _ in names[:4]))
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    keys = {n: f"t{n}" for n in range(1, 42)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the torn rows are warned of
        assert len(list(read_ledger(ledger))) == 80
        assert [r.tasknum for r in read_ledger(ledger, tasknums={7, 41})] == [7, 7, 41]
        tally = LedgerTally(ledger, keys)
        assert tally[41].last is not None and tally[41].state == "running"
        assert claims(ledger) is not None
        states, seen, _ = read_begin(ledger, {1: "t1"})
        book = Ledger(ledger, env={})
        book.begin({1: "t1"}, states, seen, rerun=False)
        other = Ledger(ledger, env={})
        other.append([other.end_row(41, "t41", 1, status="ok")])
        other.close()
        picked, dropped = book.claim(deque([Task(1, "t1"), Task(41, "t41")]), 2, [])
        book.close()
    assert ([t.num for t, _ in picked], [t.num for t in dropped]) == ([1], [41])
    assert outside == []
    assert reads > 0


def test_the_torn_row_rule_is_one_for_every_reader(ledger: Path) -> None:
    """The torn row and the run of zeros are left out by each reader alike, and counted."""
    scan = LedgerScan(ledger)
    with pytest.warns(zotsink.ZotsinkWarning, match="left out 2 torn row"):
        rows = [line for _n, _at, line in scan.lines()]
    scan.close()
    assert len(rows) == 80
    data = ledger.read_bytes()
    for size in (100, 4096, 1 << 20):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        torn: list[int] = []
        cut = [r for _n, _at, b in row_blocks(chunks, torn=torn) for r in _ledgerfile.rows_in(b)]
        width = len(_ledgerfile.LEDGER_COLUMNS) + len(_ledgerfile.LATER_COLUMNS) - 1
        assert [r for r in cut[1:] if r.count(b"\t") == width] == rows
        assert torn == [82]  # the zeros; the short row is whole, and torn by its fields
