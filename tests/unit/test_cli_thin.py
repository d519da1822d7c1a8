"""The CLI is a thin layer over the public API: its commands call only names of ``zotsink``.

A command that reaches into a private module (``zotsink._x``) for a function or class can do
what a Python user cannot; this pin fails when one does. Constants and option choices
(``STAMP_FIELDS``, ``STATES``) may still come from private modules: they are data, not a
second way in. ``_common`` holds the option definitions themselves, and with them the choices
they offer.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import zotsink

CLI = Path(zotsink.__file__).parent / "cli"
NOT_PINNED = {"_common.py"}
PINNED = sorted(p.name for p in CLI.glob("*.py") if p.name not in NOT_PINNED)


def _imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, absolute module, name) of every import in ``path``, nested ones included."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, "") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["zotsink", "cli"][: 3 - node.level]  # level 1: zotsink.cli, 2: zotsink
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found += [(node.lineno, module, a.name) for a in node.names]
    return found


def _private(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "zotsink" and len(parts) > 1 and parts[1].startswith("_")


def test_the_pinned_set_is_the_commands_it_should_be() -> None:
    assert {"cat.py", "doctor.py", "missing.py", "pack.py", "recover.py", "status.py"} <= set(
        PINNED
    )
    assert "verify.py" in PINNED and "__init__.py" in PINNED


@pytest.mark.parametrize("name", PINNED)
def test_a_command_calls_only_public_names(name: str) -> None:
    bad = []
    for line, module, attr in _imports(CLI / name):
        where = f"cli/{name}:{line}"
        if module == "zotsink" and attr and attr not in zotsink.__all__:
            bad.append(f"{where}: zotsink.{attr} is not a public name")
        if not _private(module):
            continue
        if not attr:
            bad.append(f"{where}: import {module}")
            continue
        value = getattr(importlib.import_module(module), attr)
        if callable(value):  # a function or class: a way in that Python users lack
            bad.append(f"{where}: {attr} from {module}")
    assert bad == [], "export these from zotsink (its _LAZY table) and import them from there"


def test_the_scan_sees_private_imports_inside_functions(tmp_path: Path) -> None:
    """The pin itself can fail: a nested relative import of a private function is found."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f():\n    from .._pack.files import pack_files\n    from .. import verify\n"
    )
    assert _imports(sample) == [
        (2, "zotsink._pack.files", "pack_files"),
        (3, "zotsink", "verify"),
    ]
