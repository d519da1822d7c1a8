"""``zotsink pack`` end to end: names, bad input, exit codes, spills."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from zotsink import append_record
from zotsink._core.fileio import TAR_ENDINGS
from zotsink._pack.members import read_member
from zotsink._pack.recover import recover_archive
from zotsink.errors import UsageError

Run = Callable[..., subprocess.CompletedProcess[bytes]]


def _names(path: Path) -> list[str]:
    with tarfile.open(path) as tf:
        return tf.getnames()


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    a = tmp_path / "hist.png"
    a.write_bytes(b"\x89PNG" + bytes(range(256)) * 10)
    a.chmod(0o640)
    b = tmp_path / "a.npy"
    b.write_bytes(b"\x93NUMPY" + b"\0" * 100)
    return a, b


def test_files_become_adjacent_members_with_their_attributes(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path]
) -> None:
    a, b = files
    r = zotsink("pack", "out.tar", a, b, env={"SLURM_ARRAY_JOB_ID": None, "SLURM_JOB_ID": None})
    assert (r.returncode, r.stderr) == (0, b"")
    archive = tmp_path / "out.tar"
    with tarfile.open(archive) as tf:
        members = tf.getmembers()
        assert [m.name for m in members] == ["hist.png", "a.npy"]
        assert members[0].mode == 0o640 and members[0].mtime == int(a.stat().st_mtime)
        assert tf.extractfile(members[1]).read() == b.read_bytes()  # type: ignore[union-attr]
    assert read_member(archive, "hist.png") == a.read_bytes()


def test_a_job_array_task_gets_its_job_task_prefix(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path]
) -> None:
    env = {"SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "7"}
    assert zotsink("pack", "out.tar", files[0], env=env).returncode == 0
    assert zotsink("pack", "out.tar", files[0], "--prefix", "mine", env=env).returncode == 0
    assert zotsink("pack", "out.tar", files[0], "--stamp", "task", env=env).returncode == 0
    assert _names(tmp_path / "out.tar") == ["4242_7/hist.png", "mine/hist.png", "7/hist.png"]


def test_stdin_is_one_member_and_needs_a_name(tmp_path: Path, zotsink: Run) -> None:
    r = zotsink("pack", "out.tar", "-", input=b"payload")
    assert r.returncode == 2 and b"stdin (-) needs --name" in r.stderr
    r = zotsink("pack", "out.tar", "--name", "k1.json", "-", input=b'{"a": 1}')
    assert r.returncode == 0, r.stderr
    assert read_member(tmp_path / "out.tar", "k1.json") == b'{"a": 1}'


def test_a_taken_name_is_refused_with_exit_1_unless_replace(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path]
) -> None:
    assert zotsink("pack", "out.tar", files[0], "--prefix", "").returncode == 0
    size = (tmp_path / "out.tar").stat().st_size
    r = zotsink("pack", "out.tar", files[1], files[0], "--prefix", "")
    assert r.returncode == 1
    assert b"already has a member named 'hist.png'" in r.stderr and b"--replace" in r.stderr
    assert (tmp_path / "out.tar").stat().st_size == size  # not even a.npy
    r = zotsink("pack", "out.tar", files[0], "--prefix", "", "--replace")
    assert r.returncode == 0
    assert _names(tmp_path / "out.tar") == ["hist.png", "hist.png"]


@pytest.mark.parametrize("kind", ["directory", "fifo", "device", "missing", "unreadable"])
def test_a_file_that_cannot_be_a_member_appends_nothing(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path], kind: str
) -> None:
    bad = {
        "directory": tmp_path / "d",
        "fifo": tmp_path / "f",
        "device": Path("/dev/null"),
        "missing": tmp_path / "nope",
        "unreadable": Path("/proc/self/mem"),  # a regular file whose read fails (EIO)
    }[kind]
    if kind == "directory":
        bad.mkdir()
    elif kind == "fifo":
        os.mkfifo(bad)
    r = zotsink("pack", "out.tar", files[0], bad, timeout=30)
    assert r.returncode == 1, r.stderr
    assert str(bad).encode() in r.stderr and b"nothing was appended" in r.stderr
    assert b"Traceback" not in r.stderr
    assert not (tmp_path / "out.tar").exists()


def test_max_member_refuses_a_larger_member(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path]
) -> None:
    r = zotsink("pack", "out.tar", files[1], "--max-member", "100")
    assert r.returncode == 1 and b"over the --max-member limit of 100" in r.stderr
    assert zotsink("pack", "out.tar", files[1], "--max-member", "1K").returncode == 0
    assert zotsink("pack", "out.tar", files[1], "--max-member", "lots").returncode == 2


def test_seal_then_append(tmp_path: Path, zotsink: Run, files: tuple[Path, Path]) -> None:
    archive = tmp_path / "out.tar"
    assert zotsink("pack", "out.tar", files[0], "--seal", "--prefix", "").returncode == 0
    assert archive.read_bytes().endswith(bytes(1024))
    assert zotsink("pack", "out.tar", files[1], "--prefix", "").returncode == 0
    assert not archive.read_bytes().endswith(bytes(1024))
    out = subprocess.run(["tar", "tf", str(archive)], capture_output=True, check=True)
    assert out.stdout == b"hist.png\na.npy\n" and out.stderr == b""


def test_lock_timeout_exits_75_and_spills(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path]
) -> None:
    archive = tmp_path / "out.tar"
    assert zotsink("pack", "out.tar", files[0], "--prefix", "").returncode == 0
    with open(archive, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        r = zotsink("pack", "out.tar", files[1], "--prefix", "", "--timeout", "0.2")
    assert r.returncode == 75, r.stderr
    spills = list(tmp_path.glob("out.tar.spill.*"))
    assert len(spills) == 1 and str(spills[0]).encode() in r.stderr
    assert recover_archive(archive).members == 1
    assert _names(archive) == ["hist.png", "a.npy"]


@pytest.mark.parametrize(
    "content",
    [b"a\tb\n1\t2\n", b"x" * 700, bytes(range(256)) * 8],
    ids=["short-table", "long-text", "binary"],
)
def test_a_file_that_is_no_archive_is_never_cut(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path], content: bytes
) -> None:
    """`zotsink pack results.tsv img.png` named a table by mistake: it keeps every byte."""
    table = tmp_path / "results.tsv"
    table.write_bytes(content)
    r = zotsink("pack", "results.tsv", files[0])
    assert r.returncode == 2, r.stderr
    assert b"results.tsv is not empty, has no index results.tsv.idx and is not a whole tar" in (
        r.stderr
    )
    assert b"nothing was appended" in r.stderr
    assert table.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "hist.png", "results.tsv"]


def test_a_tar_made_elsewhere_is_adopted_with_its_members(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path]
) -> None:
    subprocess.run(["tar", "cf", "made.tar", "a.npy"], cwd=tmp_path, check=True)
    r = zotsink("pack", "made.tar", files[0], "--prefix", "")
    assert r.returncode == 0, r.stderr
    assert _names(tmp_path / "made.tar") == ["a.npy", "hist.png"]
    assert zotsink("verify", "made.tar").returncode == 0


#: What every record writer says to an archive as OUT: known by its name, or by its index.
ARCHIVE_REFUSALS = {
    "out.tar": "out.tar is named as a tar archive: records go to a table (.tsv, .csv, .txt), "
    "files into an archive with `zotsink pack out.tar FILE...`",
    "img.pack": "img.pack is a pack archive (img.pack.idx is its index): records go to a table "
    "(.tsv, .csv, .txt), files into the archive with `zotsink pack img.pack FILE...`",
}


@pytest.mark.parametrize("out", list(ARCHIVE_REFUSALS))
def test_records_are_never_appended_to_an_archive(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path], out: str, monkeypatch
) -> None:
    """Lines in a pack archive read as a torn member, which the next pack writer cuts. An
    archive named otherwise (img.pack) used to take the record, exit 0."""
    why = ARCHIVE_REFUSALS[out]
    assert zotsink("pack", out, files[0], "--prefix", "").returncode == 0
    before = (tmp_path / out).read_bytes()
    for argv in ([out], ["append", out, "rec"], ["run", "t.txt", out, "echo"]):
        (tmp_path / "t.txt").write_bytes(b"task\n")
        r = zotsink(*argv, input=b"rec\n")
        assert r.returncode == 2, r.stderr
        assert why.encode() in r.stderr, r.stderr
        assert (tmp_path / out).read_bytes() == before
    monkeypatch.chdir(tmp_path)  # the message names OUT as given
    with pytest.raises(UsageError, match=re.escape(why)):
        append_record(out, "rec")
    assert zotsink("pack", out, files[1], "--prefix", "").returncode == 0
    assert _names(tmp_path / out) == [files[0].name, files[1].name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [files[0].name, files[1].name, out, f"{out}.idx", "t.txt"]
    )


@pytest.mark.parametrize("ending", TAR_ENDINGS)
def test_every_tar_ending_is_refused_as_out(tmp_path: Path, ending: str) -> None:
    with pytest.raises(UsageError, match="is named as a tar archive"):
        append_record(tmp_path / f"other{ending.upper()}", "rec")
    assert list(tmp_path.iterdir()) == []


def test_an_idx_that_is_no_pack_index_leaves_out_alone(tmp_path: Path, zotsink: Run) -> None:
    """An .idx of the user's own, or a FIFO planted there, is no pack index: OUT is written."""
    (tmp_path / "own.tsv.idx").write_bytes(b"my notes\n")
    os.mkfifo(tmp_path / "fifo.tsv.idx")
    for out in ("own.tsv", "fifo.tsv"):
        r = zotsink(out, input=b"rec\n", timeout=30)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / out).read_bytes() == b"rec\n"


@pytest.mark.parametrize("torn", [b"some text\nmore\n", b"tar cut short"], ids=["text", "tar"])
def test_repair_cuts_nothing_of_a_file_without_index(
    tmp_path: Path, zotsink: Run, files: tuple[Path, Path], torn: bytes
) -> None:
    """Without its index no zotsink writer made the file: --repair must not cut its end."""
    path = tmp_path / "x.tar"
    if torn == b"tar cut short":
        subprocess.run(["tar", "cf", "whole.tar", "a.npy"], cwd=tmp_path, check=True)
        torn = (tmp_path / "whole.tar").read_bytes()[:700]
    path.write_bytes(torn)
    r = zotsink("verify", "x.tar")
    assert r.returncode == 1, r.stderr
    assert b"(not written by zotsink)" in r.stderr and b"sealed" not in r.stderr
    r = zotsink("verify", "--repair", "x.tar")
    assert r.returncode == 2, r.stderr
    assert b"has no index x.tar.idx and is not a whole tar" in r.stderr
    assert b"nothing was changed" in r.stderr
    assert path.read_bytes() == torn and not (tmp_path / "x.tar.idx").exists()
