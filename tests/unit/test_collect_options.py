"""collect's options: usage errors, headers, de-duplication, resume, tidying, progress."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from trees import make_tree as files

import zotsink._collect.spool as collect_spool
from zotsink import CollectReport, HeaderMismatch, UsageError, collect

ZOTSINK = [sys.executable, "-m", "zotsink"]


def rows(path: Path) -> list[list[str]]:
    text = path.read_text()
    assert text.endswith("\n")
    return [ln.split("\t") for ln in text.split("\n")[:-1]]


def cli(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess:
    r = subprocess.run([*ZOTSINK, "collect", *map(str, args)], cwd=cwd, capture_output=True)
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    return r


@pytest.mark.parametrize(
    "args,message",
    [
        (["--dedup", "key"], b"--dedup key needs --key COLS"),
        (["--key", "a"], b"--key is used by --dedup key: add --dedup key"),
        (["--keep", "last"], b"add --dedup key"),
        (["--remove-sources"], b"add --archive FILE.tar.gz"),
        (["--archive", "d.zip"], b"name it .tar, .tar.gz"),
        (["--name-pattern", "run_(\\d+"], b"not a valid regular expression"),
        (["--name-pattern", "run_\\d+"], b"needs named groups"),
        (["--skip-collected", "--source-column", ""], b"do not set it empty"),
        (["--dedup", "key", "--key", "nope"], b"--key column 'nope' is not a column"),
    ],
)
def test_usage_errors_exit_2_and_say_what_to_do(
    tmp_path: Path, args: list[str], message: bytes
) -> None:
    files(tmp_path / "d", {"a": "x:1"})
    r = cli("d", "-o", "o.tsv", *args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "o.tsv").exists()


def test_existing_archive_is_never_overwritten(tmp_path: Path) -> None:
    files(tmp_path / "d", {"a": "x:1"})
    (tmp_path / "a.tar").write_bytes(b"keep me")
    r = cli("d", "-o", "o.tsv", "--archive", "a.tar", cwd=tmp_path)
    assert r.returncode == 2 and b"exists already" in r.stderr
    assert (tmp_path / "a.tar").read_bytes() == b"keep me"


def test_a_field_named_like_the_source_column(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a": "source:camera x:1"})
    with pytest.raises(UsageError, match="--source-column NAME"):
        collect([d], tmp_path / "o.tsv")
    assert not (tmp_path / "o.tsv").exists()
    collect([d], tmp_path / "o.tsv", source_column="file")
    assert rows(tmp_path / "o.tsv") == [["file", "source", "x"], ["a", "camera", "1"]]
    collect([d], tmp_path / "p.tsv", source_column="")
    assert rows(tmp_path / "p.tsv") == [["source", "x"], ["camera", "1"]]


def test_header_must_match_an_existing_out(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a": "x:1 y:2"})
    out = tmp_path / "o.tsv"
    out.write_text("source\tx\tz\nold\t0\t0\n")
    r = cli(d, "-o", out, cwd=tmp_path)  # new field y: the header would have to change
    assert r.returncode == 1 and b"nothing was written" in r.stderr
    assert out.read_text() == "source\tx\tz\nold\t0\t0\n"
    out.write_text("job\tx\n")
    with pytest.raises(HeaderMismatch, match="choose another OUT"):
        collect([d], out)
    # an OUT whose columns include the files' fields takes them, in its own column order
    out.write_text("source\ty\tw\tx\nold\t0\t0\t0\n")
    rep = collect([d], out)
    assert rep.header == ("source", "y", "w", "x")
    assert rows(out)[-1] == ["a", "2", "", "1"]


def test_dedup_modes(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"1": "k:a v:1", "2": "k:a v:1", "3": "k:a v:2", "4": "v:9"})
    rep = collect([d], tmp_path / "exact.tsv")
    assert (rep.records, rep.duplicates, rep.conflicts) == (3, 1, 0)
    rep = collect([d], tmp_path / "none.tsv", dedup="none")
    assert (rep.records, rep.duplicates) == (4, 0)
    rep = collect([d], tmp_path / "first.tsv", dedup="key", key="k")
    assert (rep.records, rep.duplicates, rep.conflicts) == (2, 1, 1)
    assert rows(tmp_path / "first.tsv")[1:] == [["1", "a", "1"], ["4", "", "9"]]  # no key: kept
    for name, ns in (("1", 3), ("2", 1), ("3", 2)):
        os.utime(d / name, ns=(0, ns * 10**9))
    rep = collect([d], tmp_path / "last.tsv", dedup="key", key=["k"], keep="last")
    assert (rep.records, rep.duplicates, rep.conflicts) == (2, 1, 1)
    assert rows(tmp_path / "last.tsv")[1:] == [["1", "a", "1"], ["4", "", "9"]]  # newest: 1
    os.utime(d / "3", ns=(0, 5 * 10**9))
    collect([d], tmp_path / "last2.tsv", dedup="key", key="k", keep="last")
    assert rows(tmp_path / "last2.tsv")[1:] == [["3", "a", "2"], ["4", "", "9"]]
    os.utime(d / "2", ns=(0, 5 * 10**9))  # same mtime as 3: the later path wins
    collect([d], tmp_path / "last3.tsv", dedup="key", key="k", keep="last")
    assert rows(tmp_path / "last3.tsv")[1:] == [["3", "a", "2"], ["4", "", "9"]]


def test_name_pattern_groups_can_be_keys_and_unmatched_names_are_counted(
    tmp_path: Path,
) -> None:
    d = files(tmp_path / "d", {"run_1.dat": "v:1", "run_1b.dat": "v:2", "other.dat": "v:3"})
    rep = collect([d], tmp_path / "o.tsv", name_pattern=r"^run_(?P<run>\d+)", dedup="key",
                  key="run")  # fmt: skip
    assert rep.unmatched == 1 and rep.conflicts == 1
    assert rows(tmp_path / "o.tsv") == [
        ["source", "run", "v"], ["other.dat", "", "3"], ["run_1.dat", "1", "1"],
    ]  # fmt: skip


@pytest.mark.parametrize("dedup", ["exact", "none", "key"])
def test_resume_after_a_cut_at_a_row_boundary(tmp_path: Path, dedup: str) -> None:
    d = files(tmp_path / "d", {f"f{i:02d}": f"k:{i % 7} v:{i}\nk:x v:{i}" for i in range(30)})
    key = {"key": "k"} if dedup == "key" else {}
    out = tmp_path / "o.tsv"
    collect([d], out, dedup=dedup, **key)
    whole = out.read_bytes()
    lines = whole.split(b"\n")
    for cut in (3, 4, 17):  # after a whole file, in the middle of one, later
        out.write_bytes(b"\n".join(lines[: min(cut, len(lines) - 1)]) + b"\n")
        rep = collect([d], out, dedup=dedup, skip_collected=True, **key)
        assert out.read_bytes() == whole, (dedup, cut)
        assert rep.notes == []


def test_remove_sources_with_yes_keeps_key_losers(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a": "k:1 v:a", "b": "k:1 v:b", "c": "k:2 v:c", "d": "k:2 v:c"})
    rep = collect([d], tmp_path / "o.tsv", dedup="key", key="k", remove_sources=True, yes=True,
                  min_age=0)  # fmt: skip
    assert sorted(os.listdir(d)) == ["b"]  # a record of b lost to a: it is not in OUT
    assert rep.removed == 3 and rep.kept == [
        ("b", "kept: a record lost a key conflict and is not in OUT")
    ]


def test_a_file_changed_after_it_was_read_is_neither_archived_nor_removed(
    tmp_path: Path,
) -> None:
    d = files(tmp_path / "d", {"a": "x:1", "b": "x:2"})

    def meddle(phase: str, done: int, total: int) -> None:
        if phase == "write":  # OUT is written; the archive comes next
            (d / "b").write_text("x:3 and more")

    rep = collect([d], tmp_path / "o.tsv", archive=tmp_path / "a.tar", remove_sources=True,
                  min_age=0,
                  progress=meddle)  # fmt: skip
    assert sorted(os.listdir(d)) == ["b"]
    assert rep.kept == [("b", "not archived: changed since it was read")]
    with tarfile.open(tmp_path / "a.tar") as t:
        assert t.getnames() == ["a"]


def test_spool_on_disk_gives_the_same_table_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = files(tmp_path / "d", {f"c{i % 3}/f{i:03d}": f"i:{i} sq:{i * i}" for i in range(300)})
    collect([d], tmp_path / "mem.tsv")
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    monkeypatch.setattr(collect_spool, "MEM_LIMIT", 64)
    collect([d], tmp_path / "disk.tsv", temp_dir=str(spool_dir), dedup="key", key="i",
            keep="last")  # fmt: skip
    assert (tmp_path / "disk.tsv").read_bytes() == (tmp_path / "mem.tsv").read_bytes()
    assert os.listdir(spool_dir) == []


def test_lock_timeout_spills_the_batch_and_says_how_to_finish(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {f"f{i}": f"i:{i}" for i in range(5)})
    out = tmp_path / "o.tsv"
    fd = os.open(out, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        r = cli(d, "-o", out, "--timeout", "0.2", cwd=tmp_path)
    finally:
        os.close(fd)
    assert r.returncode == 75, r.stderr
    err = r.stderr.decode()
    assert "zotsink recover" in err and "--skip-collected" in err
    spills = [p for p in os.listdir(tmp_path) if ".spill." in p]
    assert len(spills) == 1
    assert subprocess.run([*ZOTSINK, "recover", str(out)], capture_output=True).returncode == 0
    assert cli(d, "-o", out, "--skip-collected", cwd=tmp_path).returncode == 0
    assert sorted(r[0] for r in rows(out)[1:]) == [f"f{i}" for i in range(5)]


def test_summary_and_progress(tmp_path: Path) -> None:
    files(tmp_path / "d", {f"f{i}": f"i:{i}" for i in range(3)})
    r = cli("d", "-o", "o.tsv", cwd=tmp_path)
    assert r.returncode == 0
    assert b"\r" not in r.stderr  # stderr is no terminal: no progress bar
    assert r.stderr.startswith(
        b"zotsink: collected into o.tsv: 3 files, 3 records, 0 duplicates dropped, 0 key "
        b"conflicts, 0 skipped, "
    ) and r.stderr.rstrip().endswith(b" files/s")
    r = cli("d", "-o", "p.tsv", "--progress", cwd=tmp_path)
    assert r.returncode == 0 and b"\r\x1b[Kzotsink: reading: " in r.stderr
    r = cli("d", "-o", "q.tsv", "-q", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == b""


def test_api_report(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a": "x:1", "b": "x:1", "c": "\0"})
    rep = collect(str(d), str(tmp_path / "o.tsv"))
    assert isinstance(rep, CollectReport)
    assert (rep.files, rep.records, rep.duplicates, rep.conflicts) == (2, 1, 1, 0)
    assert rep.skipped == [("c", "binary (NUL byte at offset 0)")]
    assert rep.header == ("source", "x") and rep.output == str(tmp_path / "o.tsv")
    assert rep.seconds > 0 and rep.files_per_second > 0


def test_out_that_cannot_be_written_is_refused_before_reading(tmp_path: Path) -> None:
    files(tmp_path / "d", {"a": "x:1"})
    (tmp_path / "sub").mkdir()
    r = cli("d", "-o", "sub", cwd=tmp_path)
    assert r.returncode == 2 and b"is a directory" in r.stderr
    r = cli("d", "-o", "nodir/o.tsv", cwd=tmp_path)
    assert r.returncode == 2 and b"does not exist; create it first" in r.stderr
    r = cli("d", "-o", "o.tsv", "--archive", "nodir/a.tar", cwd=tmp_path)
    assert r.returncode == 2 and b"does not exist" in r.stderr


def test_ctrl_c_says_how_to_finish(tmp_path: Path, reap: object) -> None:
    files(tmp_path / "d", {f"f{i}": f"i:{i}" for i in range(10)})
    out = tmp_path / "o.tsv"
    fd = os.open(out, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the collect reads everything, then waits for OUT
    try:
        p = subprocess.Popen([*ZOTSINK, "collect", "d", "-o", "o.tsv", "--progress"],
                             cwd=tmp_path, stderr=subprocess.PIPE)  # fmt: skip
        reap(p)  # type: ignore[operator]
        seen = b""
        while b"reading:" not in seen:  # its progress line: Python is running, files are read
            chunk = os.read(p.stderr.fileno(), 4096)  # type: ignore[union-attr]
            assert chunk, seen
            seen += chunk
        p.send_signal(signal.SIGINT)
        err = seen + p.stderr.read()  # type: ignore[union-attr]
        assert p.wait() == 130, err
    finally:
        os.close(fd)
    assert b"interrupted; to finish, run the same collect with --skip-collected" in err
    assert b"Traceback" not in err
    assert out.read_bytes() == b""
