"""The words for a person live in ``zotsink.cli``; the library's reports carry data.

A report class of the public API holds what was found and gives it as ``to_dict()``; the
sentences printed on stderr are built by the command that prints them, so a second wording
of the same report cannot grow in the library.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import zotsink
from zotsink import CollectReport, collect
from zotsink.cli.collect import collect_summary

#: Method names that build sentences for a person.
WORDING = frozenset({"summary", "describe"})


def public_classes() -> list[type]:
    return [c for n in zotsink.__all__ if inspect.isclass(c := getattr(zotsink, n))]


def methods_of(cls: type) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef) and node.name == cls.__name__
    return {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_scan_sees_the_reports() -> None:
    names = {c.__name__ for c in public_classes()}
    assert {"VerifyReport", "ArchiveReport", "StatusReport", "DoctorReport"} <= names
    assert "to_dict" in methods_of(zotsink.VerifyReport)


def test_no_public_class_words_its_report() -> None:
    wording = {
        f"{c.__name__}.{m}": inspect.getsourcefile(c)
        for c in public_classes()
        for m in methods_of(c) & WORDING
    }
    assert not wording, (
        f"{wording}: a public report builds sentences for a person; move them to a function "
        "in the zotsink/cli module that prints them, and keep the data in to_dict()"
    )


def test_collect_report_data_and_words(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"r{i}.tsv").write_text(f"x\ty\n{i}\t{i * 2}\n")
    (src / "bad.bin").write_bytes(b"\x00\x01")
    rep = collect([src], tmp_path / "o.tsv")
    assert isinstance(rep, CollectReport)
    d = rep.to_dict()
    assert (d["files"], d["records"], d["duplicates"], d["conflicts"]) == (3, 3, 0, 0)
    assert [s["source"] for s in d["skipped"]] == ["bad.bin"]
    assert d["output"] == str(tmp_path / "o.tsv")
    line = collect_summary(rep)
    assert line.startswith("3 files, 3 records, 0 duplicates dropped, 0 key conflicts, 1 skipped, ")
    assert line.endswith(" files/s")
