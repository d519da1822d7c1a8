"""repair_locked: bad lines to OUT.rejects, good lines to a new OUT, under the lock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zotsink import InputError, append_record, verify
from zotsink._check.repair import repair_locked

KEEP = 100


def test_bad_lines_move_good_lines_stay_in_a_new_inode(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\tb\n1\t2\nbad\n3\t4\n1\t2\ntorn")
    out.chmod(0o640)
    before = os.stat(out)
    rep = repair_locked(str(out), "tsv", True, False, "auto", 10.0, KEEP)
    assert rep.repaired and rep.moved == 3 and rep.ok
    assert out.read_bytes() == b"a\tb\n1\t2\n3\t4\n"
    after = os.stat(out)
    assert after.st_ino != before.st_ino and (after.st_mode & 0o777) == 0o640
    rejects = Path(f"{out}.rejects").read_bytes().splitlines()
    assert [r.split(b"\t", 1)[1] for r in rejects] == [b"bad", b"1\t2", b"torn"]
    assert verify(out).ok


def test_a_writer_after_the_repair_appends_to_the_new_file(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    append_record(out, ["1", "2"], columns=["a", "b"])
    with open(out, "ab") as f:
        f.write(b"junk\n")
    repair_locked(str(out), "tsv", True, False, "auto", 10.0, KEEP)
    append_record(out, ["3", "4"], columns=["a", "b"])  # the cached writer follows the name
    assert out.read_bytes() == b"a\tb\n1\t2\n3\t4\n"


def test_nothing_to_repair_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\n1\n")
    ino = os.stat(out).st_ino
    rep = repair_locked(str(out), "tsv", True, False, "auto", 10.0, KEEP)
    assert not rep.repaired and rep.ok and os.stat(out).st_ino == ino
    assert not Path(f"{out}.rejects").exists()


def test_a_missing_out_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        repair_locked(str(tmp_path / "none.tsv"), "tsv", True, False, "auto", 1.0, KEEP)
