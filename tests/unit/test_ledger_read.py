"""Reading a ledger: one cutter of its bytes into rows, one torn-row rule for every reader,
the last row's state read from the end, a newer format refused by name."""

from __future__ import annotations

import ast
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import zotsink
from tests.ledgers import Book
from zotsink._core.records import MAX_LINE
from zotsink._ledger.format import INITIAL, State, header_line, make_row
from zotsink._ledger.read import Snapshot, last_rows, restamp, row_blocks, rows_in, tail_state
from zotsink._ledger.view import LedgerView
from zotsink.errors import InputError

PACKAGE = Path(zotsink.__file__).parent
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


def test_no_module_of_the_ledger_cuts_lines_of_its_own() -> None:
    """The ledger's bytes are cut by row_blocks (forward) and fileio.lines_backwards (its
    last rows): a module of the ledger, or one that writes it, with a cut of its own fails."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel == "zotsink/_ledger/read.py":
            continue  # the cutter itself
        if rel.startswith("zotsink/_ledger/") or rel in (
            "zotsink/_run/ledger.py",
            "zotsink/_run/look.py",
            "zotsink/_run/migrate.py",
        ):
            tree = ast.parse(path.read_text(encoding="utf-8"), rel)
            found += [f"{rel}:{no}" for no in _newline_cuts(tree)]
    assert found == [], "cut the ledger's bytes with zotsink._ledger.read.row_blocks"


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "out.tsv.ledger"
    book = Book(path)
    for n in range(1, 40):
        book.claim(n, 1, f"t{n}").begin(n).end(n, status="failed" if n % 3 else "ok", code="1")
    book.claim(40, 1, "t40").write()
    with open(path, "ab") as f:
        f.write(b"end\t2026\t7\tt7\n")  # a torn row, and a fresh line after it
        # a crash's zeros, longer than any row (and than a block of reading)
        f.write(b"\0" * (MAX_LINE + (1 << 23)) + b"\n")
    Book(path).claim(41, 1, "t41").write()
    return path


def test_every_read_of_the_ledger_is_inside_the_cutters(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inode = os.stat(ledger).st_ino
    outside: list[str] = []
    reads = 0
    real = os.pread
    from zotsink._core import fileio

    cutters = (row_blocks.__code__, fileio.lines_backwards.__code__)

    def pread(fd: int, n: int, offset: int) -> bytes:
        nonlocal reads
        if os.fstat(fd).st_ino == inode:
            frame = sys._getframe(1)
            names = []
            while frame is not None:
                names.append((frame.f_code, frame.f_code.co_filename))
                frame = frame.f_back
            if any(code in cutters for code, _ in names):
                reads += 1
            # the write path's own look at the header and at a torn tail; the header's
            # first line, read by itself
            elif not any(
                f.endswith(("_core/writer.py", "_core/header.py")) or c.co_name == "first_line"
                for c, f in names
            ):
                outside.append(" <- ".join(c.co_name for c, _ in names[:4]))
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the torn rows are warned of
        view = LedgerView({n: f"t{n}" for n in range(1, 42)})
        with Snapshot(ledger) as snap:
            view.feed(snap.rows())
        assert view.state(41) == "claimed" and view.state(3) == "ok"
        fd = os.open(ledger, os.O_RDONLY)
        try:
            state = tail_state(str(ledger), fd, os.fstat(fd).st_size, settle=True, coherent=True)
        finally:
            os.close(fd)
        assert state.xgen > 0
    assert outside == []
    assert reads > 0


def test_the_torn_row_rule_is_one_for_every_reader(ledger: Path) -> None:
    """The torn row and the run of zeros are passed by alike, whatever the chunks."""
    with pytest.warns(zotsink.ZotsinkWarning, match="passed by 2 torn row"), Snapshot(ledger) as s:
        rows = list(s.rows())
    assert len(rows) == 2 + 41 + 39 + 39  # two runs, 41 claims, 39 begins and ends
    data = ledger.read_bytes()
    for size in (100, 4096, 1 << 20):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        torn: list[int] = []
        cut = [r for _at, b in row_blocks(chunks, torn=torn) for r in rows_in(b)]
        assert len(torn) == 1  # the zeros, never held whole; the short row is cut, and torn
        assert sum(1 for r in cut if r.startswith(b"end\t2026")) == 1


def test_the_last_row_s_state_is_read_past_a_torn_tail_and_zeros(tmp_path: Path) -> None:
    path = tmp_path / "l"
    state = State(17, 300, 40, 0xABC, 2, 1)
    body = header_line() + make_row("stop", 1.0, "-", [""], state)
    for tail in (b"", b"claim\t17", b"\0" * 300_000, b"\0" * (MAX_LINE + 10) + b"\nend\t1"):
        path.write_bytes(body + tail)
        fd = os.open(path, os.O_RDONLY)
        try:
            got = tail_state(str(path), fd, os.fstat(fd).st_size, settle=False, coherent=False)
        finally:
            os.close(fd)
        assert got == state, tail[:20]
    path.write_bytes(header_line())
    fd = os.open(path, os.O_RDONLY)
    try:
        assert tail_state(str(path), fd, len(header_line()), settle=False, coherent=False) == (
            INITIAL
        )
    finally:
        os.close(fd)


def test_a_ledger_of_a_newer_format_is_refused_naming_the_format_and_the_release(
    tmp_path: Path,
) -> None:
    path = tmp_path / "l"
    path.write_bytes(b"zotsink-ledger\t3\tzotsink>=0.3\nanything\n")
    with pytest.raises(InputError) as e:
        Snapshot(path)
    assert "a ledger of format 3" in str(e.value)
    assert "zotsink>=0.3 reads it" in str(e.value)
    assert "this zotsink (0.2.0) reads formats 1 to 2" in str(e.value)


def test_a_file_that_is_no_ledger_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l"
    path.write_text("name\tvalue\n")
    with pytest.raises(InputError, match="is not a zotsink ledger"):
        Snapshot(path)


def test_spilled_rows_are_stamped_anew_under_the_lock(tmp_path: Path) -> None:
    """Rows saved to a spill file carry no state (written without the lock): recover stamps
    each with the state after the ledger's last row."""
    path = tmp_path / "l"
    state = State(9, 90, 10, 0x5, 4, 2)
    path.write_bytes(header_line() + make_row("stop", 1.0, "-", [""], state))
    spilled = make_row("end", 2.0, "r", [":0", "", "3::5:::", ""], INITIAL) + make_row(
        "release", 3.0, "r", ["4"], INITIAL
    )
    fd = os.open(path, os.O_RDONLY)
    try:
        out = restamp(str(path), fd, os.fstat(fd).st_size, spilled, coherent=False)
    finally:
        os.close(fd)
    from zotsink._ledger.format import parse_row

    rows = [parse_row(line) for line in out.splitlines()]
    assert [r.kind for r in rows] == ["end", "release"]  # type: ignore[union-attr]
    assert rows[0].state == state  # type: ignore[union-attr]
    assert rows[1].state == state._replace(xgen=5)  # type: ignore[union-attr]


