"""``zotsink verify``: an integrity report on OUT, and ``--repair``.

A check reads a consistent snapshot (taken under a shared lock, see :func:`api.snapshot`)
and streams it: memory stays bounded except for one 16-byte digest per distinct good line,
kept to find exact duplicates. Each line (each record, for csv, where a quoted value may
hold a newline) gets at most one problem, checked in this order:

``header``    the first line of a tsv/csv OUT is damaged (empty, NUL, empty or repeated
              column names), or the header line shows up again further down
``nul``       a NUL byte (what unlocked appends on NFS leave behind)
``fragment``  the last line has no newline: a writer died in the middle of it
``glued``     more fields than the header, but fewer than twice as many: the start of a torn
              record glued to the record after it
``fields``    any other field count that differs from the header's
``malformed`` a csv record the csv module cannot parse
``empty``     an empty line
``duplicate`` the exact bytes of an earlier good line

A repair (``--repair``) is made by :mod:`.repair`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from . import sidefiles
from .api import snapshot
from .errors import InputError
from .linecheck import Unit, scan
from .records import decode_row, format_for

__all__ = ["KINDS", "Problem", "VerifyReport", "repair", "verify"]

#: Problem kinds, in the order a line is checked.
KINDS: Final = (
    "header",
    "nul",
    "fragment",
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
        }

    def summary(self, limit: int = 5) -> list[str]:
        """Human report lines: a headline, then up to ``limit`` problems per kind."""
        what = f"{self.path}: {_n(self.lines, 'line')}, {_n(self.records, 'record')}"
        if not self.found:
            return [f"{what}, no problems"]
        out = [f"{what}, {_n(self.found, 'problem')}"]
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
                f"{sidefiles.rejects_path(self.path)}"
            )
        return out


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _digest(line: bytes) -> bytes:
    return hashlib.blake2b(line, digest_size=16).digest()


def _chunks(fd: int, size: int) -> Iterator[bytes]:
    pos = 0
    while pos < size:
        data = os.pread(fd, min(CHUNK, size - pos), pos)
        if not data:
            break  # OUT shrank under us (someone truncated it): check what there is
        pos += len(data)
        yield data


def _header_names(unit: Unit, fmt: str) -> list[str]:
    text = unit.raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", "surrogateescape")
    return decode_row(text, fmt)


def _content(raw: bytes) -> bytes:
    return raw[:-1] if raw.endswith(b"\n") else raw


def check(
    fd: int,
    size: int,
    report: VerifyReport,
    has_header: bool,
    keep: int,
    name_first: bool = True,
) -> Iterator[tuple[bytes, Problem | None, bool]]:
    """Check the first ``size`` bytes of ``fd``.

    Yields ``(bytes, problem, is_header)`` for the header, for each damaged record, and for
    runs of good records (whose problem is None).
    """
    seen: set[bytes] = set()
    listed: dict[bytes, list[int]] = {}  # digest -> lines of the duplicates listed
    report.bytes = size
    for unit in scan(_chunks(fd, size), report.format, has_header):
        report.lines = unit.last
        if unit.run is not None and report.allow_duplicates:
            report.records += len(unit.run)
            yield unit.raw, None, False
            continue
        if unit.run is not None:
            digests = [_digest(c) for c in unit.run]
            fresh = set(digests)
            if len(fresh) == len(digests) and seen.isdisjoint(fresh):
                seen |= fresh  # the common case: no duplicate in this run
                report.records += len(digests)
                yield unit.raw, None, False
                continue
            for no, (content, d) in enumerate(zip(unit.run, digests), unit.line):
                yield content + b"\n", _dup(report, seen, listed, d, no, keep), False
            continue
        if unit.header:
            report.header = _header_names(unit, report.format)
        if unit.why is not None:
            problem: Problem | None = Problem(unit.line, *unit.why)
            report.add(problem, keep)
        elif unit.header:
            problem = None
        elif report.allow_duplicates:
            problem = None
            report.records += 1
        else:
            problem = _dup(report, seen, listed, _digest(_content(unit.raw)), unit.line, keep)
        yield unit.raw, problem, unit.header
    del seen
    if name_first and listed:
        _name_first_copies(fd, size, report, has_header, listed)


def _dup(
    report: VerifyReport,
    seen: set[bytes],
    listed: dict[bytes, list[int]],
    d: bytes,
    line: int,
    keep: int,
) -> Problem | None:
    """None for a first copy (now remembered), else the duplicate problem (now counted)."""
    if d not in seen:
        seen.add(d)
        report.records += 1
        return None
    problem = Problem(line, "duplicate", "the same bytes as an earlier line")
    if report.counts.get("duplicate", 0) < keep:
        listed.setdefault(d, []).append(line)
    report.add(problem, keep)
    return problem


def _name_first_copies(
    fd: int, size: int, report: VerifyReport, has_header: bool, dups: dict[bytes, list[int]]
) -> None:
    """Say which line each listed duplicate repeats: a second pass, only when there are any."""
    first: dict[bytes, int] = {}
    for unit in scan(_chunks(fd, size), report.format, has_header):
        if unit.header or unit.why is not None:
            continue
        contents = unit.run if unit.run is not None else [_content(unit.raw)]
        for no, content in enumerate(contents, unit.line):
            d = _digest(content)
            if d in dups and d not in first:
                first[d] = no
        if len(first) == len(dups):
            break
    copy_of = {line: first[d] for d, lines in dups.items() if d in first for line in lines}
    report.problems = [
        Problem(p.line, p.kind, f"the same bytes as line {copy_of[p.line]}")
        if p.kind == "duplicate" and p.line in copy_of
        else p
        for p in report.problems
    ]


def verify(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    header: bool | None = None,
    allow_duplicates: bool = False,
    repair: bool = False,
    lock: str = "auto",
    timeout: float = 600.0,
    keep: int = KEEP,
) -> VerifyReport:
    """Check OUT; with ``repair``, move every bad line to ``OUT.rejects``.

    ``header``: whether line 1 is a header (default: yes for tsv and csv, no for lines).
    ``allow_duplicates``: exact duplicate lines are not problems. A repair is only made when
    the check finds something it can move; the report returned is then the repair's.
    """
    p = os.fspath(path)
    fmt = format_for(p, format)
    has_header = fmt != "lines" if header is None else header
    if os.path.isdir(p):  # open(2) of a directory for reading succeeds: say it here
        raise InputError(f"{p} is a directory, not a zotsink output", path=p)
    fd, size = snapshot(p, lock=lock, timeout=timeout)
    try:
        report = VerifyReport(p, fmt, allow_duplicates=allow_duplicates)
        for _ in check(fd, size, report, has_header, keep):
            pass
    finally:
        os.close(fd)
    if repair and any(k not in KEPT_KINDS for k in report.counts):
        from .repair import repair_locked

        return repair_locked(p, fmt, has_header, allow_duplicates, lock, timeout, keep)
    return report


def repair(path: str | os.PathLike[str], **options: Any) -> VerifyReport:
    """Same as ``verify(path, repair=True, **options)``."""
    return verify(path, repair=True, **options)
