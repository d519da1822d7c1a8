"""One place of the Executor reads the engine's files (the ledger, OUT's committed view):
``zotsink/_executor/results.py``, behind ``news_since`` and ``committed_records``, the
functions the engine's new ledger is to serve natively. No other module of the Executor
imports the engine's readers; a second one fails this."""

from __future__ import annotations

import ast
from pathlib import Path

import zotsink

EXECUTOR = Path(zotsink.__file__).parent / "_executor"
OWNER = "results.py"
#: The engine's reading modules, and the public names that read the ledger or OUT's view.
READER_MODULES = ("_ledgerfile", "_read", "_run.states", "_run.status", "_run.runs")
READER_NAMES = frozenset(
    {
        "read_ledger",
        "committed_chunks",
        "snapshot",
        "iter_snapshot",
        "read_control",
        "task_states",
        "task_status",
        "failed_tasks",
        "read_runs",
        "read_attempts",
        "ledger_missing",
    }
)


def readers(source: str) -> list[str]:
    """The engine's readers a module imports (anywhere in it)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = ("." * node.level) + (node.module or "")
            bare = module.lstrip(".").removeprefix("zotsink.")
            if any(bare == m or bare.endswith("." + m) for m in READER_MODULES):
                found.append(module)
            found += [a.name for a in node.names if a.name in READER_NAMES]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.endswith(READER_MODULES)]
    return found


def test_only_results_reads_the_engines_files() -> None:
    found = {
        p.name: readers(p.read_text(encoding="utf-8"))
        for p in sorted(EXECUTOR.glob("*.py"))
        if p.name != OWNER
    }
    assert {name: r for name, r in found.items() if r} == {}, (
        f"read the ledger or OUT through zotsink/_executor/{OWNER}"
    )
    assert readers((EXECUTOR / OWNER).read_text(encoding="utf-8")), "the owner reads nothing?"


def test_the_scan_sees_the_readers() -> None:
    source = (
        "from .._ledgerfile import LedgerScan\n"
        "from .._read import piece_chunks\n"
        "def f():\n"
        "    from .. import read_ledger, add_tasks\n"
        "    import zotsink._run.states\n"
    )
    assert readers(source) == [".._ledgerfile", ".._read", "read_ledger", "zotsink._run.states"]
    assert readers("from .. import add_tasks, read_records\n") == []
