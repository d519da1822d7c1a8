"""Habits of zotsink's source, each pinned by a scan that fails when one is broken.

The source is read as text (and parsed with ``ast`` where the shape matters); nothing is
imported for the scans.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
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
STILL_REINIT: set[tuple[str, str]] = set()  # none left; the set may only shrink


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


# -- no timing figures in comments or docstrings: they go stale, BENCHMARKS.md keeps them ---

#: A number followed by a unit of time or of throughput.
FIGURE = re.compile(r"\d\s*(?:ms|µs|us|ns|[KMG]i?B/s)(?![\w/])")

#: Comments that still carry a figure: (module, text of the comment).
STILL_FIGURED: set[tuple[str, str]] = set()  # none left; the set may only shrink


def _prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                for i, line in enumerate(first.value.value.split("\n")):
                    yield first.lineno + i, line


def _figures(source: str) -> list[tuple[int, str]]:
    return [(line, text.strip()) for line, text in _prose(source) if FIGURE.search(text)]


def test_no_timing_figure_in_comments() -> None:
    found = [
        f"{rel}:{line}: {text}"
        for rel, source in _sources()
        for line, text in _figures(source)
        if not any(rel == m and t in text for m, t in STILL_FIGURED)
    ]
    assert not found, f"keep the why, drop the number (figures live in BENCHMARKS.md): {found}"


def test_the_figure_scan_sees_comments_and_docstrings() -> None:
    source = (
        '"""Fast: 3 MB/s."""\n'
        "x = 1  # costs 2.5 ms\n"
        "def f():\n"
        '    """About 40 µs a call, 7us at best."""\n'
        "y = '10 ms'  # a string, not prose; 5 users, 2 minutes\n"
    )
    assert sorted(line for line, _ in _figures(source)) == [1, 2, 4]


# -- no stale pointers: a docstring's ``:func:`zotsink.x.y``` names a place that exists -----

ROLE = re.compile(r":(?:mod|func|class|data|meth|attr|exc|obj):`~?(zotsink(?:\.\w+)+)`")


def _top_names(tree: ast.Module) -> set[str]:
    """Names a module defines or imports at its top level."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assigned = {t.id for t in targets if isinstance(t, ast.Name)}
            names |= assigned
            # the package's names loaded on first use: the keys of its table of them
            if "_LAZY" in assigned and isinstance(node.value, ast.Dict):
                names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _exists(target: str) -> bool:
    """Whether ``zotsink.a.b.name`` names a module of the package or a name at the top of
    one (what follows that name, a method or an attribute, is not looked at)."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        folder = PACKAGE.parent.joinpath(*parts[:i])
        path = folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")
        if path.is_file():
            return i == len(parts) or parts[i] in _top_names(ast.parse(path.read_text("utf-8")))
    return False


def test_docstrings_name_places_that_exist() -> None:
    stale = [
        f"{rel}:{line}: {target}"
        for rel, source in _sources()
        for line, text in _prose(source)
        for target in ROLE.findall(text)
        if not _exists(target)
    ]
    assert not stale, f"these name a place that is gone: point them to the current one: {stale}"


def test_the_pointer_check_knows_old_places() -> None:
    assert _exists("zotsink._core.outlet.Outlet") and _exists("zotsink.collect")
    assert _exists("zotsink._core.outlet")
    assert not _exists("zotsink._core.sidefiles.append_or_save")
    assert not _exists("zotsink._input.BlockEncoder") and not _exists("zotsink.fsinfo")
