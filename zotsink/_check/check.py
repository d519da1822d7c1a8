"""The check itself: OUT's records streamed from a snapshot, each given its problem.

Memory stays bounded except for one 16-byte digest per distinct good line, kept to find
exact duplicates. Used by :func:`zotsink.verify` and by the repair, which rewrites OUT
from the same stream under the exclusive lock.
"""

from __future__ import annotations

from collections.abc import Iterator

from .._core.digest import blake2b
from .._core.fileio import pread_chunks
from .._core.records import decode_row
from .linecheck import Unit, scan
from .report import CHUNK, Problem, VerifyReport

__all__ = ["check", "digest"]


def digest(line: bytes) -> bytes:
    """The 16-byte digest by which duplicate lines are found."""
    return blake2b(line, digest_size=16).digest()


def _chunks(fd: int, size: int) -> Iterator[bytes]:
    # Stops early when OUT shrank under us (someone truncated it): checks what there is.
    return pread_chunks(fd, size, CHUNK)


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
            digests = [digest(c) for c in unit.run]
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
            problem = _dup(report, seen, listed, digest(_content(unit.raw)), unit.line, keep)
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
            d = digest(content)
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
