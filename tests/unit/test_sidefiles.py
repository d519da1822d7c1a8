"""Side files: spill(), reject(), find_spills(), spill_name_problem() and the trust rule.

Concurrency with a real process: a holder takes a spill file's lock as ``zotsink recover``
does, and the next batch must go to a new file. Ownership with real users (root only):
files are given to the ``nobody`` account and checked in sticky and plain directories.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from zotsink._core import sidefiles
from zotsink._core.fileio import file_kind, open_regular, side_file_problem
from zotsink._core.outlet import Outlet, reject
from zotsink._core.writer import Writer
from zotsink.errors import LockTimeout, WriteError

HOST = sidefiles.host_name()

Proc = subprocess.Popen[bytes]
Hold = Callable[[str], Proc]


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: gives a file to another user (chown)"
)


@pytest.fixture(autouse=True)
def _fresh_spills(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test starts as a new process would: no spill file of its own yet.
    monkeypatch.setattr(sidefiles, "_open_spills", {})


# -- spill ------------------------------------------------------------------------------------


def test_spill_beside_out_carries_the_header_and_later_batches_join_it(tmp_path: Path) -> None:
    out = str(tmp_path / "out.tsv")
    path = sidefiles.spill(out, b"1\ta\n", header=b"n\tv\n", mode=0o640)
    assert path == f"{out}.spill.{HOST}.{os.getpid()}"
    assert sidefiles.spill(out, b"2\tb\n", header=b"n\tv\n", mode=0o640) == path
    assert Path(path).read_bytes() == b"n\tv\n1\ta\n2\tb\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_a_spill_file_under_recover_is_left_and_a_new_one_started(
    tmp_path: Path, hold: Hold
) -> None:
    out = str(tmp_path / "out.txt")
    first = sidefiles.spill(out, b"a\n")
    holder = hold(first)  # recover has it: reading it, about to remove it
    second = sidefiles.spill(out, b"b\n")
    assert second == first + ".1"
    assert Path(first).read_bytes() == b"a\n"  # not a byte added after recover read it
    assert Path(second).read_bytes() == b"b\n"
    holder.communicate(b"", timeout=30)
    assert sidefiles.spill(out, b"c\n") == second  # the new one is joined from now on
    assert Path(second).read_bytes() == b"b\nc\n"


def test_a_spill_file_recover_removed_is_not_written_again(tmp_path: Path) -> None:
    out = str(tmp_path / "out.tsv")
    first = sidefiles.spill(out, b"1\n", header=b"n\n")
    kept = os.open(first, os.O_RDONLY)  # the removed file lives on while open
    try:
        os.remove(first)  # recover appended it and removed it
        again = sidefiles.spill(out, b"2\n", header=b"n\n")
        assert again == first  # the name is free again: a new file, with the header
        assert Path(again).read_bytes() == b"n\n2\n"
        assert os.pread(kept, 100, 0) == b"n\n1\n"  # nothing went into the removed file
    finally:
        os.close(kept)


def test_a_planted_file_at_the_spill_name_is_skipped(tmp_path: Path) -> None:
    out = str(tmp_path / "out.txt")
    base = f"{out}.spill.{HOST}.{os.getpid()}"
    Path(base).write_bytes(b"planted\n")
    os.symlink(tmp_path / "victim", base + ".1")
    path = sidefiles.spill(out, b"rec\n")
    assert path == base + ".2"
    assert Path(base).read_bytes() == b"planted\n" and not (tmp_path / "victim").exists()


def test_spill_goes_elsewhere_when_outs_directory_cannot_take_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "spill"
    elsewhere.mkdir()
    monkeypatch.setenv("ZOTSINK_SPILL_DIR", str(elsewhere))
    out = str(tmp_path / "gone" / "out.txt")
    path = sidefiles.spill(out, b"rec\n", mode=0o644)
    assert path == str(elsewhere / f"out.txt.spill.{HOST}.{os.getpid()}")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # others may list that directory
    assert Path(path).read_bytes() == b"rec\n"


# -- find_spills and spill_name_problem -----------------------------------------------------


def test_find_spills_takes_only_spill_files_of_out(tmp_path: Path) -> None:
    out = tmp_path / "out.tsv"
    out.write_bytes(b"")
    spills = ["out.tsv.spill.h.1", "out.tsv.spill.h.1.2", "out.tsv.spill.node7.cluster.org.42"]
    others = [
        "out.tsv.spill.h.1.recovering",  # a journal
        "out.tsv.spill.h.1.lock",  # a lock marker
        "out.tsv.spill.notes",
        "out.tsv.rejects",
        "out.tsv.rejects.spill.h.3",  # a spill file of OUT.rejects
        "out.tsv.spillage.h.4",
        "out.tsv.bak",
    ]
    for name in spills + others:
        (tmp_path / name).write_bytes(b"x\n")
    os.symlink(tmp_path / "out.tsv.bak", tmp_path / "out.tsv.spill.h.5")
    (tmp_path / "out.tsv.spill.h.6").mkdir()
    os.mkfifo(tmp_path / "out.tsv.spill.h.7")
    assert sidefiles.find_spills(str(out)) == sorted(str(tmp_path / n) for n in spills)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("out.tsv.spill.h.1", None),
        ("out.tsv.spill.node7.cluster.org.42.3", None),
        ("out.tsv", "it is OUT itself"),
        ("out.tsv.rejects", "the rejects file"),
        ("out.tsv.spill.h.1.recovering", "a journal of recover"),
        ("out.tsv.rejects.spill.h.1", "a spill file of out.tsv.rejects, not of out.tsv"),
        ("other.tsv.spill.h.1", "a spill file of other.tsv, not of out.tsv"),
        ("out.tsv.notes", "not named out.tsv.spill.<host>.<pid>"),
        ("out.tsv.spill.h.1.lock", "not named out.tsv.spill.<host>.<pid>"),
    ],
)
def test_spill_name_problem(tmp_path: Path, name: str, why: str | None) -> None:
    problem = sidefiles.spill_name_problem(str(tmp_path / "out.tsv"), str(tmp_path / name))
    if why is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(why), problem


def test_a_spill_file_in_another_directory_is_one_of_out(tmp_path: Path) -> None:
    p = sidefiles.spill_name_problem(str(tmp_path / "out.tsv"), "/scratch/out.tsv.spill.n1.7")
    assert p is None


# -- reject ----------------------------------------------------------------------------------


def test_reject_appends_reason_and_record_lines(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"")
    out.chmod(0o640)
    items = [("line 2: NUL byte", b"a\0b\n"), ("odd\treason\nhere", b"c")]
    path = reject(str(out), items)
    assert path == str(out) + ".rejects"
    assert Path(path).read_bytes() == b"line 2: NUL byte\ta\0b\nodd reason here\tc\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640  # no wider than OUT
    reject(str(out), [("again", b"d")])
    assert Path(path).read_bytes().endswith(b"again\td\n")


def test_reject_never_writes_into_a_fifo_and_saves_the_lines(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    os.mkfifo(str(out) + ".rejects")
    with pytest.raises(WriteError) as e:
        reject(str(out), [("why", b"rec")], timeout=5)
    assert (
        "it is a FIFO, not a regular file; name another OUT "
        "(or remove it, if it was put there by mistake)"
    ) in str(e.value)
    assert e.value.spill_path is not None
    assert Path(e.value.spill_path).read_bytes() == b"why\trec\n"


def test_the_outlet_spills_on_a_lock_timeout(tmp_path: Path, hold: Hold) -> None:
    out = tmp_path / "out.txt"
    out.write_bytes(b"")
    holder = hold(str(out))
    with Writer(out) as w:
        err = Outlet(w, timeout=0.05).write(b"a\nb\n", 2)
    assert isinstance(err, LockTimeout)
    e = pytest.ExceptionInfo.from_exc_info((type(err), err, err.__traceback__))
    holder.communicate(b"", timeout=30)
    assert e.value.spill_path == sidefiles.find_spills(str(out))[0]
    assert Path(e.value.spill_path).read_bytes() == b"a\nb\n"
    assert out.read_bytes() == b""


# -- who may own a side file ------------------------------------------------------------------


def test_own_regular_file_is_trusted_anything_else_is_not(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"")
    assert side_file_problem(os.stat(f)) is None
    os.mkfifo(tmp_path / "fifo")
    assert side_file_problem(os.stat(tmp_path / "fifo")) == "it is not a regular file"


@needs_root
@pytest.mark.parametrize("dir_mode", [0o1777, 0o777, 0o755])
def test_a_file_of_another_user_is_never_trusted(tmp_path: Path, dir_mode: int) -> None:
    nobody = pwd.getpwnam("nobody")
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(dir_mode)
    f = d / "out.txt.rejects"
    f.write_bytes(b"")
    os.chown(f, nobody.pw_uid, nobody.pw_gid)
    assert side_file_problem(os.stat(f)) == (
        f"it belongs to nobody (uid {nobody.pw_uid}), not to you"
    )


def test_open_regular_opens_files_only_and_never_waits_on_a_fifo(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"line\n")
    fd, st = open_regular(str(f))
    try:
        assert os.read(fd, 10) == b"line\n" and st.st_size == 5
        assert os.get_blocking(fd)  # a regular file's descriptor blocks again
    finally:
        os.close(fd)
    os.mkfifo(tmp_path / "fifo")  # no writer: a blocking open would wait for ever
    for other, kind in (("fifo", "a FIFO"), (".", "a directory")):
        fd, st = open_regular(str(tmp_path / other))
        assert fd == -1 and file_kind(st.st_mode) == kind
    with pytest.raises(FileNotFoundError):
        open_regular(str(tmp_path / "missing"))
