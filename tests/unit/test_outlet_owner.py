"""The record corridor has one owner (ARCHITECTURE.md): these checks fail when a second copy
of it appears. They read the package's source; nothing is run."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import zotsink

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
