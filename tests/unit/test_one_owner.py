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
