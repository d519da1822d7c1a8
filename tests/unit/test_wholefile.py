"""``zotsink._core.wholefile``: a file written whole for the user, through a temporary name
that nothing planted can stand in for, renamed (or linked) into place; the one way."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

import zotsink
from zotsink._core import wholefile
from zotsink._core.wholefile import whole_file
from zotsink.errors import UsageError, WriteError


def test_the_file_lands_whole_with_its_mode_and_nothing_else(tmp_path: Path) -> None:
    dest = tmp_path / "page.html"
    dest.write_bytes(b"old\n")
    with whole_file(str(dest), mode=0o640) as w:
        w.write(b"new ")
        assert dest.read_bytes() == b"old\n"  # readers see the old file meanwhile
        assert Path(w.temp).parent == tmp_path and ".part." in w.temp
        w.file.write(b"page\n")
    assert dest.read_bytes() == b"new page\n"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640 & ~_umask()
    assert os.listdir(tmp_path) == ["page.html"]


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_an_exception_in_the_block_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    dest = tmp_path / "page.html"
    dest.write_bytes(b"old\n")
    with pytest.raises(KeyError), whole_file(str(dest)) as w:
        w.write(b"half")
        raise KeyError("the caller's own")
    assert dest.read_bytes() == b"old\n"
    assert os.listdir(tmp_path) == ["page.html"]


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me\n")
    dest = tmp_path / "page.html"
    dest.symlink_to(victim)
    with whole_file(str(dest)) as w:
        w.write(b"page\n")
    assert not dest.is_symlink() and dest.read_bytes() == b"page\n"
    assert victim.read_bytes() == b"keep me\n"


def test_a_name_taken_at_the_temporary_name_is_passed_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me\n")
    names = iter(["link", "dangling", "file", "free"])
    monkeypatch.setattr(wholefile, "_suffix", lambda: next(names))
    dest = tmp_path / "page.html"
    (tmp_path / "page.html.part.link").symlink_to(victim)
    (tmp_path / "page.html.part.dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "page.html.part.file").write_bytes(b"someone's\n")
    with whole_file(str(dest)) as w:
        assert w.temp == f"{dest}.part.free"
        w.write(b"page\n")
    assert dest.read_bytes() == b"page\n"
    assert victim.read_bytes() == b"keep me\n"
    assert not (tmp_path / "nowhere").exists()
    assert (tmp_path / "page.html.part.file").read_bytes() == b"someone's\n"


def test_every_name_taken_is_an_error_that_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wholefile, "_suffix", lambda: "same")
    (tmp_path / "page.html.part.same").write_bytes(b"x")
    taken = r"every temporary name tried beside it was taken"
    with pytest.raises(WriteError, match=taken), whole_file(str(tmp_path / "page.html")):
        pytest.fail("never begun")
    assert not (tmp_path / "page.html").exists()


@pytest.mark.parametrize("kind", ["directory", "FIFO", "character device"])
def test_the_target_is_a_file(tmp_path: Path, kind: str) -> None:
    dest = tmp_path / "out"
    if kind == "directory":
        dest.mkdir()
    elif kind == "FIFO":
        os.mkfifo(dest)
    else:
        dest.symlink_to("/dev/null")  # a link to a device is fine: the link is replaced
        with whole_file(str(dest)) as w:
            w.write(b"x")
        assert dest.read_bytes() == b"x"
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        dest.unlink()
        os.mknod(dest, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    refused = rf"out is a {kind}, not a file zotsink may replace"
    with pytest.raises(UsageError, match=refused), whole_file(str(dest)):
        pytest.fail("never begun")
    assert os.listdir(tmp_path) == ["out"]


def test_nothing_is_replaced_when_asked_not_to(tmp_path: Path) -> None:
    dest = tmp_path / "table.jsonl"
    appeared = r"appeared while it was being written"
    with pytest.raises(WriteError, match=appeared), whole_file(str(dest), replace=False) as w:
        w.write(b"mine\n")
        dest.write_bytes(b"theirs\n")  # another writer, meanwhile
    assert dest.read_bytes() == b"theirs\n"
    assert os.listdir(tmp_path) == ["table.jsonl"]
    with whole_file(str(tmp_path / "new.jsonl"), replace=False) as w:
        w.write(b"mine\n")
    assert (tmp_path / "new.jsonl").read_bytes() == b"mine\n"


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    gone = rf"the directory {tmp_path}/gone does not exist"
    with pytest.raises(WriteError, match=gone), whole_file(str(tmp_path / "gone" / "x.html")):
        pytest.fail("never begun")


#: Modules that place a file by rename or link themselves. verify --repair rewrites OUT
#: under OUT's lock, through a link to the file it names, keeping its owner and mode: a
#: rewrite in place of the data file, not a file written for the user (its temporary file
#: is exclusive, no-follow and randomly named all the same: mkstemp). The migration of a
#: format 1 ledger rewrites the ledger under its lock the same way, its first copy kept by
#: a hard link (exclusive, no-follow, its owner's mode).
PLACE_THEIR_OWN = {"_check/repair.py", "_run/migrate.py"}


def test_whole_files_are_placed_only_by_wholefile() -> None:
    package = Path(zotsink.__file__).parent
    found = set()
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("rename", "replace", "link", "mkstemp")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("os", "tempfile")
            ):
                found.add(rel)
    assert found == {"_core/wholefile.py", *PLACE_THEIR_OWN}, (
        "write a whole file with zotsink._core.wholefile.whole_file"
    )
