"""Habits of zotsink's source, each pinned by a scan that fails when one is broken.

The source is read as text (and parsed with ``ast`` where the shape matters); nothing is
imported for the scans.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import zotsink

PACKAGE = Path(zotsink.__file__).parent


def _sources() -> Iterator[tuple[str, str]]:
    """(path relative to the package's parent, text) of every module of the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE.parent).as_posix(), path.read_text(encoding="utf-8")


# -- an object is reset by its reset(), never by calling __init__ again ---------------------

#: Sites that still call ``__init__`` on an object: (module, enclosing function).
STILL_REINIT = {
    ("zotsink/_pack/archive.py", "settle"),  # to become cache.reset() like the others
}


class _InitCalls(ast.NodeVisitor):
    """``X.__init__(...)`` calls where X is neither ``super()`` nor a base of the class."""

    def __init__(self) -> None:
        self.bases: list[set[str]] = [set()]
        self.functions: list[str] = ["<module>"]
        self.found: list[tuple[int, str, str]] = []  # (line, enclosing function, call)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bases.append({ast.unparse(b) for b in node.bases})
        self.generic_visit(node)
        self.bases.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "__init__":
            owner = f.value
            is_super = (
                isinstance(owner, ast.Call)
                and isinstance(owner.func, ast.Name)
                and owner.func.id == "super"
            )
            # Base.__init__(self, ...): the parent's own initialiser, chosen on purpose
            is_base = ast.unparse(owner) in self.bases[-1]
            if not (is_super or is_base):
                self.found.append((node.lineno, self.functions[-1], ast.unparse(node)))
        self.generic_visit(node)


def _reinit_calls(source: str, rel: str) -> list[tuple[int, str, str]]:
    scan = _InitCalls()
    scan.visit(ast.parse(source, rel))
    return scan.found


def test_no_object_is_reset_by_calling_its_init() -> None:
    found = [
        f"{rel}:{line} in {func}(): {call}"
        for rel, text in _sources()
        for line, func, call in _reinit_calls(text, rel)
        if (rel, func) not in STILL_REINIT
    ]
    assert not found, f"give the class a reset() method and call it: {found}"


def test_the_init_scan_sees_what_it_must_refuse() -> None:
    bad = (
        "def f(cache):\n"
        "    cache.__init__()\n"
        "\n"
        "class A(B):\n"
        "    def r(self):\n"
        "        self.__init__()\n"
    )
    assert [(line, func) for line, func, _ in _reinit_calls(bad, "x.py")] == [(2, "f"), (6, "r")]
    good = (
        "class E(Exception):\n"
        "    def __init__(self, m):\n"
        "        Exception.__init__(self, m)\n"
        "        super().__init__(m)\n"
    )
    assert _reinit_calls(good, "x.py") == []
