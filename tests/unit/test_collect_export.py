"""The whole-file writer: output endings, column types, JSON Lines bytes, no half files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from zotsink._collect.export import ColumnTypes, check_whole_target, output_format, write_whole
from zotsink.errors import UsageError, WriteError


@pytest.mark.parametrize(
    "name,fmt",
    [("o.tsv", "tsv"), ("o.TAB", "tsv"), ("o.txt", "tsv"), ("results", "tsv"),
     (".hidden", "tsv"), ("o.csv", "csv"), ("o.jsonl", "jsonl"), ("o.ndjson", "jsonl"),
     ("d.v2/o.parquet", "parquet")],
)  # fmt: skip
def test_output_endings(name: str, fmt: str) -> None:
    assert output_format(name) == fmt


@pytest.mark.parametrize("name", ["o.json", "o.tsv.gz", "o.xlsx", "o.2024"])
def test_an_ending_that_cannot_be_honoured_is_refused(name: str) -> None:
    with pytest.raises(UsageError, match="does not write"):
        output_format(name)


def types(*column: str) -> str:
    t = ColumnTypes(1)
    for v in column:
        t.add([v])
    return t.names()[0]


def test_column_types() -> None:
    assert types("1", "-2", "+3", "0") == "integer"
    assert types("1", "2.5") == "float"
    assert types("1e3", ".5", "5.", "-0.0") == "float"
    assert types("1", "", "") == "integer"  # empty is null, not a type
    assert types("", "") == "string"
    assert types("007", "8") == "string"  # a label, not 7
    assert types("1", "nan") == "string" and types("inf") == "string"
    assert types("9223372036854775807") == "integer"
    assert types("9223372036854775808") == "string"  # past int64: kept exactly, as text
    assert types("1e999") == "string"  # not a finite float
    assert types("١٢") == "string"  # digits of other scripts are text
    assert types("1", "x", "2") == "string"


def test_jsonl_values_are_typed_and_the_file_appears_whole(tmp_path: Path) -> None:
    rows = [["a", "1", "0.5", ""], ["b", "", "2", "x\ty"]]
    dest = tmp_path / "o.jsonl"
    n, names = write_whole(str(dest), "jsonl", ["s", "i", "f", "t"], lambda: iter(rows))
    assert (n, names) == (2, ["string", "integer", "float", "string"])
    assert [json.loads(ln) for ln in dest.read_text().splitlines()] == [
        {"s": "a", "i": 1, "f": 0.5, "t": None},
        {"s": "b", "i": None, "f": 2.0, "t": "x\ty"},
    ]
    assert os.listdir(tmp_path) == ["o.jsonl"]


def test_a_failure_while_writing_leaves_nothing(tmp_path: Path) -> None:
    calls = []

    def rows():  # the second pass (the writing) breaks down half way
        calls.append(1)
        yield ["1"]
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        yield ["2"]

    with pytest.raises(OSError):
        write_whole(str(tmp_path / "o.jsonl"), "jsonl", ["i"], rows)
    assert os.listdir(tmp_path) == []


OLD = b'{"i":0}\n'


def test_force_replaces_the_file_with_a_new_one(tmp_path: Path) -> None:
    dest = tmp_path / "o.jsonl"
    dest.write_bytes(OLD)
    old_inode = dest.stat().st_ino
    with pytest.raises(WriteError, match="nothing was replaced"):  # without force
        write_whole(str(dest), "jsonl", ["i"], lambda: iter([["1"]]))
    assert dest.read_bytes() == OLD
    assert write_whole(str(dest), "jsonl", ["i"], lambda: iter([["1"]]), force=True)[0] == 1
    assert dest.read_bytes() == b'{"i":1}\n'
    assert dest.stat().st_ino != old_inode  # renamed into place, not rewritten in it
    assert os.listdir(tmp_path) == ["o.jsonl"]


def test_a_failure_while_forcing_leaves_the_old_file(tmp_path: Path) -> None:
    dest = tmp_path / "o.jsonl"
    dest.write_bytes(OLD)
    calls = []

    def rows():  # the second pass (the writing) breaks down half way
        calls.append(1)
        yield ["1"]
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        yield ["2"]

    with pytest.raises(OSError):
        write_whole(str(dest), "jsonl", ["i"], rows, force=True)
    assert dest.read_bytes() == OLD
    assert os.listdir(tmp_path) == ["o.jsonl"]


def test_force_never_follows_a_symlink_at_the_temporary_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zotsink._core import wholefile

    dest = tmp_path / "o.jsonl"
    dest.write_bytes(OLD)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me\n")
    # the random part of the temporary name, as if guessed: the first name tried is taken
    names = iter(["guessed", "fresh"])
    monkeypatch.setattr(wholefile, "_suffix", lambda: next(names))
    planted = tmp_path / "o.jsonl.part.guessed"
    planted.symlink_to(victim)
    write_whole(str(dest), "jsonl", ["i"], lambda: iter([["1"]]), force=True)
    assert victim.read_bytes() == b"keep me\n"
    assert dest.read_bytes() == b'{"i":1}\n'
    assert planted.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["o.jsonl", "o.jsonl.part.guessed", "victim"]


def test_force_replaces_a_symlink_at_dest_without_following_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me\n")
    dest = tmp_path / "o.jsonl"
    dest.symlink_to(victim)
    write_whole(str(dest), "jsonl", ["i"], lambda: iter([["1"]]), force=True)
    assert not dest.is_symlink() and dest.read_bytes() == b'{"i":1}\n'
    assert victim.read_bytes() == b"keep me\n"


def test_check_whole_target_refuses_without_force_and_a_directory_always(tmp_path: Path) -> None:
    dest = tmp_path / "o.jsonl"
    dest.write_bytes(OLD)
    with pytest.raises(UsageError, match=r"exists already.*give --force to replace it"):
        check_whole_target(str(dest), "jsonl")
    check_whole_target(str(dest), "jsonl", force=True)
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(UsageError, match="is a directory"):
        check_whole_target(str(tmp_path / "d.jsonl"), "jsonl", force=True)
