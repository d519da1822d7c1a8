"""Mechanisms zotsink has exactly one of: each test fails when a second copy appears.

The source is read as text and parsed with ``ast``; nothing is imported for the scans.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

import zotsink
from zotsink._core.records import escape_tsv, unescape_tsv
from zotsink._pack.index import Row, format_rows, parse_row

PACKAGE = Path(zotsink.__file__).parent


def _modules(*folders: str) -> Iterator[tuple[str, ast.Module]]:
    """(path relative to the package's parent, parsed module) of every module under
    ``folders`` of the package (all of it when none is given)."""
    roots = [PACKAGE / f for f in folders] if folders else [PACKAGE]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(PACKAGE.parent).as_posix()
            yield rel, ast.parse(path.read_text(encoding="utf-8"), rel)


# -- one TSV escape: _core/records.py ------------------------------------------------------

#: Escapes of other formats than zotsink's TSV, where they are read: (module, function).
OTHER_FORMATS = {
    # /proc/self/mountinfo's octal escapes (proc(5)), not a TSV field
    ("zotsink/_core/fsinfo.py", "_unescape"),
}


def test_tsv_escaping_is_defined_only_in_records() -> None:
    """No function named like ``*escape*`` and no module-level table (``_ESCAPES``) outside
    records: a second copy is how the pack index came to read ``a\\xb`` otherwise."""
    found = []
    for rel, tree in _modules():
        if rel == "zotsink/_core/records.py":
            continue
        names = [
            (n.lineno, n.name)
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        for n in tree.body:
            targets = n.targets if isinstance(n, ast.Assign) else []
            targets += [n.target] if isinstance(n, ast.AnnAssign) else []
            names += [(n.lineno, t.id) for t in targets if isinstance(t, ast.Name)]
        found += [
            f"{rel}:{no}: {name}"
            for no, name in names
            if "escape" in name.lower() and (rel, name) not in OTHER_FORMATS
        ]
    assert found == [], "TSV escaping lives in zotsink/_core/records.py only"


_FIELDS = st.text(alphabet="ab\\tnrx\xe9", max_size=12)


@given(_FIELDS)
@example("a\\xb")  # an escape records does not know: it keeps its character
@example("a\\")  # a backslash at the end of a field
@example("\\\\t")
def test_the_pack_index_unescapes_a_field_as_records_do(field: str) -> None:
    line = f"0\t512\t{field}\tsha\t\t\t\t".encode("utf-8", "surrogateescape")
    assert parse_row(line).name == unescape_tsv(field)


@given(st.text(alphabet="ab\\\t\n\r\xe9 ", max_size=12))
@example("dir\\name\twith tab")
def test_the_pack_index_escapes_a_name_as_records_do(name: str) -> None:
    row = Row(0, 512, name, "sha", "t", "h", "j", "1")
    data = format_rows([row])
    assert data.split(b"\t")[2] == escape_tsv(name).encode("utf-8", "surrogateescape")
    assert parse_row(data[:-1]) == row


# -- one line splitter: _core/fileio.py (line_blocks) --------------------------------------

#: Modules that still cut lines with their own split; each is to move to fileio's splitter.
#: The list may only shrink.
CUT_THEIR_OWN = {
    "zotsink/_core/blocks.py",  # BlockEncoder's line-by-line path
}


def _newline_cuts(tree: ast.Module) -> Iterator[int]:
    """Lines of ``tree`` that split bytes at b"\\n" (split, rsplit, partition, rpartition)."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("split", "rsplit", "partition", "rpartition")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == b"\n"
        ):
            yield node.lineno


def test_lines_are_cut_only_by_fileio() -> None:
    cuts = {
        rel: list(_newline_cuts(tree))
        for rel, tree in _modules()
        if rel != "zotsink/_core/fileio.py"
    }
    found = [f"{rel}:{no}" for rel, nos in cuts.items() if rel not in CUT_THEIR_OWN for no in nos]
    assert found == [], "cut lines with zotsink._core.fileio.line_blocks (or a helper on it)"
    stale = sorted(rel for rel in CUT_THEIR_OWN if not cuts.get(rel))
    assert stale == [], "these no longer cut lines themselves: take them off CUT_THEIR_OWN"


def test_the_splitter_keeps_every_byte_whatever_the_chunks() -> None:
    from zotsink._core.fileio import line_blocks, lines_with_ends

    data = b"a\n\nbb\r\n" + b"x" * 50 + b"\nlast"
    for size in (1, 2, 3, 7, 64, 1 << 20):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert b"".join(lines_with_ends(iter(chunks))) == data
        blocks = list(line_blocks(iter(chunks)))
        assert [ln for part, ok in blocks if ok for ln in part] == [b"a", b"", b"bb\r", b"x" * 50]
        assert blocks[-1] == ([b"last"], False)


# -- one wait loop: _core/backoff.py -------------------------------------------------------


def _sleeps(tree: ast.Module) -> Iterator[int]:
    """Lines of ``tree`` that reach a sleep: ``x.sleep`` or ``from time import sleep``."""
    for node in ast.walk(tree):
        attribute = isinstance(node, ast.Attribute) and node.attr == "sleep"
        imported = isinstance(node, ast.ImportFrom) and node.module == "time"
        if attribute or (imported and any(a.name == "sleep" for a in node.names)):
            yield node.lineno


