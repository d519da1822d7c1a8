"""collect, end to end, where records used to be lost or misplaced.

- ``--remove-sources`` removes only files old enough (``--min-age``), not empty, and still
  holding exactly the bytes that were collected;
- a second run of the same collect into the same OUT adds no row (exact and key modes);
- a file or archive member over ``--max-file-size`` is skipped with a reason, without being
  read into memory (peak RSS measured from ``wait4``);
- an output ending collect cannot honour is refused before anything is read.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from trees import make_tree as files

from zotsink import collect

ZOTSINK = [sys.executable, "-m", "zotsink"]
HOUR = 3600


def cli(*args: str | os.PathLike[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess:
    r = subprocess.run([*ZOTSINK, "collect", *map(str, args)], cwd=cwd, capture_output=True,
                       **kw)  # type: ignore[call-overload]  # fmt: skip
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    return r


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


# -- --remove-sources: old, whole and unchanged files only --------------------------------
def test_remove_sources_never_removes_an_empty_file(tmp_path: Path) -> None:
    # `./analyse > results/t4.txt`: the shell created the file; the task has not written yet
    d = files(tmp_path / "results", {"t1.txt": "x:1", "t4.txt": ""}, age=2 * HOUR)
    r = cli(d, "-o", "out.tsv", "--remove-sources", "--yes", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(d)) == ["t4.txt"]
    assert lines(tmp_path / "out.tsv") == ["source\tx", "t1.txt\t1"]
    assert b"t4.txt: kept: empty" in r.stderr


def test_remove_sources_keeps_a_young_file_until_a_later_run(tmp_path: Path) -> None:
    d = files(tmp_path / "results", {"t1.txt": "x:1"}, age=2 * HOUR)
    files(d, {"t4.txt": "x:4"})  # just written: its task may still be writing it
    r = cli(d, "-o", "out.tsv", "--remove-sources", "--yes", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(d)) == ["t4.txt"]
    assert b"t4.txt: kept: modified " in r.stderr
    assert b" s ago, within --min-age 3600 s: its task may still be writing it" in r.stderr
    # collected all the same: the table is whole
    assert lines(tmp_path / "out.tsv") == ["source\tx", "t1.txt\t1", "t4.txt\t4"]
    # an hour later, the same command: no row twice, and now the file goes
    old = time.time() - 2 * HOUR
    os.utime(d / "t4.txt", (old, old))
    r = cli(d, "-o", "out.tsv", "--remove-sources", "--yes", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert os.listdir(d) == []
    assert lines(tmp_path / "out.tsv") == ["source\tx", "t1.txt\t1", "t4.txt\t4"]


def test_min_age_zero_removes_fresh_files(tmp_path: Path) -> None:
    d = files(tmp_path / "results", {"t1.txt": "x:1", "t2.txt": "x:2"})
    r = cli(d, "-o", "out.tsv", "--remove-sources", "--yes", "--min-age", "0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert os.listdir(d) == []
    assert b"removed 2 collected files; kept 0" in r.stderr


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e300", "soon"])
def test_min_age_must_be_a_sane_number_of_seconds(tmp_path: Path, value: str) -> None:
    d = files(tmp_path / "results", {"t1.txt": "x:1"}, age=2 * HOUR)
    r = cli(d, "-o", "out.tsv", "--remove-sources", "--yes", "--min-age", value, cwd=tmp_path)
    assert r.returncode == 2
    assert b"--min-age" in r.stderr and b"seconds" in r.stderr
    assert not (tmp_path / "out.tsv").exists() and os.listdir(d) == ["t1.txt"]


def test_a_file_rewritten_with_the_same_size_and_mtime_is_not_removed(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a": "x:1", "b": "x:2"}, age=2 * HOUR)
    st = os.stat(d / "b")

    def meddle(phase: str, done: int, total: int) -> None:
        if phase == "write":  # OUT is written; the removal comes next
            (d / "b").write_text("x:9")  # same size ...
            os.utime(d / "b", ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and the same mtime

    rep = collect([d], tmp_path / "o.tsv", remove_sources=True, yes=True, progress=meddle)
    assert sorted(os.listdir(d)) == ["b"]
    assert (d / "b").read_text() == "x:9"
    assert rep.kept == [("b", "kept: changed since it was read")]


# -- the same collect twice ---------------------------------------------------------------
def test_the_same_collect_twice_adds_no_row(tmp_path: Path) -> None:
    files(tmp_path / "d", {"a": "x:1", "b": "x:2", "c": "x:3"})
    assert cli("d", "-o", "out.tsv", cwd=tmp_path).returncode == 0
    first = (tmp_path / "out.tsv").read_bytes()
    r = cli("d", "-o", "out.tsv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.tsv").read_bytes() == first
    assert b"3 files, 0 records, 3 duplicates dropped" in r.stderr
    # a new file in between: only its row is added
    files(tmp_path / "d", {"d": "x:4"})
    r = cli("d", "-o", "out.tsv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert lines(tmp_path / "out.tsv") == ["source\tx", "a\t1", "b\t2", "c\t3", "d\t4"]


def test_the_same_keyed_collect_twice_adds_no_row_and_keeps_out(tmp_path: Path) -> None:
    files(tmp_path / "d", {"a": "k:1 v:a", "b": "k:2 v:b"})
    args = ("d", "-o", "out.tsv", "--dedup", "key", "--key", "k")
    assert cli(*args, cwd=tmp_path).returncode == 0
    files(tmp_path / "d", {"b": "k:2 v:changed", "c": "k:3 v:c"})
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # OUT's record for k=2 cannot be taken back: the new one is a counted conflict
    assert lines(tmp_path / "out.tsv") == ["source\tk\tv", "a\t1\ta", "b\t2\tb", "c\t3\tc"]
    assert b"3 files, 1 record, 1 duplicate dropped, 1 key conflict" in r.stderr


# -- big files and archive members --------------------------------------------------------
# Starts argv and prints its exit code and peak RSS (KiB). Linux counts into a process's
# ru_maxrss the memory of the process it was forked from, up to its exec: started straight
# from a pytest worker that has grown (pandas, pyarrow in earlier tests), zotsink would be
# charged with the worker's size. This small launcher is what zotsink is forked from.
_LAUNCH = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
    "_pid, status, ru = os.wait4(p.pid, 0)\n"
    "print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)\n"
)


def _peak_rss_mb(argv: list[str], cwd: Path) -> tuple[int, float, bytes]:
    with open(cwd / "stderr.txt", "wb") as err:
        out = subprocess.run(
            [sys.executable, "-c", _LAUNCH, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=err,
            check=True,
        )  # fmt: skip
    code, maxrss_kib = out.stdout.split()
    return int(code), int(maxrss_kib) / 1024, (cwd / "stderr.txt").read_bytes()


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def test_an_archive_member_over_the_limit_is_skipped_with_flat_memory(tmp_path: Path) -> None:
    big = 512 << 20
    with tarfile.open(tmp_path / "r.tar.gz", "w:gz", compresslevel=1) as t:
        for name, data in (("a.txt", b"x:1"), ("c.txt", b"x:3")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        ti = tarfile.TarInfo("b.txt")
        ti.size = big
        t.addfile(ti, io.BufferedReader(_Zeros(big)))
    code, rss, err = _peak_rss_mb([*ZOTSINK, "collect", "r.tar.gz", "-o", "o.tsv"], tmp_path)
    assert code == 0, err
    assert lines(tmp_path / "o.tsv") == ["source\tx", "a.txt\t1", "c.txt\t3"]
    assert b"skipped b.txt: 512.0 MiB, over --max-file-size 16 MiB" in err
    assert b"1 skipped" in err
    assert rss < 120, f"peak RSS {rss:.0f} MB for a 512 MiB member"


def test_a_big_file_is_skipped_unread_and_strict_refuses_it(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a": "x:1"})
    with open(d / "huge", "wb") as f:
        f.truncate(1 << 30)  # sparse: costs no disk, but 1 GiB to whoever reads it
    code, rss, err = _peak_rss_mb([*ZOTSINK, "collect", "d", "-o", "o.tsv"], tmp_path)
    assert code == 0, err
    assert b"skipped huge: 1.0 GiB, over --max-file-size 16 MiB" in err
    assert lines(tmp_path / "o.tsv") == ["source\tx", "a\t1"]
    assert rss < 120, f"peak RSS {rss:.0f} MB"
    r = cli("d", "-o", "p.tsv", "--strict", cwd=tmp_path)
    assert r.returncode == 1 and b"huge: 1.0 GiB, over --max-file-size 16 MiB" in r.stderr
    assert not (tmp_path / "p.tsv").exists()


def test_max_file_size_lets_a_bigger_file_in(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "big.tsv").write_text("i\tsq\n" + "".join(f"{i}\t{i * i}\n" for i in range(200_000)))
    assert (d / "big.tsv").stat().st_size > 2 << 20
    r = cli("d", "-o", "o.tsv", "--max-file-size", "1M", cwd=tmp_path)
    assert r.returncode == 0 and b"over --max-file-size 1 MiB" in r.stderr
    r = cli("d", "-o", "p.tsv", "--max-file-size", "8M", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(lines(tmp_path / "p.tsv")) == 200_001
    r = cli("d", "-o", "q.tsv", "--max-file-size", "lots", cwd=tmp_path)
    assert r.returncode == 2 and b"--max-file-size" in r.stderr


# -- outputs that cannot be honoured --------------------------------------------------------
@pytest.mark.parametrize("name", ["out.json", "out.xlsx", "out.tsv.gz", "out.feather"])
def test_an_output_ending_collect_cannot_write_is_refused(tmp_path: Path, name: str) -> None:
    files(tmp_path / "d", {"a": "x:1"})
    r = cli("d", "-o", name, cwd=tmp_path)
    assert r.returncode == 2
    assert b"does not write" in r.stderr and b".jsonl or .parquet" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["d"]
