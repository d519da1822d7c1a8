"""pack under contention: 16 writer processes and one writer killed mid-member.

Afterwards the archive must list exactly the acknowledged members in GNU tar, bsdtar and
Python's tarfile, extract to the original bytes, and pass ``verify``; the killed writer's
torn member must be gone (cut by the next writer under the lock).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zotsink._pack.verify import verify_archive

WORKERS = Path(__file__).with_name("pack_workers.py")
WRITERS = 16
CALLS = 200


def _start(
    reap: Callable[..., Any], child_env: Callable[..., dict[str, str]], *args: object, **kw: Any
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(WORKERS), *(str(a) for a in args)]
    return reap(
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), **kw)
    )


def _listing(cmd: list[str]) -> list[str]:
    out = subprocess.run(cmd, capture_output=True, check=False)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stderr == b"", out.stderr.decode()  # no warning either
    return out.stdout.decode().splitlines()


@pytest.mark.skipif(shutil.which("bsdtar") is None, reason="bsdtar (libarchive-tools) missing")
def test_sixteen_writers_and_one_killed_mid_member(
    tmp_path: Path, reap: Callable[..., Any], child_env: Callable[..., dict[str, str]]
) -> None:
    archive = tmp_path / "out.tar"
    writers = [
        _start(reap, child_env, "writer", archive, i, CALLS, 1000 + i) for i in range(WRITERS)
    ]
    # Once the first writer has acknowledged a member the archive is in full use: then the
    # victim starts, and tells (through a pipe) when it is halfway through its member.
    first = writers[0].stdout.readline()  # type: ignore[union-attr]
    assert first, writers[0].stderr.read()  # type: ignore[union-attr]
    ready_r, ready_w = os.pipe()
    victim = _start(reap, child_env, "victim", archive, ready_w, pass_fds=(ready_w,))
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"!", victim.stderr.read()  # type: ignore[union-attr]
    os.close(ready_r)
    torn_at = archive.stat().st_size  # the victim holds the lock: nothing else writes now
    victim.send_signal(signal.SIGKILL)
    victim.wait()

    acked: dict[str, str] = {}
    lines = [first]
    stderr = b""
    for w in writers:
        # read() through the buffered pipe, not communicate(): writer 0's buffer may hold
        # lines already read from the pipe by readline() above. stderr carries a few lines.
        lines.extend(w.stdout.read().splitlines())  # type: ignore[union-attr]
        err = w.stderr.read()  # type: ignore[union-attr]
        assert w.wait() == 0, err.decode()
        stderr += err
    for line in lines:
        name, digest = line.decode().split()
        acked[name] = digest
    assert len(acked) == WRITERS * CALLS * 2

    # the next writer cut the victim's torn member, and said so
    assert b"a writer died mid-append: torn member 'victim/big.bin'" in stderr
    assert archive.stat().st_size > torn_at

    expected = sorted(acked)
    assert sorted(_listing(["tar", "tf", str(archive)])) == expected
    assert len(_listing(["tar", "tvf", str(archive)])) == len(expected)
    assert sorted(_listing(["bsdtar", "-tf", str(archive)])) == expected
    assert len(_listing(["bsdtar", "-tvf", str(archive)])) == len(expected)

    with tarfile.open(archive) as tf:
        members = tf.getmembers()
        assert sorted(m.name for m in members) == expected
        for m in members[:50]:
            data = tf.extractfile(m).read()  # type: ignore[union-attr]
            assert hashlib.sha256(data).hexdigest() == acked[m.name]

    dest = tmp_path / "x"
    dest.mkdir()
    subprocess.run(["tar", "xf", str(archive), "-C", str(dest)], check=True)
    for name, digest in acked.items():
        assert hashlib.sha256((dest / name).read_bytes()).hexdigest() == digest, name
    assert not (dest / "victim").exists()

    report = verify_archive(archive)
    assert report.problems == []
    assert (report.members, report.indexed) == (len(expected), len(expected))
