"""A directory under SOURCE swapped for a symlink while collect runs: nothing outside SOURCE
is read, and nothing outside it is removed.

The swap happens at a known point of the run (collect's progress callback), with the reader
in-process so that the walk is exactly where the callback sees it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

import zotsink._collect.read as collect_read
from zotsink import collect

N = 600  # more than one progress step (512 files): the swap lands inside sub/


def tree(root: Path, text: str, age: float = 0.0) -> Path:
    root.mkdir(parents=True)
    t = time.time() - age
    for i in range(N):
        p = root / f"f{i:03d}"
        p.write_text(text.format(i=i))
        if age:
            os.utime(p, (t, t))
    return root


def rows(path: Path) -> list[list[str]]:
    return [ln.split("\t") for ln in path.read_text().splitlines()]


def test_a_directory_swapped_for_a_symlink_mid_walk_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collect_read, "FORK", False)
    d = tmp_path / "results"
    tree(d / "sub", "x:{i}")
    outside = tree(tmp_path / "private", "stolen:{i}")
    swapped = []

    def swap(phase: str, done: int, total: int) -> None:
        if phase == "read" and done > 0 and not swapped:  # inside sub/, files left to read
            os.rename(d / "sub", d / "moved")
            os.symlink(outside, d / "sub")
            swapped.append(done)

    rep = collect([d], tmp_path / "o.tsv", progress=swap)
    assert swapped and 0 < swapped[0] < N
    table = rows(tmp_path / "o.tsv")
    assert table[0] == ["source", "x"]  # no "stolen" column: nothing came from outside
    assert [r[1] for r in table[1:]] == [str(i) for i in range(N)]
    assert rep.files == N and rep.skipped == []


def test_remove_sources_never_removes_through_a_swapped_directory(tmp_path: Path) -> None:
    d = tmp_path / "results"
    tree(d / "sub", "x:{i}", age=7200)
    outside = tmp_path / "private"
    shutil.copytree(d / "sub", outside)  # the same bytes, sizes and mtimes
    before = sorted(os.listdir(outside))

    def swap(phase: str, done: int, total: int) -> None:
        if phase == "write" and not (d / "sub").is_symlink():  # OUT written; removal next
            os.rename(d / "sub", d / "moved")
            os.symlink(outside, d / "sub")

    rep = collect([d], tmp_path / "o.tsv", remove_sources=True, yes=True, progress=swap)
    assert sorted(os.listdir(outside)) == before  # nothing outside SOURCE was removed
    assert len(os.listdir(d / "moved")) == N  # and what moved away is not reached either
    assert rep.removed == 0 and len(rep.kept) == N
    assert {why for _name, why in rep.kept} == {
        "kept: a directory on its path was replaced since it was read"
    }
