"""What pack writes, read by the tools people use: webdataset, ratarmount; and a torn tail
left by a killed writer with no writer after it (verify, verify --repair)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zotsink._pack.index import index_path
from zotsink._pack.members import list_members, read_member
from zotsink._pack.verify import verify_archive

WORKERS = Path(__file__).with_name("pack_workers.py")


def _run_samples(
    archive: Path, child_env: Callable[..., dict[str, str]], procs: int, n: int
) -> None:
    cmds = [
        subprocess.Popen(
            [sys.executable, str(WORKERS), "samples", str(archive), str(i), str(n)],
            env=child_env(),
            stderr=subprocess.PIPE,
        )
        for i in range(procs)
    ]
    for p in cmds:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()


def _body(key: str) -> bytes:
    n = int(key.rsplit("_", 1)[1])
    return hashlib.sha256(key.encode()).digest() * (n + 1)


def test_webdataset_reads_whole_samples(
    tmp_path: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    wds = pytest.importorskip("webdataset")
    archive = tmp_path / "shard.tar"
    _run_samples(archive, child_env, procs=4, n=25)
    seen = {}
    for sample in wds.WebDataset(str(archive), shardshuffle=False):
        key = sample["__key__"]
        assert key not in seen  # each sample once, never split into two
        seen[key] = sample
    assert len(seen) == 100
    for key, sample in seen.items():
        assert sample["png"] == _body(key)
        assert json.loads(sample["json"]) == {"key": key}


def test_ratarmount_lists_the_members(
    tmp_path: Path, child_env: Callable[..., dict[str, str]]
) -> None:
    factory = pytest.importorskip("ratarmountcore.mountsource.factory")
    archive = tmp_path / "shard.tar"
    _run_samples(archive, child_env, procs=2, n=10)
    source = factory.open_mount_source(str(archive), writeIndex=False, indexFilePath=":memory:")
    names = sorted(source.list("/"))
    assert names == sorted(
        f"s{i}_{n:04d}.{ext}" for i in range(2) for n in range(10) for ext in ("png", "json")
    )
    info = source.lookup("/s1_0003.png")
    with source.open(info) as f:
        assert f.read() == _body("s1_0003")


def test_torn_tail_without_a_later_writer(
    tmp_path: Path, reap: Callable[..., Any], child_env: Callable[..., dict[str, str]]
) -> None:
    archive = tmp_path / "out.tar"
    _run_samples(archive, child_env, procs=1, n=3)
    whole = archive.stat().st_size
    before = archive.read_bytes()
    ready_r, ready_w = os.pipe()
    victim = reap(
        subprocess.Popen(
            [sys.executable, str(WORKERS), "victim", str(archive), str(ready_w)],
            env=child_env(),
            pass_fds=(ready_w,),
        )
    )
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"!"
    os.close(ready_r)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert archive.stat().st_size > whole

    report = verify_archive(archive)
    assert not report.ok
    assert any(
        p.startswith(f"offset {whole}: torn member 'victim/big.bin'") for p in report.problems
    )
    assert (report.members, report.indexed) == (6, 6)

    fixed = verify_archive(archive, repair=True)
    assert fixed.ok, fixed.problems
    assert any(f"at offset {whole}" in r for r in fixed.repaired)
    assert archive.read_bytes() == before  # cut back to exactly the whole members

    rows = list_members(archive)
    Path(index_path(str(archive))).unlink()
    missing = verify_archive(archive)
    assert missing.problems == [
        f"{index_path(str(archive))} is missing: `zotsink verify --repair` rebuilds it"
    ]
    rebuilt = verify_archive(archive, repair=True)
    assert rebuilt.ok and rebuilt.indexed == 6
    assert list_members(archive) == rows  # provenance too, from each member's PAX comment
    assert read_member(archive, "s0_0002.png") == _body("s0_0002")