def test_only_backoff_sleeps_in_the_write_path() -> None:
    found = [
        f"{rel}:{no}"
        for rel, tree in _modules("_core", "_pack")
        if rel != "zotsink/_core/backoff.py"
        for no in _sleeps(tree)
    ]
    assert found == [], "wait with a policy of zotsink._core.backoff (tries, pause, retry_until)"


# -- one stop-aware lock wait: _core/backoff.py (wait_for_lock) ---------------------------

#: Calls that take a lock or wait for one: a loop around any of them is a lock wait.
LOCK_CALLS = frozenset(
    {"flock", "lockf", "try_acquire", "try_now", "acquire", "open_locked", "wait_for_lock"}
)
#: Loops around a lock call that are not a second wait: (module, function) and why.
LOCK_LOOPS = {
    ("zotsink/_core/backoff.py", "wait_for_lock"),  # the owner: the stop-aware wait
    # the lock kinds in turn (auto's fallback); each waits in backoff.retry_until
    ("zotsink/_core/locking.py", "Locker.acquire"),
    # the ONE open -> lock -> same-inode loop: a replaced file is opened again
    ("zotsink/_core/locking.py", "open_locked"),
    # a new spill file whose lock is busy is left for the next name, never waited for again
    ("zotsink/_core/sidefiles.py", "spill"),
}


def _catches_lock_errors(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        (isinstance(k, ast.Name) and k.id in ("LockTimeout", "LockError"))
        or (isinstance(k, ast.Attribute) and k.attr in ("LockTimeout", "LockError"))
        for k in kinds
    )


def _lock_loops(tree: ast.AST, where: str = "") -> Iterator[tuple[str, int]]:
    """(function, line) of each ``while``/``for`` loop that calls a lock (LOCK_CALLS) or
    goes round again after a lock error (an ``except LockTimeout`` inside it)."""
    for node in ast.iter_child_nodes(tree):
        inside = where
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inside = f"{where}.{node.name}" if where else node.name
        if isinstance(node, (ast.While, ast.For, ast.AsyncFor)):
            body = list(ast.walk(node))
            calls = {
                n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                for n in body
                if isinstance(n, ast.Call)
            }
            if calls & LOCK_CALLS or any(
                isinstance(n, ast.ExceptHandler) and _catches_lock_errors(n) for n in body
            ):
                yield inside, node.lineno
        yield from _lock_loops(node, inside)


def test_the_scan_sees_a_lock_wait_loop() -> None:
    # the two shapes the stop-aware wait had before it had one owner
    sliced = """
def attempt(self, append):
    while True:
        try:
            append(1.0)
            return
        except LockTimeout:
            now = time.monotonic()
"""
    polled = """
def snapshot(p, locker, timeout):
    while True:
        step = min(deadline - time.monotonic(), 1.0)
        fd = open_locked(p, opener, locker, step, shared=True)
"""
    assert list(_lock_loops(ast.parse(sliced))) == [("attempt", 3)]
    assert list(_lock_loops(ast.parse(polled))) == [("snapshot", 3)]
    assert list(_lock_loops(ast.parse("for p in paths:\n    n += read(p)\n"))) == []


def test_one_loop_waits_for_a_lock() -> None:
    found = {(rel, function): no for rel, tree in _modules() for function, no in _lock_loops(tree)}
    second = [
        f"{rel}:{no} ({fn})" for (rel, fn), no in found.items() if (rel, fn) not in LOCK_LOOPS
    ]
    assert second == [], "wait for a lock with zotsink._core.backoff.wait_for_lock"
    stale = sorted(key for key in LOCK_LOOPS if key not in found)
    assert stale == [], "these no longer loop around a lock: take them off LOCK_LOOPS"


# -- one pipe line cutter: _core/pump.py (LineReader, LineCutter) ---------------------------

#: Where run and the stream read pipes, and the one module that looks for newlines in what
#: they read.
PIPE_READERS = ("zotsink/_run", "zotsink/_stream.py")
PIPE_CUTTER = "zotsink/_core/pump.py"
#: Modules there that look for newlines in bytes that are no pipe's: the ledger's file.
NOT_PIPES = {"zotsink/_run/ledger.py"}
_SEARCHES = ("find", "rfind", "index", "rindex", "split", "rsplit", "partition", "rpartition")


def _newline_searches(tree: ast.Module) -> Iterator[int]:
    """Lines of ``tree`` that search bytes for a newline: ``x.find(b"\n")`` and the like,
    ``x.splitlines()`` on bytes read, and ``bytes.find(x, b"\n")``."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in _SEARCHES:
            continue
        if any(
            isinstance(arg, ast.Constant) and isinstance(arg.value, bytes) and b"\n" in arg.value
            for arg in node.args
        ):
            yield node.lineno


def test_pipes_are_cut_into_lines_only_by_pump() -> None:
    """A task's stdout and stderr, a function worker's prints and the stream's input are
    cut by pump's cutters, with their one over-limit policy: a second cutter (a ``find`` or
    ``rfind`` of a newline over bytes read from a pipe) fails this."""
    readers = [
        (rel, tree)
        for rel, tree in _modules()
        if rel.startswith(PIPE_READERS) and rel not in NOT_PIPES
    ]
    assert len(readers) > 5
    found = [f"{rel}:{no}" for rel, tree in readers for no in _newline_searches(tree)]
    assert found == [], f"cut pipe bytes with {PIPE_CUTTER} (LineCutter or LineReader)"
    cutter = ast.parse((PACKAGE.parent / PIPE_CUTTER).read_text(encoding="utf-8"))
    assert list(_newline_searches(cutter)), "the pin no longer sees how pump cuts lines"
