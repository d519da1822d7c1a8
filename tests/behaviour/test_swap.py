"""OUT swapped underneath a streaming writer: later records follow the name, not the inode.

The writer holds OUT open between batches. Under the lock it checks that OUT's path still
names that file; when it does not (renamed away, replaced by ``verify --repair``, removed),
it opens the path again, so no record goes into a file nobody will read.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen) -> None:
    end = time.monotonic() + 30
    while len(lines_of(path)) < n:
        if proc.poll() is not None:
            pytest.fail(f"zotsink exited ({proc.returncode}): {proc.stderr.read()!r}")
        if time.monotonic() > end:
            pytest.fail(f"{path} never reached {n} lines")
        time.sleep(0.005)


def batch(tag: str, n: int = 500) -> list[bytes]:
    return [f"{tag}-{i:04d}\n".encode() for i in range(n)]


@pytest.mark.parametrize("how", ["rename-and-recreate", "replace-by-rename", "remove"])
def test_records_after_a_swap_land_in_the_new_out(
    tmp_path: Path, zotsink_cmd: list[str], child_env, reap, how: str
) -> None:
    out = tmp_path / "out.txt"
    proc = reap(
        subprocess.Popen(
            [*zotsink_cmd, "--flush-interval", "0.01", str(out)],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
    )
    before = batch("before")
    proc.stdin.write(b"".join(before))
    proc.stdin.flush()
    wait_for_lines(out, len(before), proc)  # written, and the writer still holds OUT open

    old = tmp_path / "out.old"
    if how == "rename-and-recreate":
        os.rename(out, old)
        out.write_bytes(b"fresh\n")
        head = [b"fresh\n"]
    elif how == "replace-by-rename":  # what verify --repair does
        tmp = tmp_path / "out.txt.repair"
        tmp.write_bytes(b"repaired\n")
        os.link(out, old)
        os.rename(tmp, out)
        head = [b"repaired\n"]
    else:
        os.link(out, old)
        os.remove(out)
        head = []

    after = batch("after")
    proc.stdin.write(b"".join(after))
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert proc.stderr.read() == b""
    assert lines_of(out) == head + after
    assert lines_of(old) == before
