"""zotsink verify: what it finds, what --repair moves, and repairs during live writers."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import filelock
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zotsink import VerifyReport, repair, verify
from zotsink.cli.verify import verify_lines

Run = Callable[..., subprocess.CompletedProcess]

HEADER = b"name\tmin\tmax\n"
GOOD = [b"a.jpg\t1\t9\n", b"b.jpg\t2\t8\n", b"c.jpg\t3\t7\n"]


def _kinds(report: VerifyReport) -> list[tuple[int, str]]:
    return sorted((p.line, p.kind) for p in report.problems)


def _rejects(out: Path) -> list[bytes]:
    return Path(str(out) + ".rejects").read_bytes().splitlines()


# -- a torn fragment and a wrong field count, found and repaired -----------------------------


def test_fragment_and_field_count_named_then_repaired(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "out.tsv"
    out.write_bytes(HEADER + GOOD[0] + b"d.jpg\t4\n" + GOOD[1] + b"e.jpg\t5")
    r = zotsink("verify", out)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert f"{out}:3: fields: 2 fields where the header has 3" in err
    assert f"{out}:5: fragment: no newline at the end of the file" in err
    assert "Traceback" not in err and r.stdout == b""

    r = zotsink("verify", "--repair", out)
    assert r.returncode == 0, r.stderr
    assert b"moved 2 lines to" in r.stderr
    assert out.read_bytes() == HEADER + GOOD[0] + GOOD[1]
    rejects = _rejects(out)
    assert rejects == [
        b"line 3: fields (2 fields where the header has 3)\td.jpg\t4",
        b"line 5: fragment (no newline at the end of the file: a write that was cut short)"
        b"\te.jpg\t5",
    ]
    r = zotsink("verify", out)
    assert r.returncode == 0 and b"3 lines, 2 records, no problems" in r.stderr


# -- what a check finds --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"x\t1\t2\x003\n", [(2, "nul")]),
        (b"\n", [(2, "empty")]),
        (b"\r\n", [(2, "empty")]),
        (b"x\t1\n", [(2, "fields")]),
        (b"x\t1\t2\t3\t4\t5\t6\n", [(2, "fields")]),
        # the start of a torn record ("y\t5") glued to the next one: 3 + 2 - 1 fields
        (b"y\t5x\t1\t2\n", [(2, "glued")]),
        (b"x\t1\t2", [(2, "fragment")]),
        (HEADER, [(2, "header")]),
        (GOOD[0] + b"z\t0\t0\n" + GOOD[0], [(4, "duplicate")]),
    ],
)
def test_each_kind(tmp_path: Path, body: bytes, expected: list[tuple[int, str]]) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(HEADER + body)
    report = verify(out)
    assert _kinds(report) == expected
    assert not report.ok


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        (b"a\tb\ta\n", "the header names column 'a' twice"),
        (b"a\t\tc\n", "column 2 of the header has no name"),
        (b"\n", "the header line is empty"),
    ],
)
def test_damaged_header_is_reported_and_left_in_place(
    tmp_path: Path, header: bytes, detail: str
) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(header + b"1\t2\t3\n")
    ino = out.stat().st_ino
    report = verify(out, repair=True)
    assert [(p.line, p.kind, p.detail) for p in report.problems] == [(1, "header", detail)]
    assert not report.ok and not report.repaired
    assert out.stat().st_ino == ino  # nothing else to move: OUT was not rewritten
    assert verify_lines(report)[-1] == "fix line 1 by hand: a repair never moves the header"


def test_duplicates_are_problems_unless_allowed(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(HEADER + GOOD[0] + GOOD[1] + GOOD[0] + GOOD[0])
    r = zotsink("verify", out)
    assert r.returncode == 1
    assert f"{out}:4: duplicate: the same bytes as line 2".encode() in r.stderr
    assert f"{out}:5: duplicate: the same bytes as line 2".encode() in r.stderr
    r = zotsink("verify", "--allow-duplicates", out)
    assert r.returncode == 0 and b"5 lines, 4 records, no problems" in r.stderr
    r = zotsink("verify", "--repair", out)
    assert r.returncode == 0
    assert out.read_bytes() == HEADER + GOOD[0] + GOOD[1]  # the first copy stays
    assert [ln.split(b"\t", 1)[0] for ln in _rejects(out)] == [
        b"line 4: duplicate (the same bytes as an earlier line)",
        b"line 5: duplicate (the same bytes as an earlier line)",
    ]


def test_lines_format_has_no_header_and_no_field_counts(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"one\ttwo\nthree\n\nfour\x00\none\ttwo\nfive")
    report = verify(out)
    assert report.header is None
    assert _kinds(report) == [(3, "empty"), (4, "nul"), (5, "duplicate"), (6, "fragment")]
    assert report.records == 2


def test_headerless_tsv_takes_the_field_count_from_line_1(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"1\t2\n3\t4\n5\n")
    report = verify(out, header=False)
    assert report.header is None and report.records == 2
    assert _kinds(report) == [(3, "fields")]


def test_csv_quoted_newlines_are_records(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    out.write_bytes(b'name,note\na,"two\nlines"\nb,"x, ""quoted"""\nc,plain\n')
    report = verify(out)
    assert report.ok and report.records == 3 and report.lines == 5
    assert report.header == ["name", "note"]


