"""The options every record writer shares are checked once (zotsink._core.options), so every
door refuses the same values with the same words, before anything is read or written."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import zotsink
from zotsink import UsageError
from zotsink._core.options import (
    MAX_BATCH_BYTES,
    MAX_FLUSH_INTERVAL,
    MAX_TIMEOUT,
    write_options,
)

BAD: list[tuple[dict[str, Any], str]] = [
    ({"timeout": float("inf")}, "timeout (--timeout) must be a number of seconds from 0 to"),
    ({"timeout": float("nan")}, "timeout (--timeout) must be a number of seconds from 0 to"),
    ({"timeout": -1.0}, "timeout (--timeout) must be a number of seconds from 0 to"),
    ({"timeout": MAX_TIMEOUT + 1}, "timeout (--timeout) must be a number of seconds"),
    ({"timeout": "5"}, "timeout (--timeout) must be a number of seconds"),
    ({"batch_bytes": 0}, "batch_bytes (--batch-bytes) must be a whole number from 1 to"),
    ({"batch_bytes": MAX_BATCH_BYTES + 1}, "batch_bytes (--batch-bytes) must be a whole"),
    ({"batch_bytes": 1.5}, "batch_bytes (--batch-bytes) must be a whole number"),
    ({"batch_bytes": True}, "batch_bytes (--batch-bytes) must be a whole number"),
    ({"flush_interval": float("nan")}, "flush_interval (--flush-interval) must be a number"),
    ({"flush_interval": float("inf")}, "flush_interval (--flush-interval) must be a number"),
    ({"flush_interval": -0.001}, "flush_interval (--flush-interval) must be a number"),
    ({"flush_interval": MAX_FLUSH_INTERVAL * 2}, "flush_interval (--flush-interval) must"),
    ({"lock": "flok"}, "lock (--lock) must be one of auto, flock, fcntl, lockfile; not 'flok'"),
    ({"sync": "always"}, "sync (--sync) must be one of auto, fsync, none; not 'always'"),
    ({"kv": ";"}, "kv (--kv) separator must be ':' or '=', not ';'"),
    ({"format": "json"}, "format (--format) must be one of auto, tsv, csv, lines; not 'json'"),
    ({"stamp": "tiem"}, "unknown --stamp field 'tiem'"),
]


def _stream(out: Path, **kw: Any) -> None:
    zotsink.append_stream(out, None, data=b"x\n", **kw)


def _run(out: Path, **kw: Any) -> None:
    tasks = out.parent / "tasks.txt"
    tasks.write_text("echo x\n")
    zotsink.run_tasks(tasks, out, shell=True, index=None, env={}, **kw)


def _sink(out: Path, **kw: Any) -> None:
    with zotsink.Sink(out, **kw) as s:
        s.write("x")


def _record(out: Path, **kw: Any) -> None:
    zotsink.append_record(out, "x", **kw)


def _collect(out: Path, **kw: Any) -> None:
    src = out.parent / "src"
    src.mkdir(exist_ok=True)
    (src / "a.txt").write_text("k: 1\n")
    zotsink.collect([src], out, **kw)


def _member(out: Path, **kw: Any) -> None:
    zotsink.append_member(out, "m", b"x", **kw)


def _members(out: Path, **kw: Any) -> None:
    zotsink.append_members(out, {"m": b"x"}, **kw)


def _pack(out: Path, **kw: Any) -> None:
    src = out.parent / "m.bin"
    src.write_bytes(b"x")
    zotsink.pack_files(out, [str(src)], **kw)


DOORS: dict[str, tuple[Callable[..., None], set[str]]] = {
    "append_stream": (
        _stream,
        {"format", "kv", "stamp", "lock", "sync", "timeout", "batch_bytes", "flush_interval"},
    ),
    "run_tasks": (
        _run,
        {"format", "kv", "stamp", "lock", "sync", "timeout", "batch_bytes", "flush_interval"},
    ),
    "Sink": (
        _sink,
        {"format", "stamp", "lock", "sync", "timeout", "batch_bytes", "flush_interval"},
    ),
    "append_record": (_record, {"format", "stamp", "lock", "sync", "timeout"}),
    "collect": (_collect, {"lock", "sync", "timeout", "batch_bytes"}),
    "append_member": (_member, {"lock", "sync", "timeout"}),
    "append_members": (_members, {"lock", "sync", "timeout"}),
    "pack_files": (_pack, {"lock", "sync", "timeout"}),
}


CASES = [
    pytest.param(door, bad, words, id=f"{door}-{next(iter(bad))}={next(iter(bad.values()))!r}")
    for door, (_, takes) in sorted(DOORS.items())
    for bad, words in BAD
    if set(bad) <= takes
]


@pytest.mark.parametrize(("door", "bad", "words"), CASES)
def test_every_door_refuses_the_same_values_with_the_same_words(
    tmp_path: Path, door: str, bad: dict[str, Any], words: str
) -> None:
    call, _ = DOORS[door]
    out = tmp_path / "out.tsv"
    with pytest.raises(UsageError) as e:
        call(out, **bad)
    assert words in e.value.message
    # refused before anything was written: no OUT, no side file
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out.tsv")) == []


def test_the_extremes_of_each_range_are_taken() -> None:
    low = write_options(timeout=0, batch_bytes=1, flush_interval=0, kv=":")
    assert (low.timeout, low.batch_bytes, low.flush_interval) == (0.0, 1, 0.0)
    high = write_options(
        timeout=MAX_TIMEOUT, batch_bytes=MAX_BATCH_BYTES, flush_interval=MAX_FLUSH_INTERVAL
    )
    assert (high.timeout, high.flush_interval) == (MAX_TIMEOUT, MAX_FLUSH_INTERVAL)


def test_stamp_values_mean_the_same_everywhere() -> None:
    assert write_options(stamp=None).stamp == ()
    assert write_options(stamp=()).stamp == ()
    assert write_options(stamp=[]).stamp == ()
    assert write_options(stamp=False).stamp == ()
    assert write_options(stamp=True).stamp == ("time", "host", "job", "task")
    assert write_options(stamp="").stamp == ("time", "host", "job", "task")  # bare --stamp
    assert write_options(stamp="host,pid").stamp == ("host", "pid")
    assert write_options(format="auto").format is None


def test_run_options_are_worded_as_the_shared_ones(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    for kw, words in (
        ({"retries": -1}, "retries (--retries) must be a whole number >= 0, not -1"),
        ({"grace": float("nan")}, "grace (--grace) must be a number of seconds from 0 to"),
        ({"task_timeout": 0}, "task_timeout (--task-timeout) must be more than 0 seconds"),
    ):
        with pytest.raises(UsageError) as e:
            _run(out, **kw)
        assert words in e.value.message
    assert not os.path.exists(out)


@pytest.mark.parametrize(
    "bad",
    [
        {"timeout": float("nan")},
        {"timeout": float("inf")},
        {"timeout": -1.0},
        {"sync": "always"},
        {"lock": "posix"},
    ],
    ids=repr,
)
def test_pack_refuses_what_append_record_refuses_in_the_same_words(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    with pytest.raises(Exception) as record:
        zotsink.append_record(tmp_path / "out.txt", "x", **bad)
    with pytest.raises(Exception) as member:
        zotsink.append_member(tmp_path / "a.tar", "m", b"x", **bad)
    assert type(member.value) is type(record.value) is UsageError
    assert str(member.value) == str(record.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "bad", [("--timeout", "nan"), ("--timeout", "-1"), ("--sync", "always")], ids=" ".join
)
def test_zotsink_pack_exits_as_zotsink_append_does(tmp_path: Path, bad: tuple[str, str]) -> None:
    (tmp_path / "m.bin").write_bytes(b"x")

    def zotsink_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
        cmd = [sys.executable, "-m", "zotsink", *args, *bad]
        return subprocess.run(cmd, cwd=tmp_path, input=b"x\n", capture_output=True, timeout=60)

    append = zotsink_cli("append", "out.txt")
    pack = zotsink_cli("pack", "a.tar", "m.bin")
    assert append.returncode == pack.returncode == 2, (append.stderr, pack.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.bin"]
