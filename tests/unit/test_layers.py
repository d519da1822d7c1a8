"""The order of zotsink's packages: no loop between units, and nothing imported up from
``_core``.

A unit is a subpackage (``_check``, ``_collect``, ``_run``, ``_pack``, ``_doctor``,
``_core``, ``cli``) or a top-level module (``_read``, ``_arrays``, ``_ledgerfile``, ...).
Every import counts, at the top of a module or inside a function; only ``if TYPE_CHECKING:``
blocks do not (they never run). A per-file check cannot see a loop such as ``_run ->
_check -> _read -> _run``, made of imports in three different files.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import zotsink

PACKAGE = Path(zotsink.__file__).parent
#: What ``_core`` may import: itself and the exception tree.
CORE_MAY_IMPORT = {"_core", "errors"}


def _units() -> set[str]:
    return {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if _is_unit(p)}


def _is_unit(p: Path) -> bool:
    return (p.is_file() and p.suffix == ".py") or (p / "__init__.py").is_file()


def _unit_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    return skip


def _targets(path: Path, node: ast.AST, units: set[str]) -> Iterator[str]:
    """The units an import statement of the module at ``path`` reaches."""
    here = list(path.relative_to(PACKAGE).parts[:-1])  # the module's package, below the root
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == PACKAGE.name:
                yield parts[1] if len(parts) > 1 and parts[1] in units else "__init__"
        return
    if not isinstance(node, ast.ImportFrom):
        return
    if node.level:
        base = here[: len(here) - node.level + 1] if node.level - 1 <= len(here) else []
        mod = base + (node.module.split(".") if node.module else [])
    elif node.module and node.module.split(".")[0] == PACKAGE.name:
        mod = node.module.split(".")[1:]
    else:
        return  # another package's
    if mod:
        yield mod[0] if mod[0] in units else "__init__"
        return
    for alias in node.names:  # from .. import x: x is a unit, or a name of the root
        yield alias.name if alias.name in units else "__init__"


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(unit, unit it imports) -> where: ``path:line`` of each import."""
    units = _units()
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = _type_checking_only(tree)
        src = _unit_of(path)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            for dst in _targets(path, node, units):
                if dst != src:
                    where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                    edges.setdefault((src, dst), []).append(where)
    return edges


def loops(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The groups of units that reach each other (Tarjan's strongly connected components)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_loop_between_units() -> None:
    edges = import_edges()
    found = loops(edges)
    detail = [
        f"{a} -> {b}: {', '.join(w)}"
        for group in found
        for (a, b), w in sorted(edges.items())
        if a in group and b in group
    ]
    assert found == [], "imports that run back up a layer:\n" + "\n".join(detail)


def test_core_imports_nothing_above_it() -> None:
    found = [
        f"{', '.join(w)}: _core imports {b}"
        for (a, b), w in sorted(import_edges().items())
        if a == "_core" and b not in CORE_MAY_IMPORT
    ]
    assert found == []


def test_the_walk_sees_imports_inside_functions_and_skips_type_checking() -> None:
    """The walk itself: a loop made by an import inside a function is found, one made only
    under TYPE_CHECKING is not."""
    edges = import_edges()
    # the CLI imports the root's public names inside its commands' functions
    assert ("cli", "__init__") in edges
    assert ("__init__", "_run") not in edges  # the root's eager imports are TYPE_CHECKING's
    assert loops({("a", "b"): [], ("b", "c"): [], ("c", "a"): [], ("c", "d"): []}) == [
        ["a", "b", "c"]
    ]
