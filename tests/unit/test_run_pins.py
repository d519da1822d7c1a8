"""Pins of the run wing's architecture: each object owns its fields, and the decisions do
no I/O.

- No module under ``zotsink/_run`` assigns to, appends to, pops from or otherwise changes
  an attribute of an object other than ``self`` (``other.x = 1``, ``other.items.append(y)``,
  ``self.queue.stopped = True``, ``del other.x[k]``): a neighbour is talked to through its
  methods. A change of a field of a library's object the module does not own is listed in
  ``LIBRARY`` with why.
- The decisions (``state``, ``attempt``, ``queue``, ``commit``, ``halting``) import nothing
  that does I/O (``os``, ``select``, ``subprocess``, ``signal``, ``time``, ``socket``,
  ``threading``) and call no such module: the time comes in the events.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import zotsink

RUN = Path(zotsink.__file__).parent / "_run"
#: Methods that change the object they are called on.
MUTATORS = frozenset(
    ("append", "appendleft", "extend", "extendleft", "insert", "pop", "popleft", "popitem",
     "remove", "clear", "update", "add", "discard", "setdefault", "sort", "reverse")
)  # fmt: skip
#: Fields of library objects a module sets, and why: (module, field) -> why.
LIBRARY = {
    ("usage.py", "returncode"): "a Popen reaped by wait4 (its usage kept): subprocess must not",
    ("serve.py", "path"): "sys.path: the worker imports FUNC's module as `python FILE` would",
    ("serve.py", "modules"): "sys.modules: FUNC's module under its own name (pickling)",
    ("serve.py", "environ"): "os.environ: each call's task number and attempt, for stamps",
}
#: The decision modules: no I/O.
PURE = ("state.py", "attempt.py", "queue.py", "commit.py", "halting.py", "relay.py")
IO_MODULES = frozenset(("os", "select", "subprocess", "signal", "time", "socket", "threading"))


def _root(node: ast.expr) -> tuple[str, int] | None:
    """The name an attribute chain starts from, and how many attributes follow it."""
    depth = 0
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            depth += 1
        node = node.value
    return (node.id, depth) if isinstance(node, ast.Name) else None


def _foreign(target: ast.expr) -> str | None:
    """Why changing ``target`` changes a field of another object; None when it is self's
    own field (``self.x``, ``self.x[k]``) or a local name."""
    if isinstance(target, ast.Subscript):
        target = target.value  # x.attr[k] = ...: the field x.attr is changed
        if not isinstance(target, ast.Attribute):
            return None
    if not isinstance(target, ast.Attribute):
        return None
    root = _root(target)
    if root is None:
        return ast.unparse(target)
    name, depth = root
    if name in ("self", "cls") and depth == 1:
        return None
    return ast.unparse(target)


def _changes(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.target is not None:
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and isinstance(node.func.value, ast.Attribute)
        ):
            targets = [node.func.value]
        for t in targets:
            for leaf in t.elts if isinstance(t, ast.Tuple) else [t]:
                why = _foreign(leaf)
                if why is not None:
                    yield node.lineno, why


def test_no_module_of_the_run_wing_changes_another_object_s_fields() -> None:
    found = []
    for path in sorted(RUN.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), path.name)
        for line, what in _changes(tree):
            field = what.rsplit(".", 1)[-1].split("[")[0]
            if (path.name, field) in LIBRARY:
                continue
            found.append(f"{path.name}:{line}: {what}")
    assert found == [], "talk to a neighbour through its methods, not its fields"


def test_the_pin_sees_a_change_of_another_object_s_field() -> None:
    code = (
        "def f(self, other):\n"
        "    self.own = 1\n"
        "    self.items.append(2)\n"
        "    self.table[3] = 4\n"
        "    other.x = 5\n"
        "    self.queue.stopped = True\n"
        "    other.notes.append('n')\n"
        "    del other.d[1]\n"
        "    self.w.queued.popleft()\n"
    )
    got = [what for _line, what in sorted(_changes(ast.parse(code)))]
    assert got == ["other.x", "self.queue.stopped", "other.notes", "other.d", "self.w.queued"]


def test_the_decisions_do_no_i_o() -> None:
    for name in PURE:
        tree = ast.parse((RUN / name).read_text(encoding="utf-8"), name)
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & IO_MODULES, f"{name} imports {sorted(imported & IO_MODULES)}"
        used = {
            n.value.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        }
        assert not used & IO_MODULES, f"{name} uses {sorted(used & IO_MODULES)}"
