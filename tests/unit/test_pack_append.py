"""append_member(s): the locked write path of pack, its commit log and its side files."""

from __future__ import annotations

import fcntl
import hashlib
import os
import tarfile
import warnings
from pathlib import Path

import pytest

from zotsink._pack.append import MAX_MEMBER, append_member, append_members
from zotsink._pack.index import HEADER, index_path, read_index
from zotsink._pack.members import list_members, read_member
from zotsink._pack.recover import recover_archive
from zotsink._pack.verify import verify_archive
from zotsink.errors import LockTimeout, RecordError, WriteError


def _names(path: Path) -> list[str]:
    with tarfile.open(path) as tf:
        return tf.getnames()


def test_members_of_one_call_are_adjacent_and_indexed(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    rows = append_members(archive, {"k1.png": b"P" * 3000, "k1.json": b"{}"})
    assert [r.name for r in rows] == ["k1.png", "k1.json"]
    assert rows[0].offset == 0 and rows[1].offset == 1024 + 512 + 3072  # pax pair + ustar + data
    assert rows[0].sha256 == hashlib.sha256(b"P" * 3000).hexdigest()
    idx = Path(index_path(str(archive))).read_bytes()
    assert idx.startswith(HEADER) and idx.count(b"\n") == 3
    assert read_index(index_path(str(archive)))[0] == rows
    assert _names(archive) == ["k1.png", "k1.json"]
    assert archive.stat().st_size == rows[1].offset + 1536 + 512  # no end-of-archive blocks


def test_a_taken_name_is_refused_unless_replace(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    append_member(archive, "x.bin", b"one")
    size = archive.stat().st_size
    with pytest.raises(RecordError, match=r"already has a member named 'x\.bin' .*--replace"):
        append_members(archive, {"new.bin": b"n", "x.bin": b"two"})
    assert archive.stat().st_size == size  # neither member was appended
    append_member(archive, "x.bin", b"two", replace=True)
    assert _names(archive) == ["x.bin", "x.bin"]
    assert read_member(archive, "x.bin") == b"two"  # the last one, as tar extracts it


@pytest.mark.parametrize(
    "name",
    ["", "/etc/passwd", "a/../b", "../x", "./x", "a//b", "dir/", "new\nline", "tab\there", "nul\0"],
)
def test_names_tar_cannot_take_safely_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(RecordError, match=r"member name .* refused"):
        append_member(tmp_path / "a.tar", name, b"x")
    assert not (tmp_path / "a.tar").exists()


def test_long_and_non_ascii_names_go_through_pax(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    name = "ü/" + "n" * 200 + "/" + "m" * 251 + ".npy"  # over 100 bytes, each part <= 255
    append_member(archive, name, b"data")
    assert _names(archive) == [name]
    assert read_member(archive, name) == b"data"


def test_the_same_name_twice_in_one_call_and_oversized_members_are_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(RecordError, match="given twice"):
        append_members(tmp_path / "a.tar", [("x", b"1"), ("x", b"2")])
    with pytest.raises(RecordError, match="over the limit of 3"):
        append_member(tmp_path / "a.tar", "x", b"1234", max_member=3)
    assert MAX_MEMBER == 4 << 30
    assert not (tmp_path / "a.tar").exists()


def test_a_seal_is_stripped_by_the_next_append(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    append_member(archive, "a", b"1", seal=True)
    assert archive.read_bytes().endswith(bytes(1024))
    assert verify_archive(archive).sealed
    row = append_member(archive, "b", b"2")
    assert row.offset == archive.stat().st_size - 2048
    assert _names(archive) == ["a", "b"] and not verify_archive(archive).sealed


def test_a_torn_tail_is_cut_by_the_next_writer(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    append_member(archive, "a", b"1" * 5000)
    whole = archive.read_bytes()
    with open(archive, "ab") as f:  # a killed writer's header and part of its data
        f.write(whole[:2000])
    with pytest.warns(UserWarning, match=f"cut 2000 bytes at offset {len(whole)} .*torn member"):
        row = append_member(archive, "b", b"2")
    assert row.offset == len(whole)
    assert archive.read_bytes()[: len(whole)] == whole
    assert _names(archive) == ["a", "b"]
    assert verify_archive(archive).ok


def test_a_whole_member_without_its_row_is_adopted(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    append_member(archive, "a", b"1")
    idx = Path(index_path(str(archive)))
    committed = idx.read_bytes()
    append_member(archive, "b", b"2")
    idx.write_bytes(committed + b"1024\t1\tb\tdead")  # killed mid-row
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        append_member(archive, "c", b"3")
    notes = [str(w.message) for w in caught]
    assert any("cut a torn last row (13 bytes)" in n for n in notes), notes
    assert any("indexed 1 whole member" in n for n in notes), notes
    assert [r.name for r in list_members(archive)] == ["a", "b", "c"]
    assert verify_archive(archive).ok


def test_foreign_bytes_are_never_cut_by_a_writer(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    append_member(archive, "a", b"1")
    with open(archive, "ab") as f:
        f.write(b"not a tar header " * 100)
    size = archive.stat().st_size
    with pytest.raises(WriteError, match="damaged at offset 2048: no ustar magic") as e:
        append_member(archive, "b", b"2")
    assert archive.stat().st_size == size
    assert e.value.spill_path and os.path.exists(e.value.spill_path)
    # repair keeps the foreign bytes beside the archive, then recover adds the spilled member
    report = verify_archive(archive, repair=True)
    assert report.ok
    assert Path(f"{archive}.cut.2048").read_bytes() == b"not a tar header " * 100
    assert recover_archive(archive).members == 1
    assert _names(archive) == ["a", "b"] and not os.path.exists(e.value.spill_path)


def test_lock_timeout_spills_a_tar_that_recover_folds_back(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    append_member(archive, "first", b"0")
    with open(archive, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(LockTimeout) as e:
            append_members(archive, {"k.png": b"png", "k.json": b"{}"}, timeout=0.05)
    spill = e.value.spill_path
    assert spill is not None and f"zotsink recover {archive}" in str(e.value)
    with tarfile.open(spill) as tf:  # the spill file is itself a tar of the members
        assert tf.getnames() == ["k.png", "k.json"]
    first = recover_archive(archive)
    assert (first.files, first.members, first.skipped) == ([spill], 2, 0)
    assert _names(archive) == ["first", "k.png", "k.json"]
    assert read_member(archive, "k.png") == b"png"
    assert verify_archive(archive).ok


def test_recover_run_twice_adds_nothing_twice(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    append_member(archive, "first", b"0")
    with open(archive, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(LockTimeout) as e:
            append_member(archive, "k", b"k", timeout=0)
    keep = Path(e.value.spill_path or "").read_bytes()
    recover_archive(archive)
    Path(e.value.spill_path or "").write_bytes(keep)  # as if the removal had not happened
    again = recover_archive(archive)
    assert (again.members, again.skipped) == (0, 1)
    assert _names(archive) == ["first", "k"]


def test_a_missing_index_is_rebuilt_by_the_writer(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    append_member(archive, "a", b"1")
    before = list_members(archive)
    os.remove(index_path(str(archive)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        append_member(archive, "b", b"2")
    assert any("rebuilt from the archive" in str(w.message) for w in caught)
    assert list_members(archive)[:1] == before
    assert verify_archive(archive).ok


def test_an_index_of_another_archive_is_not_trusted(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    other = tmp_path / "o.tar"
    append_member(archive, "a", b"1")
    append_members(other, {"x": b"1" * 9000, "y": b"2"})
    os.replace(index_path(str(other)), index_path(str(archive)))
    with pytest.warns(UserWarning, match="rebuilt"):
        append_member(archive, "b", b"2")
    assert _names(archive) == ["a", "b"]
    assert [r.name for r in list_members(archive)] == ["a", "b"]


def test_verify_names_the_offset_of_changed_data_and_repair_keeps_it(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    rows = append_members(archive, {"a": b"A" * 100, "b": b"B" * 100})
    data = bytearray(archive.read_bytes())
    data[rows[0].offset + 1536 + 5] ^= 0xFF  # a byte of a's data (after its 3 header blocks)
    archive.write_bytes(bytes(data))
    report = verify_archive(archive)
    assert report.problems == [
        f"offset {rows[0].offset}: the data of 'a' does not match its recorded sha256"
    ]
    assert verify_archive(archive, repair=True).problems == report.problems  # not cut
    assert archive.read_bytes() == bytes(data)


def test_a_stale_index_handle_is_followed_by_name_then_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index replaced through another client: settle meets ESTALE on the old handle;
    the index is opened again by name after the stale-handle pause, and given up on only
    when the policy's tries are spent (the error then names the errno, nothing written)."""
    import errno

    from zotsink._core.backoff import Policy
    from zotsink._pack import append as append_module

    archive = tmp_path / "a.tar"
    append_member(archive, "first", b"1")
    real = append_module.settle
    fds: list[int] = []

    def stale_once(fd: int, idx_fd: int, *args: object, **kw: object) -> object:
        fds.append(idx_fd)
        if len(fds) == 1:
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))
        return real(fd, idx_fd, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(append_module, "settle", stale_once)
    monkeypatch.setattr(append_module, "STALE_HANDLE", Policy(1e-3, 1e-3, jitter=False, tries=3))
    row = append_member(archive, "second", b"2")
    assert len(fds) == 2 and row.name == "second"
    assert [r.name for r in read_index(index_path(str(archive)))[0]] == ["first", "second"]

    def always_stale(fd: int, idx_fd: int, *args: object, **kw: object) -> object:
        fds.append(idx_fd)
        raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))

    fds.clear()
    size = archive.stat().st_size
    monkeypatch.setattr(append_module, "settle", always_stale)
    with pytest.raises(OSError) as e, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        append_member(archive, "third", b"3")
    assert len(fds) == 3 and archive.stat().st_size == size
    assert getattr(e.value, "errno", None) == errno.ESTALE
