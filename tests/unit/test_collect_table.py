"""collect's table: the column union, the de-duplication strategies and the row store."""

from __future__ import annotations

import re

import pytest

from zotsink._collect.spool import Spool
from zotsink._collect.table import OutState, Table, identity_of, key_digest
from zotsink.errors import UsageError


def table(
    dedup: str = "exact",
    key: list[str] | None = None,
    keep: str = "first",
    fmt: str = "tsv",
    source: str = "source",
    pattern: str | None = None,
    mem_limit: int | None = None,
    state: OutState | None = None,
    seeded: list[str] | None = None,
) -> Table:
    spool = Spool(mem_limit=mem_limit)
    pat = re.compile(pattern) if pattern else None
    return Table(fmt, source, pat, dedup, key or [], keep, spool, seeded, state)


def written(t: Table, batch_bytes: int = 1 << 20) -> list[str]:
    """Every line the table would append, header first."""
    out = [t.header_line().decode()]
    for data, _rows in t.batches(batch_bytes):
        out += data.decode().splitlines(keepends=True)
    return [ln.rstrip("\n") for ln in out]


# -- the column union -----------------------------------------------------------------------
def test_columns_are_the_union_in_first_seen_order_and_missing_cells_are_empty() -> None:
    t = table()
    t.add("a", "a", [{"x": "1", "y": "2"}], 0, 1)
    t.add("b", "b", [{"z": "3", "x": "4"}], 0, 2)  # a new column, and a known one out of order
    t.add("c", "c", [{"y": "5"}], 0, 3)
    assert t.columns == ["source", "x", "y", "z"]
    assert written(t) == ["source\tx\ty\tz", "a\t1\t2\t", "b\t4\t\t3", "c\t\t5\t"]


def test_name_pattern_groups_come_after_the_source_column() -> None:
    t = table(pattern=r"run_(?P<run>\d+)_(?P<alpha>[0-9.]+)\.txt")
    t.add("d/run_7_0.5.txt", "run_7_0.5.txt", [{"loss": "1"}], 0, 1)
    t.add("d/other.txt", "other.txt", [{"loss": "2"}], 0, 2)
    assert written(t) == [
        "source\trun\talpha\tloss",
        "d/run_7_0.5.txt\t7\t0.5\t1",
        "d/other.txt\t\t\t2",
    ]
    assert t.unmatched == 1


def test_a_field_named_like_the_source_column_is_refused() -> None:
    t = table()
    with pytest.raises(UsageError, match="like the source column"):
        t.add("a", "a", [{"source": "x"}], 0, 1)


def test_csv_cells_are_quoted_and_tsv_cells_escaped() -> None:
    rec = {"v": 'a,b"c', "w": "tab\there"}
    c, t = table(fmt="csv"), table()
    c.add("f", "f", [rec], 0, 1)
    t.add("f", "f", [rec], 0, 1)
    assert written(c) == ["source,v,w", 'f,"a,b""c",tab\there']
    assert written(t) == ["source\tv\tw", 'f\ta,b"c\ttab\\there']


def test_a_seeded_header_keeps_out_s_column_order() -> None:
    t = table(seeded=["y", "x"])
    t.add("a", "a", [{"x": "1", "y": "2", "z": "3"}], 0, 1)
    assert written(t) == ["source\ty\tx\tz", "a\t2\t1\t3"]


# -- de-duplication -----------------------------------------------------------------------
def test_exact_drops_identical_records_whatever_their_source() -> None:
    t = table()
    t.add("a", "a", [{"x": "1"}, {"x": "1"}], 0, 1)
    t.add("b", "b", [{"x": "1"}, {"x": "2"}], 0, 2)
    assert written(t) == ["source\tx", "a\t1", "b\t2"]
    assert (t.records, t.duplicates, t.conflicts) == (2, 2, 0)


def test_a_record_with_an_extra_empty_cell_is_the_same_record() -> None:
    # OUT cannot tell a missing cell from an empty one: neither may the identity
    assert identity_of(["1", ""]) == identity_of(["1"])
    t = table()
    t.add("a", "a", [{"x": "1"}], 0, 1)
    t.add("b", "b", [{"x": "1", "y": ""}], 0, 2)
    assert t.duplicates == 1


