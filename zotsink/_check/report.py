"""What ``verify`` found: the problem kinds, one problem, and the report.

A line gets at most one problem, checked in the order of :data:`KINDS` (the kinds are
explained in :mod:`zotsink._check.verify`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from .._core.sidefiles import rejects_path

__all__ = ["CHUNK", "KEEP", "KEPT_KINDS", "KINDS", "Problem", "VerifyReport"]

#: Problem kinds, in the order a line is checked.
KINDS: Final = (
    "header",
    "nul",
    "fragment",
    "long",
    "glued",
    "fields",
    "malformed",
    "empty",
    "duplicate",
)
#: Kinds a repair leaves in place: moving line 1 would turn a record into the header.
KEPT_KINDS: Final = frozenset({"header"})
#: Problems listed per kind in a report; the rest are only counted.
KEEP: Final = 100
#: Bytes read per pread() of OUT.
CHUNK: Final = 1 << 20


@dataclass(frozen=True)
class Problem:
    """One damaged line: its 1-based line number in OUT, its kind and what is wrong."""

    line: int
    kind: str
    detail: str

    def reason(self) -> str:
        """The reason written to OUT.rejects: ``line 17: fragment (...)``."""
        return f"line {self.line}: {self.kind} ({self.detail})"


@dataclass
class VerifyReport:
    """What :func:`verify` found (and, after a repair, what it moved to OUT.rejects)."""

    path: str
    format: str
    bytes: int = 0
    lines: int = 0
    records: int = 0
    header: list[str] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)  # the first KEEP of each kind
    allow_duplicates: bool = False
    repaired: bool = False
    moved: int = 0
    rejects_path: str | None = None
    #: Lines no ``ok`` attempt of ``zotsink run`` claims (its ledger is beside OUT): left by
    #: failed, interrupted or crashed attempts, left out by the readers; None: no such ledger.
    unclaimed: int | None = None

    @property
    def found(self) -> int:
        """Problems found, of every kind."""
        return sum(self.counts.values())

    @property
    def ok(self) -> bool:
        """True when OUT is clean (after a repair: when every problem was moved)."""
        return self.found == self.moved

    def add(self, problem: Problem, keep: int = KEEP) -> None:
        n = self.counts.get(problem.kind, 0)
        self.counts[problem.kind] = n + 1
        if n < keep:
            self.problems.append(problem)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``zotsink verify --json``)."""
        return {
            "path": self.path,
            "format": self.format,
            "ok": self.ok,
            "bytes": self.bytes,
            "lines": self.lines,
            "records": self.records,
            "header": self.header,
            "problems": self.found,
            "counts": {k: self.counts[k] for k in KINDS if k in self.counts},
            "listed": [
                {"line": p.line, "kind": p.kind, "detail": p.detail}
                for p in sorted(self.problems, key=lambda p: p.line)
            ],
            "allow_duplicates": self.allow_duplicates,
            "repaired": self.repaired,
            "moved": self.moved,
            "rejects": self.rejects_path,
            "unclaimed": self.unclaimed,
        }

    def summary(self, limit: int = 5) -> list[str]:
        """Human report lines: a headline, then up to ``limit`` problems per kind."""
        what = f"{self.path}: {_n(self.lines, 'line')}, {_n(self.records, 'record')}"
        note = []
        if self.unclaimed:
            note.append(
                f"{_n(self.unclaimed, 'line')} claimed by no ok attempt of the run (failed, "
                "interrupted or crashed attempts): zotsink cat and read_records leave them "
                "out (cat --all shows them); not damage"
            )
        if not self.found:
            return [f"{what}, no problems", *note]
        out = [f"{what}, {_n(self.found, 'problem')}", *note]
        for kind in KINDS:
            n = self.counts.get(kind, 0)
            if not n:
                continue
            listed = [p for p in self.problems if p.kind == kind][:limit]
            out += [f"  {self.path}:{p.line}: {kind}: {p.detail}" for p in listed]
            if n > len(listed):
                out.append(f"  ... and {n - len(listed)} more {kind} problems")
        if self.repaired:
            left = self.found - self.moved
            out.append(
                f"moved {_n(self.moved, 'line')} to {self.rejects_path}"
                + (f"; {left} problems left in place (fix line 1 by hand)" if left else "")
            )
        elif all(p.kind in KEPT_KINDS and p.line == 1 for p in self.problems):
            out.append("fix line 1 by hand: a repair never moves the header")
        else:
            out.append(
                f"run `zotsink verify --repair {self.path}` to move the damaged lines to "
                f"{rejects_path(self.path)}"
            )
        return out


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
