"""linecheck.scan: OUT's bytes split into the header, runs of good records, damaged ones."""

from __future__ import annotations

from zotsink._check.linecheck import scan


def units(data: bytes, fmt: str = "tsv", header: bool = True, chunk: int = 7):
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)] or [b""]
    return list(scan(iter(chunks), fmt, header))


def test_good_records_come_as_one_run_per_block() -> None:
    us = units(b"a\tb\n1\t2\n3\t4\n", chunk=1 << 20)
    assert [(u.line, u.last, u.header, u.why) for u in us] == [
        (1, 1, True, None),
        (2, 3, False, None),
    ]
    assert us[1].run == [b"1\t2", b"3\t4"]


def test_each_problem_kind_is_named_on_its_own_line() -> None:
    data = b"a\tb\n1\t2\nnul\0\tx\n\n1\t2\t3\nx\n1\t2\na\tb\ntorn\t"
    found = {u.line: u.why[0] for u in units(data) if u.why}
    assert found == {3: "nul", 4: "empty", 5: "glued", 6: "fields", 8: "header", 9: "fragment"}


def test_the_split_does_not_depend_on_the_chunk_size() -> None:
    data = b"a\tb\n" + b"".join(b"%d\t%d\n" % (i, i) for i in range(50)) + b"bad\n1\t2"
    for chunk in (1, 3, 64, 1 << 20):
        got = units(data, chunk=chunk)
        assert {(u.line, u.why[0]) for u in got if u.why} == {(52, "fields"), (53, "fragment")}
        assert b"".join(u.raw for u in got) == data
        good = sum(len(u.run) if u.run else 1 for u in got if not u.why and not u.header)
        assert good == 50


def test_headerless_tsv_takes_the_field_count_of_its_first_record() -> None:
    found = {u.line: u.why[0] for u in units(b"1\t2\n3\n", header=False) if u.why}
    assert found == {2: "fields"}


def test_lines_format_only_knows_nul_empty_and_fragments() -> None:
    found = {u.line: u.why[0] for u in units(b"a\tb\nc\n\nd\0\ne", "lines", False) if u.why}
    assert found == {3: "empty", 4: "nul", 5: "fragment"}


def test_csv_record_may_span_lines_and_an_open_quote_gives_up_one_line() -> None:
    good = units(b'a,b\n1,"two\nlines"\n3,4\n', "csv")
    assert [(u.line, u.last, u.why) for u in good] == [(1, 1, None), (2, 3, None), (4, 4, None)]
    bad = units(b'a,b\n1,"open\n3,4\n5,6\n', "csv")
    found = {u.line: u.why for u in bad if u.why}
    assert list(found) == [2]
    assert [u.line for u in bad if not u.why] == [1, 3, 4]
