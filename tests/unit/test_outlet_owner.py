"""The record corridor has one owner (ARCHITECTURE.md): these checks fail when a second copy
of it appears. They read the package's source, and watch who calls the writer while every
door appends."""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import zotsink
from zotsink._core.blocks import HOLD_IN_MEMORY
from zotsink._core.records import MAX_LINE
from zotsink._core.writer import Writer

PACKAGE = Path(zotsink.__file__).parent


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        yield name, ast.parse(path.read_text(), name)


def calls(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def called_name(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def test_only_the_outlet_appends_records_to_a_writer() -> None:
    # Writer.append(data, timeout=...) is the locked write; everything that appends records
    # goes through the outlet, which spills or rejects what cannot be appended. recover is
    # the one exception: its input is a spill file, which stays where it is on failure.
    allowed = {"_core/outlet.py", "_recover.py"}
    found = sorted(
        name
        for name, tree in modules()
        for c in calls(tree)
        if called_name(c) == "append" and any(k.arg == "timeout" for k in c.keywords)
        if name not in allowed
    )
    assert found == []


def test_only_the_outlet_appends_a_block_in_pieces() -> None:
    # Writer.append_chunks: any use of it (a call, an alias, a partial) outside the outlet is
    # a second corridor, with no stop-aware wait and no spill (as a long line's once was)
    found = sorted(
        f"{name}:{node.lineno}"
        for name, tree in modules()
        if name != "_core/outlet.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "append_chunks"
    )
    assert found == []


def test_every_door_reaches_the_writer_through_the_outlet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Who calls Writer.append and Writer.append_chunks, watched while each door appends:
    the stream (with a refused line and one over the limit), append_record(s), Sink,
    collect, and run (a task's output over what is held in memory, the log, the ledger)."""
    callers: set[tuple[str, str]] = set()
    for method in ("append", "append_chunks"):

        def spy(self: Writer, *args: Any, _method: str = method, **kw: Any) -> int:
            caller = Path(sys._getframe(1).f_code.co_filename)
            where = caller.relative_to(PACKAGE) if caller.is_relative_to(PACKAGE) else caller
            callers.add((_method, where.as_posix()))
            return _originals[_method](self, *args, **kw)

        monkeypatch.setattr(Writer, method, spy)

    # from a pipe: a line over the limit is then kept aside in a temporary file (LongLine)
    producer = (
        "import sys; sys.stdout.buffer.write(b'a\\n' + b'x' * int(sys.argv[1]) + b'\\nb\\0c\\n')"
    )
    with subprocess.Popen(
        [sys.executable, "-c", producer, str(MAX_LINE + 1)], stdout=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        zotsink.append_stream(tmp_path / "s.txt", proc.stdout.fileno())
    assert (tmp_path / "s.txt").read_bytes() == b"a\n"
    assert (tmp_path / "s.txt.rejects").stat().st_size > MAX_LINE
    zotsink.append_record(tmp_path / "r.txt", "r")
    zotsink.append_records(tmp_path / "r.txt", ["s", "t"])
    with zotsink.Sink(tmp_path / "r.txt") as sink:
        sink.write("u")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("k: 1\n")
    zotsink.collect([tmp_path / "src"], tmp_path / "c.tsv")
    lines = HOLD_IN_MEMORY // 100 + 1
    big = f'{shlex.quote(sys.executable)} -c \'print("y" * 99 * {lines}, end="")\' | fold -w 99'
    (tmp_path / "tasks.txt").write_text(f"echo x\n{big}\n")
    zotsink.run_tasks(tmp_path / "tasks.txt", tmp_path / "o.txt", shell=True, index=None, env={})
    assert (tmp_path / "o.txt").stat().st_size == 2 + 100 * lines
    assert callers == {("append", "_core/outlet.py"), ("append_chunks", "_core/outlet.py")}


_originals = {"append": Writer.append, "append_chunks": Writer.append_chunks}


def test_one_batch_buffer_and_one_wait_for_the_stop_signal() -> None:
    batches = sorted(
        {name for name, tree in modules() for c in calls(tree) if called_name(c) == "Batch"}
    )
    assert batches == ["_core/outlet.py", "_run/commit.py"]  # records; group commit
    handlers = sorted(
        {
            name
            for name, tree in modules()
            for c in calls(tree)
            if called_name(c) in ("signal", "set_wakeup_fd")
            and isinstance(c.func, ast.Attribute)
            and isinstance(c.func.value, ast.Name)
            and c.func.value.id == "signal"
        }
    )
    assert handlers == ["_core/stop.py"]


def test_one_reporter_tells_where_records_went() -> None:
    # the words a person reads about refused and spilled records live in one function
    places = sorted(
        name
        for name, tree in modules()
        if name.startswith("cli/")
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "are safe in" in node.value
    )
    assert places == ["cli/_common.py"]
