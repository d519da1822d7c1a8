"""Members of ``zotsink run`` tasks: their task and attempt in the index, which retries may
append a name again, indexes of eight columns read as before, and recover's order."""

from __future__ import annotations

import fcntl
import os
import tarfile
from pathlib import Path

import pytest

from zotsink import (
    LockTimeout,
    RecordError,
    append_member,
    latest_members,
    list_members,
    read_member,
    recover_archive,
    verify_archive,
)
from zotsink._core.outcheck import pack_index_beside
from zotsink._pack.index import COLUMNS, HEADER, OLD_HEADER, index_path, parse_index


def _as(monkeypatch: pytest.MonkeyPatch, tasknum: int | None, attempt: int | None) -> None:
    """This process as attempt ``attempt`` of task ``tasknum`` of ``zotsink run``."""
    for var, value in (("ZOTSINK_TASKNUM", tasknum), ("ZOTSINK_ATTEMPT", attempt)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, str(value))


def test_a_member_records_its_task_and_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.tar"
    _as(monkeypatch, 7, 2)
    row = append_member(archive, "x.png", b"png")
    assert (row.tasknum, row.attempt, row.run_attempt()) == ("7", "2", (7, 2))
    idx = Path(index_path(str(archive))).read_bytes()
    assert idx.startswith(HEADER) and COLUMNS[-2:] == ("tasknum", "attempt")
    assert idx.splitlines()[1].endswith(b"\t7\t2")
    os.remove(index_path(str(archive)))  # the walk reads them from the PAX comment
    with pytest.warns(Warning, match="is missing"):
        assert list_members(archive) == [row]


def test_outside_run_the_comment_is_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.tar"
    _as(monkeypatch, None, None)
    row = append_member(archive, "x", b"1")
    assert (row.tasknum, row.attempt, row.run_attempt()) == ("", "", None)
    with tarfile.open(archive) as tf:
        comment = tf.getmembers()[0].pax_headers["comment"]
    assert "tasknum" not in comment and "attempt" not in comment


@pytest.mark.parametrize(
    ("first", "second", "appended"),
    [
        ((3, 1), (3, 2), True),  # a retry of the same task
        ((3, 1), (3, 5), True),  # ... several attempts later (a resubmission)
        ((3, 2), (3, 2), False),  # the same attempt packs a name twice: a mistake
        ((3, 2), (3, 1), False),  # an older attempt must not win over a newer one
        ((3, 1), (4, 2), False),  # another task: the names collide
        (None, (3, 2), False),  # packed outside run
        ((3, 1), None, False),  # outside run, the refusal stays
    ],
)
def test_which_retries_may_append_a_name_again(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    first: tuple[int, int] | None,
    second: tuple[int, int] | None,
    appended: bool,
) -> None:
    archive = tmp_path / "a.tar"
    _as(monkeypatch, *(first or (None, None)))
    append_member(archive, "x.png", b"first")
    _as(monkeypatch, *(second or (None, None)))
    if appended:
        append_member(archive, "x.png", b"second")
        assert read_member(archive, "x.png") == b"second"
        assert first is not None and second is not None
        assert [r.attempt for r in list_members(archive)] == [str(first[1]), str(second[1])]
    else:
        with pytest.raises(RecordError, match=r"already has a member named 'x\.png'"):
            append_member(archive, "x.png", b"second")
        assert read_member(archive, "x.png") == b"first"


def test_every_earlier_member_of_the_name_must_be_an_earlier_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.tar"
    _as(monkeypatch, None, None)
    append_member(archive, "x", b"outside")
    _as(monkeypatch, 1, 1)
    append_member(archive, "x", b"run", replace=True)  # the last is a run member now
    _as(monkeypatch, 1, 2)
    with pytest.raises(RecordError, match="already has a member named 'x'"):
        append_member(archive, "x", b"retry")


