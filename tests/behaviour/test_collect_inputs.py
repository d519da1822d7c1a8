"""collect's input side: formats and sniffing, odd line ends, the union of fields, CSV out.

OUT is read back with the small independent reader below, never with zotsink's own.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from trees import make_tree as files

from zotsink import CollectReport, collect

ZOTSINK = [sys.executable, "-m", "zotsink"]


def table(path: Path) -> list[dict[str, str]]:
    """Rows of a TSV OUT as dicts by header, escapes undone by hand."""
    esc = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}

    def unesc(v: str) -> str:
        out, i = [], 0
        while i < len(v):
            if v[i] == "\\":
                out.append(esc[v[i + 1]])
                i += 2
            else:
                out.append(v[i])
                i += 1
        return "".join(out)

    lines = path.read_text().split("\n")
    assert lines[-1] == ""
    head = lines[0].split("\t")
    rows = [[unesc(c) for c in ln.split("\t")] for ln in lines[1:-1]]
    assert all(len(r) == len(head) for r in rows)
    return [dict(zip(head, r)) for r in rows]


def test_kv_without_newline_crlf_equals_and_several_records(tmp_path: Path) -> None:
    d = files(
        tmp_path / "d",
        {
            "a.txt": b"filename:x.jpg min:57 max:253 mean:82.02685546875",
            "b.txt": b"k=1 v=2\r\nk=2 v=3\r\n\r\n",
            "c.txt": b"\n  \nfilename:y.jpg min:1\n",
            "e.txt": b"",
        },
    )
    rep = collect([d], tmp_path / "o.tsv")
    assert isinstance(rep, CollectReport)
    assert (rep.files, rep.records, rep.skipped) == (4, 4, [])
    assert rep.header == ("source", "filename", "min", "max", "mean", "k", "v")
    assert table(tmp_path / "o.tsv") == [
        {"source": "a.txt", "filename": "x.jpg", "min": "57", "max": "253",
         "mean": "82.02685546875", "k": "", "v": ""},
        {"source": "b.txt", "filename": "", "min": "", "max": "", "mean": "", "k": "1", "v": "2"},
        {"source": "b.txt", "filename": "", "min": "", "max": "", "mean": "", "k": "2", "v": "3"},
        {"source": "c.txt", "filename": "y.jpg", "min": "1", "max": "", "mean": "", "k": "",
         "v": ""},
    ]  # fmt: skip


def test_kv_values_are_parsed_as_append_kv_parses_them(tmp_path: Path) -> None:
    line = b"filename:my holiday photo.jpg min:3 note:a b  c"
    d = files(tmp_path / "d", {"x.txt": line})
    collect([d], tmp_path / "c.tsv", source_column="")
    r = subprocess.run(
        [*ZOTSINK, "append", "--kv", str(tmp_path / "a.tsv")], input=line, capture_output=True
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c.tsv").read_bytes() == (tmp_path / "a.tsv").read_bytes()
    assert table(tmp_path / "c.tsv") == [
        {"filename": "my holiday photo.jpg", "min": "3", "note": "a b c"}
    ]


def test_tsv_csv_jsonl_and_lines_are_sniffed_per_file(tmp_path: Path) -> None:
    d = files(
        tmp_path / "d",
        {
            "1.tsv": b"task\tscore\n1\t0.5\n2\t0.75",
            "2.out": b"task\tscore\n3\t1.0\n",  # no telling ending: sniffed by the tab
            "3.csv": b'task,note\r\n4,"a, b"\r\n5,"say ""hi"""\r\n',
            "4.jsonl": b'{"task": 6, "ok": true, "tags": ["x"], "none": null}\n{"task": 7}\n',
            "5.json": b'[\n  {"task": 8},\n  {"task": 9, "note": "tab\\there"}\n]\n',
            "6.log": b"just some words\nand more\n",  # plain lines: not like the others
        },
    )
    rep = collect([d], tmp_path / "o.tsv")
    assert rep.skipped == [("6.log", STRAY.format(won=5, total=6))]
    assert (rep.files, rep.records) == (5, 9)
    rows = table(tmp_path / "o.tsv")
    assert [r["task"] for r in rows] == ["1", "2", "3", "4", "5", "6", "7", "8", "9"]
    assert rows[4]["note"] == 'say "hi"' and rows[3]["note"] == "a, b"
    assert (rows[5]["ok"], rows[5]["tags"], rows[5]["none"]) == ("true", '["x"]', "")
    assert rows[8]["note"] == "tab\there"  # escaped in OUT, read back whole
    assert rep.header == ("source", "task", "score", "note", "ok", "tags", "none")


