"""verify and append judge a record line by one rule: what append refuses, verify names.

A line that got into OUT some other way (an old zotsink, a plain ``>>``, a torn write) is
put there with raw bytes; verify must then name it as a problem, and append, given the
same line, must refuse it.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from zotsink import verify
from zotsink._core.records import MAX_LINE, Encoder
from zotsink._stream import append_stream
from zotsink.errors import UsageError

Run = Callable[..., subprocess.CompletedProcess]

HEADERS = {"tsv": b"h1\th2\n", "csv": b"h1,h2\n", "lines": b""}
#: append holds raw lines to a header it is given (--columns), not to one it finds in OUT
COLUMNS = {"tsv": ("h1", "h2"), "csv": ("h1", "h2"), "lines": None}
GOOD = {"tsv": b"x\ty\n", "csv": b"x,y\n", "lines": b"x y\n"}


_BAD_LINES = [
    ("tsv", b"a" * (MAX_LINE + 1024) + b"\tb", "long"),
    ("lines", b"a" * (MAX_LINE + 1), "long"),
    ("csv", b"a," + b"b" * (MAX_LINE + 1), "long"),
    ("tsv", b"a\0\tb", "nul"),
    ("lines", b"a\0b", "nul"),
    ("tsv", b"a\tb\tc\td\te", "fields"),
    ("tsv", b"a\tb\tc", "glued"),
    ("tsv", b"a", "fields"),
    ("csv", b"a,b,c,d,e", "fields"),
    ("csv", b'a,"b"c', "malformed"),
    ("csv", b'a,"b', "malformed"),
]


# Short ids: pytest puts the test's id in the environment of every process the test starts
# (PYTEST_CURRENT_TEST), and an id holding a 17 MiB line is over the kernel's limit.
@pytest.mark.parametrize(
    ("fmt", "line", "kind"),
    _BAD_LINES,
    ids=[f"{fmt}-{kind}-{len(line)}" for fmt, line, kind in _BAD_LINES],
)
def test_a_line_append_refuses_is_a_problem_to_verify(
    tmp_path: Path, zotsink: Run, fmt: str, line: bytes, kind: str
) -> None:
    # written behind zotsink's back: verify names it
    out = tmp_path / f"bad.{'txt' if fmt == 'lines' else fmt}"
    out.write_bytes(HEADERS[fmt] + GOOD[fmt] + line + b"\n")
    r = zotsink("verify", out, timeout=120)
    no = 3 if HEADERS[fmt] else 2
    assert r.returncode == 1, r.stderr
    assert f"{out}:{no}: {kind}: ".encode() in r.stderr, r.stderr[-400:]
    assert b"Traceback" not in r.stderr

    # given to append: refused, OUT untouched, the line whole in OUT.rejects
    target = tmp_path / f"ok.{'txt' if fmt == 'lines' else fmt}"
    target.write_bytes(HEADERS[fmt] + GOOD[fmt])
    cols = ["--columns", ",".join(COLUMNS[fmt])] if COLUMNS[fmt] else []
    r = zotsink("append", *cols, target, input=line + b"\n", timeout=120)
    assert r.returncode == 1, r.stderr
    assert target.read_bytes() == HEADERS[fmt] + GOOD[fmt]
    assert Path(f"{target}.rejects").read_bytes().endswith(b"\t" + line + b"\n")


# Bytes that make lines interesting to both judges: separators, quotes, CR, NUL, a
# backslash, non-UTF-8. No letter of the header names: a line equal to the header is
# verify's "header again", which is about OUT's first line, not the line's shape.
_ALPHABET = [b"a", b"b", b"\t", b",", b'"', b"\r", b"\0", b"\\", b" ", b"\xff", b"\xc3\xa9"]
_LINES = st.lists(st.sampled_from(_ALPHABET), min_size=1, max_size=12).map(b"".join)


def _append_accepts(out: Path, fmt: str, line: bytes) -> bool:
    out.write_bytes(HEADERS[fmt])
    report = append_stream(
        out, None, data=line + b"\n", format=fmt, columns=COLUMNS[fmt], count=True
    )
    accepted = report.rejected == 0 and report.error is None
    assert out.read_bytes() == HEADERS[fmt] + (line + b"\n" if accepted else b"")
    return accepted


def _verify_accepts(out: Path, fmt: str, line: bytes) -> bool:
    out.write_bytes(HEADERS[fmt] + line + b"\n")
    report = verify(out, format=fmt)
    assert report.records + sum(report.counts.values()) >= 1
    return report.ok


@settings(max_examples=300)
@given(fmt=st.sampled_from(sorted(HEADERS)), line=_LINES)
@example(fmt="csv", line=b"a")
@example(fmt="csv", line=b'a,"b')
@example(fmt="csv", line=b'"a\tb",c')
@example(fmt="csv", line=b"a,b\r")
@example(fmt="csv", line=b"\r")
@example(fmt="tsv", line=b"a\tb\tc")
@example(fmt="tsv", line=b"a\tb\r")
@example(fmt="tsv", line=b"\r")
@example(fmt="lines", line=b"a\0")
@example(fmt="lines", line=b"\xff\\")
def test_append_accepts_exactly_the_lines_verify_accepts(fmt: str, line: bytes) -> None:
    # An empty line in a lines OUT is taken by append and named "empty" by verify: whether
    # an empty record is a record is not a question of the line's shape, and is left out.
    assume(fmt != "lines" or line not in (b"", b"\r"))
    with tempfile.TemporaryDirectory() as d:
        appended = _append_accepts(Path(d, "a.out"), fmt, line)
        verified = _verify_accepts(Path(d, "v.out"), fmt, line)
    assert appended == verified, (fmt, line)


@settings(max_examples=200)
@given(names=st.lists(st.sampled_from(["a", "b", "c", ""]), min_size=1, max_size=4))
def test_a_header_append_refuses_is_a_problem_to_verify(names: list[str]) -> None:
    try:
        Encoder("tsv", names)
        refused = False
    except UsageError:
        refused = True
    with tempfile.TemporaryDirectory() as d:
        out = Path(d, "o.tsv")
        out.write_bytes("\t".join(names).encode() + b"\n")
        report = verify(out)
    assert refused == (report.counts.get("header", 0) == 1), names
