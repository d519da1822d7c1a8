"""collect's quick lane: it must give the very bytes, counts and messages of the general path.

The tests collect the same files twice, with the lane and with it turned off, and compare
OUT byte for byte and the report; a spy counts the files the lane took, so that a lane that
never runs cannot pass for a correct one.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trees import make_tree as files

from zotsink import collect
from zotsink._collect import quicklane as collect_lane
from zotsink._collect import spool as collect_spool
from zotsink._collect.quicklane import QuickLane
from zotsink.errors import UsageError


@contextmanager
def lane(on: bool) -> Iterator[list[int]]:
    """The lane on or off for the collects inside; yields [files the lane took]."""
    taken = [0]
    take = QuickLane.take

    def spy(self: QuickLane, data: bytes, name: str, base: str) -> bool:
        ok = take(self, data, name, base)
        taken[0] += ok
        return ok

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(QuickLane, "take", spy)
        if not on:
            mp.setattr(QuickLane, "usable", staticmethod(lambda table, mode: False))
        yield taken


def both(d: Path, work: Path, **kw: Any) -> tuple[bytes, int]:
    """OUT from a collect with the lane, checked equal to one without (or the same error,
    word for word); and the files the lane took."""
    ending = kw.pop("ending", ".tsv")
    got = {}
    for on in (True, False):
        out = work / f"out-{on}{ending}"
        out.unlink(missing_ok=True)  # a new OUT each time
        with lane(on) as taken:
            try:
                rep = collect([d], out, **kw)
            except UsageError as e:
                got[on] = (b"", (type(e), str(e).replace(str(work), "")), taken[0])
                continue
        summary = (rep.files, rep.records, rep.duplicates, rep.conflicts, rep.skipped, rep.header)
        got[on] = (out.read_bytes() if out.exists() else b"", summary, taken[0])
    assert got[True][:2] == got[False][:2]
    assert got[False][2] == 0
    return got[True][0], got[True][2]


SEED = {
    f"c{c}/f{i:02d}.txt": b"filename:/d/c%d/%d.jpg min:%d max:253 mean:82.5" % (c, i, i % 3)
    for c in range(2)
    for i in range(6)
}


def test_seed_files_take_the_lane_and_give_the_general_bytes(tmp_path: Path) -> None:
    d = files(tmp_path / "d", SEED)
    out, taken = both(d, tmp_path)
    assert taken == 10  # the first two files arm it
    assert out.split(b"\n")[:3] == [
        b"source\tfilename\tmin\tmax\tmean",
        b"c0/f00.txt\t/d/c0/0.jpg\t0\t253\t82.5",
        b"c0/f01.txt\t/d/c0/1.jpg\t1\t253\t82.5",
    ]


def test_odd_files_among_lane_files_give_exact_bytes(tmp_path: Path) -> None:
    d = files(
        tmp_path / "d",
        {
            "f01": b"k:1 v:x",
            "f02": b"k:2 v:y",  # seen twice: the lane is armed
            "f03": b"k:3 v:z\\w",  # a backslash: escaped
            "f04": b"k:1 v:x",  # the record of f01 again: a duplicate
            "f05": b"v:q k:4",  # the same keys in another order: the general path
            "f06": b"k:5 v:",  # an empty last cell: the identity drops it, OUT keeps it
            "f07": b"k:6 v:a\nk:7 v:b",  # two records after one-record files
            "f08": b"  k:8\tv:d \r",  # odd whitespace around and between the tokens
            "f09": b"k:9 w:1",  # a new column: rows before it are padded
            "f10": b"k:10 v:my photo.jpg",  # a value with a space: the general path
            "f11": b"\xef\xbb\xbfk:11 v:bom",  # a byte-order mark: the general path drops it
            "f12": b"k:12 v:\x00",  # binary: skipped
            "f13": b"k:13 v:\xff",  # not UTF-8: skipped
            "f14": b"k:14\xc2\xa0v:nbsp",  # a no-break space is whitespace to parse_kv
            "f15.tsv": b"k:15 v:tsv",  # the ending says TSV: one header, no rows
            "f16": b"k:1 v:x",  # a duplicate again, the lane taking it
            "f17": b"k:17 v:\xc3\xa9",  # UTF-8
            "n\\a\tme": b"k:18 v:n",  # a file name that needs escapes
        },
    )
    out, taken = both(d, tmp_path)
    assert taken == 8, taken
    assert out.decode() == (
        "source\tk\tv\tw\n"
        "f01\t1\tx\t\n"
        "f02\t2\ty\t\n"
        "f03\t3\tz\\\\w\t\n"
        "f05\t4\tq\t\n"
        "f06\t5\t\t\n"
        "f07\t6\ta\t\n"
        "f07\t7\tb\t\n"
        "f08\t8\td\t\n"
        "f09\t9\t\t1\n"
        "f10\t10\tmy photo.jpg\t\n"
        "f11\t11\tbom\t\n"
        "f14\t14\tnbsp\t\n"
        "f17\t17\t\u00e9\t\n"
        "n\\\\a\\tme\t18\tn\t\n"
    )


def test_layouts_whose_columns_are_not_first_give_exact_bytes(tmp_path: Path) -> None:
    d = files(
        tmp_path / "d",
        {
            "a1": b"x:1 y:2",  # x and y come first in the union
            "b1": b"k:1 v:a",
            "b2": b"k:2 v:b",  # the lane is armed: k and v after two empty cells
            "b3": b"k:3 v:c\\d",  # escaped
            "b4": b"k:4 v:",
            "c1": b"v:p k:5",
            "c2": b"v:q k:6",  # the other order: v is the last column, k the one before
            "c3": b"v:r k:7",
            "c4": b"v:s\\t k:8",
        },
    )
    out, taken = both(d, tmp_path)
    assert taken == 4
    assert out.decode() == (
        "source\tx\ty\tk\tv\n"
        "a1\t1\t2\t\t\n"
        "b1\t\t\t1\ta\n"
        "b2\t\t\t2\tb\n"
        "b3\t\t\t3\tc\\\\d\n"
        "b4\t\t\t4\t\n"
        "c1\t\t\t5\tp\n"
        "c2\t\t\t6\tq\n"
        "c3\t\t\t7\tr\n"
        "c4\t\t\t8\ts\\\\t\n"
    )


def test_layouts_of_a_few_files_each_stop_the_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = []
    pattern = collect_lane._pattern

    def spy(keys: tuple[str, ...], sep: str) -> Any:
        compiled.append(keys)
        return pattern(keys, sep)

    monkeypatch.setattr(collect_lane, "_pattern", spy)
    # 3 files a layout: 2 to learn it, 1 for the lane; a compile would not pay
    d = files(
        tmp_path / "d",
        {f"d{i:02d}/f{j}": b"key%d:%d v:x" % (i, j) for i in range(40) for j in range(3)},
    )
    out, taken = both(d, tmp_path)
    assert len(compiled) == collect_lane._FREE and taken == collect_lane._FREE
    assert out.count(b"\n") == 121


def test_alternating_layouts_and_the_other_options(tmp_path: Path) -> None:
    spec = {f"f{i:02d}.log": b"a:%d b:%d" % (i, i % 4) for i in range(0, 20, 2)}
    spec.update({f"f{i:02d}.log": b"a=%d b=0 c=%d" % (i, i % 4) for i in range(1, 20, 2)})
    spec.update({f"g{i}": b"a:%d b:%d" % (i, i) for i in range(5)})
    d = files(tmp_path / "d", spec)
    # each f file finds the lane armed for the other layout; g0 arms it again for g1 to g4
    assert both(d, tmp_path)[1] == 4
    for kw in (
        {"source_column": ""},
        {"input": "kv"},
        {"dedup": "none"},
        {"dedup": "key", "key": "a", "keep": "last"},
        {"name_pattern": r"f(?P<n>\d)"},
        {"ending": ".csv"},
        {"ending": ".jsonl"},
    ):
        both(d, tmp_path, **kw)


def test_a_field_named_like_the_source_column_is_refused_as_before(tmp_path: Path) -> None:
    d = files(tmp_path / "d", {"1": b"k:1", "2": b"k:2", "3": b"k:3", "4": b"k:4 source:x"})
    for on in (True, False):
        with lane(on), pytest.raises(UsageError, match="like the source column") as e:
            collect([d], tmp_path / "o.tsv")
        assert "4: a field is named 'source'" in str(e.value)


def test_skip_collected_counts_off_the_last_source_s_rows(tmp_path: Path) -> None:
    # f2, the last source in OUT, is read again: only its rows not in OUT are written
    d = files(tmp_path / "d", {f"f{i}": b"k:%d v:1" % (i % 3) for i in range(8)})
    for dedup in ("none", "exact"):
        outs, took = {}, {}
        for on in (True, False):
            out = tmp_path / f"o{on}{dedup}.tsv"
            out.write_bytes(b"source\tk\tv\nf0\t0\t1\nf1\t1\t1\nf2\t2\t1\n")
            with lane(on) as taken:
                rep = collect([d], out, skip_collected=True, dedup=dedup)
            outs[on] = (out.read_bytes(), rep.files, rep.records, rep.duplicates, rep.already)
            took[on] = taken[0]
        assert outs[True] == outs[False]
        assert outs[True][4] == 2 and took == {True: 4, False: 0}  # f4 to f7


def test_regex_whitespace_is_str_split_whitespace() -> None:
    # the lane's promise rests on it: \s matches what str.split() splits on, nothing else
    ws = re.compile(r"\s")
    odd = [
        c
        for c in range(sys.maxunicode + 1)
        if not bool(ws.match(chr(c))) == chr(c).isspace() == (len(f"a{chr(c)}b".split()) == 2)
    ]
    assert odd == []


def test_the_lane_writes_through_a_spool_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collect_spool, "MEM_LIMIT", 64)
    d = files(tmp_path / "d", SEED)
    out, taken = both(d, tmp_path)
    assert taken == 10 and out.count(b"\n") == 13


# -- any bytes --------------------------------------------------------------------------------
_PIECES = st.sampled_from(
    ["k", "v", ":", "=", " ", "\t", "\r", "\n", "\\", "\x00", "\u00a0", "\x1c", "\ufeff", "{",
     "1", "\u00e9", "source:"]
)  # fmt: skip
_ODD = st.lists(_PIECES, max_size=4).map("".join)
_SIMPLE = st.sampled_from(["1", "x", "", "a\\b", "\u00e9"])
_VALUE = st.one_of(_SIMPLE, _SIMPLE, _SIMPLE, _ODD)
_PLAIN = st.builds("k:{} v:{}".format, _VALUE, _VALUE)  # the layout the lane learns
_LINE = st.one_of(_PLAIN, _PLAIN, _PLAIN, st.builds("{}{}{}".format, _ODD, _PLAIN, _ODD), _ODD)
_FILE = st.one_of(_LINE.map(str.encode), st.sampled_from([b"k:1 v:\xff", b"", b"k:1 v:1 w:1"]))


@settings(max_examples=60)
@given(
    contents=st.lists(_FILE, min_size=1, max_size=14),
    endings=st.lists(
        st.sampled_from(["", ".txt", ".tsv", ".JSON", ".csv", "\\.b", "\t\r"]), min_size=1
    ),
)
def test_any_files_give_the_same_bytes_with_the_lane(
    contents: list[bytes], endings: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spec = {f"f{i:02d}{endings[i % len(endings)]}": c for i, c in enumerate(contents)}
        both(files(work / "d", spec), work)