#: Why a plain text file is skipped among files with records (--input auto).
STRAY = (
    "plain text, no key:value, TSV, CSV or JSON records, where most files ({won} of {total}) "
    "hold such records; to read every file as lines give --input lines"
)
#: Why a file with records is skipped among plain text files (--input auto).
ODD_RECORDS = (
    "records with named fields (key:value, TSV, CSV or JSON) where most files ({won} of "
    "{total}) are plain text lines; collect it apart, or give --input to read every file in "
    "one format"
)


def kv_files(n: int) -> dict[str, bytes]:
    return {
        f"r/t{i:03d}.txt": f"filename:img_{i}.jpg min:{i} max:{2 * i + 1}".encode()
        for i in range(n)
    }


def test_a_stray_text_file_among_kv_files_is_skipped_counted_and_named(tmp_path: Path) -> None:
    spec = kv_files(300)
    spec["r/t150.notes"] = b"rerun these with more memory\nthey ran out\n"  # no colon at all
    files(tmp_path, spec)
    r = subprocess.run(
        [*ZOTSINK, "collect", "r", "-o", "out.tsv"], cwd=tmp_path, capture_output=True
    )
    assert r.returncode == 0, r.stderr
    rows = "".join(f"t{i:03d}.txt\timg_{i}.jpg\t{i}\t{2 * i + 1}\n" for i in range(300))
    assert (tmp_path / "out.tsv").read_text() == "source\tfilename\tmin\tmax\n" + rows
    lines = r.stderr.decode().splitlines()
    assert lines[0] == "zotsink: skipped t150.notes: " + STRAY.format(won=300, total=301)
    assert lines[1].startswith(
        "zotsink: collected into out.tsv: 300 files, 300 records, 0 duplicates dropped, "
        "0 key conflicts, 1 skipped, "
    )
    assert len(lines) == 2


def test_a_skipped_stray_is_neither_archived_nor_removed(tmp_path: Path) -> None:
    spec = kv_files(5)
    spec["r/README"] = b"results of the array\n"
    files(tmp_path, spec)
    out, arch = tmp_path / "out.tsv", tmp_path / "r.tar"
    rep = collect([tmp_path / "r"], out, archive=arch, remove_sources=True, min_age=0)
    assert rep.skipped == [("README", STRAY.format(won=5, total=6))]
    assert (rep.files, rep.records, rep.archived, rep.removed) == (5, 5, 5, 5)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["README"]
    with tarfile.open(tmp_path / "r.tar") as tar:
        assert sorted(tar.getnames()) == [f"t{i:03d}.txt" for i in range(5)]


def test_strict_refuses_a_stray_text_file_and_writes_nothing(tmp_path: Path) -> None:
    spec = kv_files(3)
    spec["r/zz.txt"] = b"no records here\n"
    files(tmp_path, spec)
    r = subprocess.run(
        [*ZOTSINK, "collect", "r", "-o", "out.tsv", "--strict"], cwd=tmp_path, capture_output=True
    )
    assert r.returncode == 1
    msg = STRAY.format(won=3, total=4)
    assert r.stderr.decode() == f"zotsink: error: r/zz.txt: {msg}; nothing was written (--strict)\n"
    assert not (tmp_path / "out.tsv").exists()


def test_a_collection_of_plain_text_files_is_read_as_lines(tmp_path: Path) -> None:
    d = files(
        tmp_path / "d",
        {
            "a.log": b"started\r\nfinished\r\n",
            "b.log": b"began\n\nfailed: out of memory",
            "c.log": b"key:value\n",  # looks like records, but most files are plain lines
            "d.log": b"",  # no record: no vote, and nothing to skip
            "e.log": b"only line",
        },
    )
    rep = collect([d], tmp_path / "o.tsv")
    assert rep.skipped == [("c.log", ODD_RECORDS.format(won=3, total=4))]
    assert (rep.files, rep.records, rep.header) == (4, 5, ("source", "line"))
    assert (tmp_path / "o.tsv").read_bytes() == (
        b"source\tline\na.log\tstarted\na.log\tfinished\nb.log\tbegan\n"
        b"b.log\tfailed: out of memory\ne.log\tonly line\n"
    )


