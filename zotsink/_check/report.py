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
    #: (task number, why) of the tasks whose ``ok`` row claims records OUT does not hold
    #: as they wrote them (OUT replaced, renamed, cut or changed in place since): problems
    untrusted: list[tuple[int, str]] = field(default_factory=list)

    @property
    def found(self) -> int:
        """Problems found, of every kind (a task whose claim OUT breaks is one)."""
        return sum(self.counts.values()) + len(self.untrusted)

    @property
    def ok(self) -> bool:
        """True when OUT is clean (after a repair: when every problem was moved)."""
        return self.found == self.moved

    @property
    def repair_target(self) -> str:
        """Where a repair moves the damaged lines: OUT's rejects file."""
        return rejects_path(self.path)

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
            "untrusted": [{"tasknum": n, "why": why} for n, why in self.untrusted],
        }
