"""``zotsink collect`` of an archive that pack writes to: text members become rows."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from zotsink import append_members

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def test_collect_reads_a_pack_archive_without_end_blocks(tmp_path: Path, zotsink: Run) -> None:
    archive = tmp_path / "res.tar"
    append_members(archive, {"t1/r.txt": b"filename:a.jpg min:3 max:9\n", "t1/p.png": b"\x89"})
    append_members(archive, {"t2/r.txt": b"filename:b.jpg min:4 max:8"})
    r = zotsink("collect", archive, "-o", "out.tsv", "--input", "kv")
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "out.tsv").read_text().splitlines()
    assert rows == [
        "source\tfilename\tmin\tmax",
        "t1/r.txt\ta.jpg\t3\t9",
        "t2/r.txt\tb.jpg\t4\t8",
    ]


def test_a_tar_cut_short_without_an_index_is_still_refused(tmp_path: Path, zotsink: Run) -> None:
    archive = tmp_path / "res.tar"
    append_members(archive, {"t1/r.txt": b"filename:a.jpg\n"})
    (tmp_path / "res.tar.idx").unlink()
    r = zotsink("collect", archive, "-o", "out.tsv", "--input", "kv")
    assert b"cut short" in r.stderr