def test_a_tie_and_files_without_records_keep_the_records(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a.txt": b"some text", "b.txt": b"k:1", "c.txt": b"\n \n"})
    rep = collect([d], tmp_path / "o.tsv")
    assert rep.skipped == [("a.txt", STRAY.format(won=1, total=2))]
    assert (rep.files, rep.records) == (2, 1)  # b.txt, and c.txt with no record
    assert (tmp_path / "o.tsv").read_bytes() == b"source\tk\nb.txt\t1\n"


def test_forced_input_format(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a.txt": b"x:1 y:2\n"})
    collect([d], tmp_path / "o.tsv", input="lines")
    assert table(tmp_path / "o.tsv") == [{"source": "a.txt", "line": "x:1 y:2"}]


def test_union_of_fields_in_first_seen_order_missing_cells_empty(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"1": b"b:1 a:2", "2": b"c:3 b:4", "3": b"a:5 d:6"})
    rep = collect([d], tmp_path / "o.tsv")
    assert rep.header == ("source", "b", "a", "c", "d")
    assert (tmp_path / "o.tsv").read_text() == (
        "source\tb\ta\tc\td\n1\t1\t2\t\t\n2\t4\t\t3\t\n3\t\t5\t\t6\n"
    )


def test_csv_output_when_out_ends_in_csv(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a.txt": b"name:x,y q:1", "b.json": b'{"name": "say \\"hi\\""}'})
    collect([d], tmp_path / "o.csv")
    with open(tmp_path / "o.csv", newline="") as f:
        assert list(csv.reader(f)) == [
            ["source", "name", "q"],
            ["a.txt", "x,y", "1"],
            ["b.json", 'say "hi"', ""],
        ]


def test_unparsable_files_are_skipped_whole_with_the_line(tmp_path: Path) -> None:
    d = files(
        tmp_path / "d",
        {
            "bad.tsv": b"a\tb\n1\t2\n3\n",
            "dup.txt": b"k:1 k:2",
            "json.jsonl": b'{"a": 1}\n{oops\n',
            "good.txt": b"k:1",
            "noheader.csv": b"a,a\n1,2\n",
        },
    )
    rep = collect([d], tmp_path / "o.tsv")
    assert rep.records == 1 and rep.files == 1
    why = dict(rep.skipped)
    assert why["bad.tsv"] == "line 3: 1 fields where the header has 2"
    assert "'k' appears twice" in why["dup.txt"]
    assert why["json.jsonl"].startswith("line 2: not JSON")
    assert why["noheader.csv"] == "line 1: the header names 'a' twice"
    assert table(tmp_path / "o.tsv") == [{"source": "good.txt", "k": "1"}]


def test_byte_order_mark_and_escapes(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"a.txt": "\ufeffpath:C:\\data\\x v:1".encode()})
    collect([d], tmp_path / "o.tsv")
    assert (tmp_path / "o.tsv").read_bytes() == b"source\tpath\tv\na.txt\tC:\\\\data\\\\x\t1\n"
    assert table(tmp_path / "o.tsv") == [{"source": "a.txt", "path": "C:\\data\\x", "v": "1"}]


@pytest.mark.parametrize("dedup", ["exact", "none"])
def test_empty_and_whitespace_files_are_collected_with_no_rows(tmp_path: Path, dedup: str) -> None:
    d = files(tmp_path / "d", {"a": b"", "b": b"\n\n", "c": b"x:1", "d": b"x:1"})
    rep = collect([d], tmp_path / "o.tsv", dedup=dedup)
    assert rep.files == 4 and rep.skipped == []
    assert rep.records == (1 if dedup == "exact" else 2)
    assert rep.duplicates == (1 if dedup == "exact" else 0)


def test_json_values_keep_their_text(tmp_path: Path) -> None:
    obj = {"f": 0.1, "i": 10**20, "s": "ü", "o": {"a": [1, 2]}}
    d = files(tmp_path / "d", {"a.jsonl": json.dumps(obj).encode()})
    collect([d], tmp_path / "o.tsv", source_column="")
    assert table(tmp_path / "o.tsv") == [
        {"f": "0.1", "i": str(10**20), "s": "ü", "o": '{"a":[1,2]}'}
    ]


def test_a_resume_keeps_the_layout_out_holds(tmp_path: Path) -> None:
    spec = kv_files(3)
    spec["r/zz.txt"] = b"no records here\n"
    files(tmp_path, spec)
    out = tmp_path / "out.tsv"
    collect([tmp_path / "r"], out)
    before = out.read_bytes()
    files(tmp_path, {"r/zz2.txt": b"nor here\n"})  # the strays now outnumber the files read
    rep = collect([tmp_path / "r"], out, skip_collected=True)
    why = (
        "plain text, no key:value, TSV, CSV or JSON records, where OUT holds such records; "
        "to read every file as lines give --input lines"
    )
    assert rep.skipped == [("zz.txt", why), ("zz2.txt", why)]
    assert (rep.already, rep.records) == (2, 0)  # t002.txt is read again: OUT's last source
    assert out.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["out.tsv", "r"]  # no rejects, no spill