def test_the_ok_attempts_choose_the_member(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "a.tar"
    for attempt in (1, 2, 3):
        _as(monkeypatch, 4, attempt)
        append_member(archive, "x", f"attempt {attempt}".encode())
    _as(monkeypatch, None, None)
    append_member(archive, "y", b"outside run")
    assert read_member(archive, "x") == b"attempt 3"
    assert read_member(archive, "x", ok={(4, 2)}) == b"attempt 2"
    assert read_member(archive, "y", ok=set()) == b"outside run"
    rows = list_members(archive)
    assert [(r.name, r.attempt) for r in latest_members(rows)] == [("x", "3"), ("y", "")]
    assert [(r.name, r.attempt) for r in latest_members(rows, {(4, 1)})] == [("x", "1"), ("y", "")]
    assert [r.name for r in latest_members(rows, set())] == ["y"]


def _to_old_columns(archive: Path) -> bytes:
    """The index as a version that did not record tasknum and attempt wrote it."""
    idx = Path(index_path(str(archive)))
    lines = idx.read_bytes().splitlines()
    assert lines[0] + b"\n" == HEADER
    old = OLD_HEADER + b"".join(b"\t".join(line.split(b"\t")[:8]) + b"\n" for line in lines[1:])
    idx.write_bytes(old)
    return old


def test_an_index_of_eight_columns_reads_as_before_and_grows_its_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.tar"
    _as(monkeypatch, None, None)
    append_member(archive, "a", b"1")
    append_member(archive, "b", b"2")
    before = list_members(archive)
    old = _to_old_columns(archive)
    assert parse_index(old) == (before, [], len(old))
    assert list_members(archive) == before and read_member(archive, "b") == b"2"
    assert pack_index_beside(str(archive)) == index_path(str(archive))  # still an archive
    assert verify_archive(archive).ok
    _as(monkeypatch, 2, 1)
    append_member(archive, "c", b"3")
    idx = Path(index_path(str(archive))).read_bytes()
    assert idx.startswith(HEADER) and idx.count(b"\n") == 4
    assert all(line.count(b"\t") == len(COLUMNS) - 1 for line in idx.splitlines())
    assert list_members(archive)[:2] == before
    assert pack_index_beside(str(archive)) == index_path(str(archive))
    assert verify_archive(archive).ok


def _spill(archive: Path, name: str, data: bytes) -> str:
    with open(archive, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(LockTimeout) as e:
            append_member(archive, name, data, timeout=0.05)
    spill = e.value.spill_path
    assert spill and os.path.exists(spill)
    return str(spill)


def test_recover_never_puts_an_earlier_attempt_after_a_later_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.tar"
    _as(monkeypatch, None, None)
    append_member(archive, "other", b"0")
    _as(monkeypatch, 5, 1)
    spill = _spill(archive, "x.png", b"attempt 1")  # attempt 1 could not append: it failed
    append_member(archive, "y.png", b"attempt 1 of y")
    _as(monkeypatch, 5, 2)
    append_member(archive, "x.png", b"attempt 2")  # its retry could
    report = recover_archive(archive)
    assert (report.members, report.skipped, report.files) == (0, 0, [])
    assert len(report.left) == 1 and report.left[0].startswith(
        f"{spill}: kept, 1 of its members ('x.png') are not newer"
    )
    assert os.path.exists(spill)  # kept: nothing lost
    assert read_member(archive, "x.png") == b"attempt 2"
    with tarfile.open(archive) as tf:
        assert tf.getnames() == ["other", "y.png", "x.png"]


def test_recover_appends_a_later_attempt_after_an_earlier_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "a.tar"
    _as(monkeypatch, 5, 1)
    append_member(archive, "x.png", b"attempt 1")
    _as(monkeypatch, 5, 2)
    spill = _spill(archive, "x.png", b"attempt 2")
    _as(monkeypatch, None, None)
    report = recover_archive(archive)
    assert (report.members, report.skipped, report.files, report.left) == (1, 0, [spill], [])
    assert read_member(archive, "x.png") == b"attempt 2"
    assert [r.attempt for r in list_members(archive)] == ["1", "2"]
    assert recover_archive(archive).members == 0  # nothing twice