def test_csv_stray_quote_costs_one_line_only(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    out.write_bytes(b'name,note\na,"open\nb,fine\nc,fine\nd,"x\ny"\n')
    ino = out.stat().st_ino
    report = verify(out, repair=True)
    assert _kinds(report) == [(2, "malformed")]
    assert report.repaired and out.stat().st_ino != ino
    assert out.read_bytes() == b'name,note\nb,fine\nc,fine\nd,"x\ny"\n'
    assert _rejects(out)[0].endswith(b'\ta,"open')
    assert verify(out).ok


def test_lines_longer_than_a_read_chunk(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    long = b"L" * (3 << 20)  # three read chunks
    small = [b"%d\n" % i for i in range(300_000)]  # lines that straddle chunk ends
    out.write_bytes(long + b"\n" + b"".join(small) + long + b"\n")
    report = verify(out)
    assert _kinds(report) == [(300_002, "duplicate")]
    assert report.records == 300_001 and report.lines == 300_002


def test_summary_lists_the_first_per_kind_and_counts_the_rest(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(HEADER + b"\n" * 12 + GOOD[0])
    r = zotsink("verify", "--show", "3", out)
    err = r.stderr.decode()
    assert r.returncode == 1
    assert err.count(": empty: empty line") == 3
    assert "... and 9 more empty problems" in err
    assert f"{out}:2: empty" in err and f"{out}:5: empty" not in err


def test_json_report(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(HEADER + GOOD[0] + b"x\n")
    r = zotsink("verify", "--json", "-q", out)
    assert r.returncode == 1 and r.stderr == b""
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["problems"] == 1 and doc["records"] == 1
    assert doc["counts"] == {"fields": 1}
    assert doc["listed"] == [
        {"line": 3, "kind": "fields", "detail": "1 field where the header has 3"}
    ]
    assert doc["header"] == ["name", "min", "max"] and doc["format"] == "tsv"


def test_clean_and_empty_files(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"")
    assert zotsink("verify", out).returncode == 0
    out.write_bytes(HEADER + b"".join(GOOD))
    r = zotsink("verify", "--repair", out)
    assert r.returncode == 0 and not Path(str(out) + ".rejects").exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.mkdir(), "is a directory"),
    ],
)
def test_bad_out_is_a_clear_error(
    tmp_path: Path, zotsink: Run, make: Callable[[Path], None], message: str
) -> None:
    out = tmp_path / "o.tsv"
    make(out)
    r = zotsink("verify", "--repair", out)
    assert r.returncode == 1
    assert message.encode() in r.stderr and b"Traceback" not in r.stderr


# -- repair --------------------------------------------------------------------------------


def test_repair_keeps_mode_and_moves_to_a_new_inode(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(HEADER + GOOD[0] + b"\n" + GOOD[1])
    out.chmod(0o640)
    ino = out.stat().st_ino
    report = verify(out, repair=True)
    assert report.repaired and report.moved == 1 and report.ok
    assert out.stat().st_mode & 0o7777 == 0o640 and out.stat().st_ino != ino
    assert out.read_bytes() == HEADER + GOOD[0] + GOOD[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.tsv", "o.tsv.rejects"]


def test_repair_through_a_symlink_replaces_the_target(tmp_path: Path) -> None:
    real = tmp_path / "data" / "real.tsv"
    real.parent.mkdir()
    real.write_bytes(HEADER + GOOD[0] + b"x\n")
    link = tmp_path / "out.tsv"
    link.symlink_to(real)
    report = repair(link, lock="lockfile")
    assert report.repaired and report.ok
    assert link.is_symlink() and real.read_bytes() == HEADER + GOOD[0]
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.tsv"]  # no temp file left
    assert _rejects(link) == [b"line 3: fields (1 field where the header has 3)\tx"]


def test_repair_times_out_without_touching_out(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "o.tsv"
    data = HEADER + b"x\n"
    out.write_bytes(data)
    with open(out, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        r = zotsink("verify", "--repair", "--timeout", "0.2", out)
    assert r.returncode == 75 and b"still held" in r.stderr
    assert out.read_bytes() == data and not Path(str(out) + ".rejects").exists()


_LINE = st.sampled_from(
    [b"k%d\t1\t2", b"k%d\t1", b"", b"k%d\t1\t2\x00", b"k%d\t1\t2\tk9\t1", b"k1\t1\t2"]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(_LINE, max_size=30), st.booleans())
def test_repair_loses_nothing(tmp_path_factory: pytest.TempPathFactory, pick, torn) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    out = tmp / "o.tsv"
    lines = [HEADER[:-1]] + [(p % i) if b"%d" in p else p for i, p in enumerate(pick)]
    torn = torn and lines[-1] != b"" and len(lines) > 1  # a torn empty line is no line
    body = b"\n".join(lines) + (b"" if torn else b"\n")
    out.write_bytes(body)
    report = verify(out, repair=True)
    kept = out.read_bytes().splitlines()
    moved = _rejects(out) if report.moved else []
    assert sorted(kept[1:] + [m.split(b"\t", 1)[1] for m in moved]) == sorted(lines[1:])
    assert kept[0] == HEADER[:-1]
    assert verify(out).ok


# -- a repair while 4 writers stream into OUT ------------------------------------------------

PRODUCER = r"""
import os, sys, time
w, stop, count = sys.argv[1], sys.argv[2], sys.argv[3]
out = sys.stdout
i = 0
while not os.path.exists(stop):
    for _ in range(20):
        out.write(f"w{w}\t{i}\t{'p' * 20}\n")
        i += 1
    out.flush()
    time.sleep(0.002)  # pace the stream; nothing waits on this
with open(count, "w") as f:
    f.write(str(i))
"""


def _inject(out: Path, kind: str, data: bytes) -> None:
    """A foreign writer that appends under the same kind of lock (and leaves damage)."""
    if kind == "lockfile":
        with filelock.SoftFileLock(f"{out}.lock"), open(out, "ab") as f:
            f.write(data)
        return
    lock = fcntl.flock if kind == "flock" else fcntl.lockf
    fd = os.open(out, os.O_WRONLY | os.O_APPEND)
    try:
        lock(fd, fcntl.LOCK_EX)
        os.write(fd, data)
        lock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _wait_for(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.mark.parametrize("kind", ["flock", "fcntl", "lockfile"])
def test_repair_while_four_writers_stream(
    tmp_path: Path, kind: str, zotsink_cmd: list[str], child_env: Callable[..., dict]
) -> None:
    out = tmp_path / "out.tsv"
    stop = tmp_path / "stop"
    out.write_bytes(b"w\ti\tpad\n" + b"seed-bad\n" + b"seed-torn")
    env = child_env()
    procs = []
    for w in range(4):
        prod = subprocess.Popen(
            [sys.executable, "-c", PRODUCER, str(w), str(stop), str(tmp_path / f"{w}.count")],
            stdout=subprocess.PIPE,
            env=env,
        )
        sink = subprocess.Popen(
            [
                *zotsink_cmd,
                "--lock",
                kind,
                "--batch-bytes",
                "2048",
                "--flush-interval",
                "0.005",
                str(out),
            ],
            stdin=prod.stdout,
            env=env,
        )
        assert prod.stdout is not None
        prod.stdout.close()
        procs += [prod, sink]
    try:
        _wait_for(lambda: all(b"w%d\t" % w in out.read_bytes() for w in range(4)), "writers")
        injected = [b"seed-bad", b"seed-torn"]
        for round_ in range(3):
            if round_:
                _inject(out, kind, b"bad-%d\ntorn-%d" % (round_, round_))
                injected += [b"bad-%d" % round_, b"torn-%d" % round_]
            size = out.stat().st_size
            r = subprocess.run(
                [*zotsink_cmd, "verify", "--repair", "--lock", kind, str(out)],
                capture_output=True,
                env=env,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            assert b"moved" in r.stderr
            # the writers follow the new OUT: it grows again after each repair
            _wait_for(lambda s=size: out.stat().st_size > s // 2 + 4096, "growth")
    finally:
        stop.touch()
        codes = [p.wait(60) for p in procs]
    assert codes == [0] * 8

    data = out.read_bytes()
    assert data.endswith(b"\n")
    lines = data.split(b"\n")[:-1]
    assert lines[0] == b"w\ti\tpad" and lines.count(b"w\ti\tpad") == 1
    seen: dict[int, list[int]] = {w: [] for w in range(4)}
    for ln in lines[1:]:
        w, i, pad = ln.split(b"\t")
        assert w[:1] == b"w" and pad == b"p" * 20, ln
        seen[int(w[1:])].append(int(i))
    for w in range(4):
        n = int((tmp_path / f"{w}.count").read_text())
        assert n > 0 and sorted(seen[w]) == list(range(n)), f"writer {w}"
    moved = sorted(ln.split(b"\t", 1)[1] for ln in _rejects(out))
    assert moved == sorted(injected)
    assert verify(out, lock=kind).ok


def test_verify_a_ledger_counts_its_header_as_no_record(tmp_path: Path) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\nc\n")
    zotsink = [sys.executable, "-m", "zotsink"]
    r = subprocess.run(
        [*zotsink, "run", "tasks.txt", "out.txt", "--", "echo"], cwd=tmp_path,
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "out.txt.ledger").read_bytes().count(b"\n")
    r = subprocess.run(
        [*zotsink, "verify", "out.txt.ledger"], cwd=tmp_path, capture_output=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode() == (
        f"zotsink: out.txt.ledger: {lines} lines, {lines - 1} records, no problems\n"
    )