def test_none_keeps_every_record() -> None:
    t = table(dedup="none")
    t.add("a", "a", [{"x": "1"}, {"x": "1"}], 0, 1)
    assert written(t) == ["source\tx", "a\t1", "a\t1"]


def test_key_first_keeps_the_first_in_path_order_and_counts_conflicts() -> None:
    t = table(dedup="key", key=["k"])
    t.add("a", "a", [{"k": "1", "v": "a"}], 5, 1)
    t.add("b", "b", [{"k": "1", "v": "b"}], 9, 2)  # conflict: another value
    t.add("c", "c", [{"k": "1", "v": "a"}], 9, 3)  # duplicate: the same value
    t.add("d", "d", [{"v": "no key"}], 0, 4)  # no key value: always kept
    assert written(t) == ["source\tk\tv", "a\t1\ta", "d\t\tno key"]
    assert (t.duplicates, t.conflicts, t.losers) == (1, 1, {2})


def test_key_last_keeps_the_newest_by_mtime_then_path() -> None:
    t = table(dedup="key", key=["k"], keep="last")
    t.add("a", "a", [{"k": "1", "v": "old"}], 100, 1)
    t.add("b", "b", [{"k": "1", "v": "new"}], 300, 2)
    t.add("c", "c", [{"k": "1", "v": "mid"}], 200, 3)
    t.add("d", "d", [{"k": "2", "v": "x"}], 100, 4)
    t.add("e", "e", [{"k": "2", "v": "y"}], 100, 5)  # same mtime: the later path wins
    assert written(t) == ["source\tk\tv", "b\t1\tnew", "e\t2\ty"]
    assert t.conflicts == 3 and t.losers == {1, 3, 4}


def test_a_key_column_must_exist() -> None:
    t = table(dedup="key", key=["nope"])
    t.add("a", "a", [{"x": "1"}], 0, 1)
    with pytest.raises(UsageError, match="--key column 'nope' is not a column"):
        t.check_key()


def test_rows_and_keys_already_in_out_are_never_written_again() -> None:
    st = OutState()
    st.rows.add(identity_of(["1"]))
    t = table(state=st)
    t.add("a", "a", [{"x": "1"}, {"x": "2"}], 0, 1)
    assert written(t)[1:] == ["a\t2"] and t.duplicates == 1

    st = OutState()
    st.keys[key_digest(["1"])] = identity_of(["1", "old"])  # type: ignore[index]
    for keep in ("first", "last"):  # OUT's record cannot be taken back, newest or not
        t = table(dedup="key", key=["k"], keep=keep, state=st)
        t.add("a", "a", [{"k": "1", "v": "new"}, {"k": "2", "v": "b"}], 10**18, 1)
        assert written(t)[1:] == ["a\t2\tb"], keep
        assert t.conflicts == 1


# -- the row store ------------------------------------------------------------------------
def test_batches_are_cut_only_between_files() -> None:
    t = table()
    for f in range(10):
        t.add(f"f{f}", f"f{f}", [{"i": str(f), "r": str(r)} for r in range(3)], 0, f + 1)
    batches = list(t.batches(20))  # smaller than one file's rows
    assert [rows for _data, rows in batches] == [3] * 10
    for data, _rows in batches:
        sources = {ln.split("\t")[0] for ln in data.decode().splitlines()}
        assert len(sources) == 1


def test_the_store_gives_the_same_rows_from_memory_and_from_disk() -> None:
    def fill(t: Table) -> list[str]:
        for f in range(200):
            recs = [{"i": str(f)}] if f % 2 else [{"i": str(f), f"c{f % 7}": "v"}]
            t.add(f"f{f:03d}", "x", recs, 0, f + 1)
        return written(t, 512)

    mem, disk = table(), table(mem_limit=64)
    assert fill(mem) == fill(disk)
    assert disk.spool.on_disk and not mem.spool.on_disk
    assert len(fill(table())) == 201
