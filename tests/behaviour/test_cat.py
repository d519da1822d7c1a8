"""zotsink cat: a consistent copy of OUT, never a half-written batch."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

Run = Callable[..., subprocess.CompletedProcess]

RECORD = 200 * 1024  # bytes per record line, without the newline
PER_BATCH = 2
# A writer appends batches of PER_BATCH 200 KiB records, one lock hold each, until told to
# stop; it writes how many batches it appended to COUNT.
WRITER = r"""
import os, sys, time
from zotsink import append_records
out, w, stop, count, lock, size, per = sys.argv[1:8]
size, per = int(size), int(per)
b = 0
while not os.path.exists(stop) and b < 200:
    recs = []
    for k in range(per):
        head = f"{w}:{b}:{k}:".encode()
        recs.append(head + bytes([97 + (b + k) % 26]) * (size - len(head)))
    append_records(out, recs, lock=lock)
    b += 1
    time.sleep(0.015)  # pace the writer; nothing waits on this
with open(count, "w") as f:
    f.write(str(b))
"""


def _check_snapshot(data: bytes) -> dict[str, int]:
    """Assert every record is whole and every batch complete; batches seen per writer."""
    assert data == b"" or data.endswith(b"\n"), "the snapshot ends inside a record"
    batches: dict[tuple[str, int], set[int]] = {}
    for line in data.split(b"\n")[:-1]:
        assert len(line) == RECORD, f"a record of {len(line)} bytes"
        w, b, k, payload = line.split(b":", 3)
        fill = bytes([97 + (int(b) + int(k)) % 26])
        assert payload == fill * len(payload), "a record with foreign bytes inside"
        batches.setdefault((w.decode(), int(b)), set()).add(int(k))
    for key, ks in batches.items():
        assert ks == set(range(PER_BATCH)), f"batch {key} is only partly there"
    seen: dict[str, int] = {}
    for w in {w for w, _ in batches}:
        numbers = sorted(b for ww, b in batches if ww == w)
        assert numbers == list(range(len(numbers))), f"writer {w} has a gap"
        seen[w] = len(numbers)
    return seen


@pytest.mark.parametrize("lock", ["flock", "fcntl"])
def test_cat_never_shows_a_partial_batch(
    tmp_path: Path, lock: str, zotsink_cmd: list[str], child_env: Callable[..., dict]
) -> None:
    out = tmp_path / "out.txt"
    stop = tmp_path / "stop"
    env = child_env()
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                str(out),
                f"w{w}",
                str(stop),
                str(tmp_path / f"w{w}.count"),
                lock,
                str(RECORD),
                str(PER_BATCH),
            ],
            env=env,
        )
        for w in range(2)
    ]
    snapshots: list[dict[str, int]] = []
    try:
        deadline = time.monotonic() + 30
        while not out.exists() or out.stat().st_size == 0:  # the first batch is down
            assert time.monotonic() < deadline, "no writer got going"
            time.sleep(0.005)
        while len(snapshots) < 5:  # a reader loop while the writers keep appending
            r = subprocess.run(
                [*zotsink_cmd, "cat", "--lock", lock, str(out)],
                capture_output=True,
                env=env,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            snapshots.append(_check_snapshot(r.stdout))
    finally:
        stop.touch()
        codes = [p.wait(60) for p in writers]
    assert codes == [0, 0]
    totals = {f"w{w}": int((tmp_path / f"w{w}.count").read_text()) for w in range(2)}
    r = subprocess.run([*zotsink_cmd, "cat", str(out)], capture_output=True, env=env, timeout=60)
    assert r.stdout == out.read_bytes()
    assert _check_snapshot(r.stdout) == totals
    # the snapshots were taken while the writers were appending
    assert sum(snapshots[0].values()) < sum(totals.values())


def test_cat_copies_the_bytes_as_they_are(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "o.txt"
    data = b"caf\xe9\r\n\n" + b"x" * 300_000 + b"\ntorn"
    out.write_bytes(data)
    r = zotsink("cat", out)
    assert (r.returncode, r.stdout, r.stderr) == (0, data, b"")


def test_cat_of_a_missing_file(tmp_path: Path, zotsink: Run) -> None:
    r = zotsink("cat", tmp_path / "nope.tsv")
    assert r.returncode == 1 and b"nope.tsv does not exist" in r.stderr
    assert b"Traceback" not in r.stderr and r.stdout == b""


def test_cat_of_a_directory(tmp_path: Path, zotsink: Run) -> None:
    r = zotsink("cat", tmp_path)
    assert r.returncode == 1 and b"is a directory, not a zotsink output" in r.stderr


def test_cat_waits_for_a_writer_then_times_out(tmp_path: Path, zotsink: Run) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"a\n")
    with open(out, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)  # a writer in the middle of a batch
        r = zotsink("cat", "--timeout", "0.2", out)
    assert r.returncode == 75 and b"still held" in r.stderr and r.stdout == b""


def test_cat_into_a_reader_that_leaves(tmp_path: Path, zotsink_cmd: list[str]) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"line\n" * 2_000_000)  # far more than a pipe holds
    p = subprocess.Popen(
        [*zotsink_cmd, "cat", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.read(10) == b"line\nline\n"
    p.stdout.close()  # `zotsink cat out | head -2`
    err = p.stderr.read()
    assert p.wait(60) == 0 and b"Traceback" not in err and err == b""


def test_a_piece_committed_while_the_view_is_read_waits_for_the_next_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run commits a task between the view's snapshot of OUT and its read of the ledger:
    # that task's piece lies beyond the snapshot, which is no sign of OUT cut short
    import warnings

    import zotsink._read as read
    from zotsink import read_records, run_tasks

    tasks, out = tmp_path / "tasks.txt", tmp_path / "out.txt"
    tasks.write_text("a\n")
    run_tasks(tasks, out, ["echo"])
    real = read.Snapshot

    def late(*args: object, **kwargs: object) -> object:
        # the view opens the ledger only now, after its snapshot of OUT
        with open(tasks, "a") as f:
            f.write("b\n")
        run_tasks(tasks, out, ["echo"])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(read, "Snapshot", late)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(read_records(out)) == [["a"]]
    monkeypatch.undo()
    assert list(read_records(out)) == [["a"], ["b"]]