def test_a_client_that_reads_short_of_the_server_s_size_reads_again_before_it_trusts_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GlusterFS client may know the server's size under the lock and still read only up
    to the size it cached: the last row it reads is an older one, and a claim from its
    state would take again what the rows after it claimed. Such a read is not trusted at
    once: the client is made to ask the server again, and reads again, until its budget
    is spent; only then does the last row it can read count."""
    from zotsink._ledger import read

    path = tmp_path / "out.tsv.ledger"
    book = Book(path)
    book.claim(1, 1, "t1").write()
    seen = os.path.getsize(path)
    book.claim(2, 1, "t2").write()
    full = os.path.getsize(path)
    asked: list[int] = []
    real = read.fresh_stat
    monkeypatch.setattr(read, "fresh_stat", lambda fd, c: asked.append(fd) or real(fd, c))
    monkeypatch.setattr(read, "HEADER_SETTLE", read.HEADER_SETTLE.replace(budget=0.05))
    fd = os.open(path, os.O_RDONLY)
    try:
        right = tail_state(str(path), fd, full, settle=True, coherent=True)
        older = tail_state(str(path), fd, seen, settle=True, coherent=True)
        assert (older.xgen, right.xgen) == (1, 2)  # two claims by number
        assert asked == []  # a whole read is trusted at once
        # the server says `full + 100`: the rows past `full` cannot be read by this client
        assert tail_state(str(path), fd, full + 100, settle=True, coherent=True) == right
        assert len(asked) >= 2  # it asked the server again, and read again, first
        assert last_rows(fd, full + 100, 1 << 16) == []
    finally:
        os.close(fd)
