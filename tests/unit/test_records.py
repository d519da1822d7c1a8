"""Formats: encoding, decoding, escaping, key:value parsing, provenance stamps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zotsink import append_record, read_records
from zotsink._core.kv import parse_kv
from zotsink._core.records import (
    MAX_LINE,
    Encoder,
    decode_row,
    encode_row,
    escape_tsv,
    format_for,
    parse_stamp,
    stamp_values,
    unescape_tsv,
)
from zotsink.errors import RecordError, UsageError


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("a.tsv", "tsv"), ("A.TAB", "tsv"), ("b.csv", "csv"), ("c.txt", "lines"), ("d", "lines")],
)
def test_format_from_file_ending(name: str, fmt: str) -> None:
    assert format_for(name) == fmt
    assert format_for(name, "auto") == fmt


def test_explicit_format_wins_and_unknown_is_usage_error() -> None:
    assert format_for("x.tsv", "csv") == "csv"
    with pytest.raises(UsageError, match="unknown format 'json'"):
        format_for("x", "json")


def test_tsv_escapes_like_postgres_text_format() -> None:
    assert escape_tsv("a\tb\\c\nd\re") == "a\\tb\\\\c\\nd\\re"
    assert unescape_tsv("a\\tb\\\\c\\nd\\re") == "a\tb\\c\nd\re"
    assert encode_row(["x", None, 1.5, 7], "tsv") == "x\t\t1.5\t7"


def test_float_values_round_trip_with_repr() -> None:
    v = 0.1 + 0.2
    assert float(decode_row(encode_row([v], "tsv"), "tsv")[0]) == v


def test_csv_quotes_only_where_needed() -> None:
    line = encode_row(["a,b", 'c"d', "", "plain"], "csv")
    assert line == '"a,b","c""d",,plain'
    assert decode_row(line, "csv") == ["a,b", 'c"d', "", "plain"]


def test_kv_continuation_tokens_keep_spaces() -> None:
    assert parse_kv("filename:a b.jpg min:1 max:9") == {
        "filename": "a b.jpg",
        "min": "1",
        "max": "9",
    }
    assert parse_kv("time:12:30 x:1") == {"time": "12:30", "x": "1"}
    assert parse_kv("a=1 b=2", "=") == {"a": "1", "b": "2"}
    # the separator is fixed by the first token: a later token without it continues a value
    assert parse_kv("a=1 b:2", None) == {"a": "1 b:2"}


def test_kv_auto_separator_takes_the_first_tokens() -> None:
    assert parse_kv("x=1 y=a:b", None) == {"x": "1", "y": "a:b"}
    assert parse_kv("x:1 y:a=b", None) == {"x": "1", "y": "a=b"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("nosep a:1", "the first token 'nosep' has no ':'"),
        (":v a:1", "empty key"),
        ("a:1 a:2", "key 'a' appears twice"),
    ],
)
def test_kv_bad_lines_are_refused(line: str, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        parse_kv(line)


def test_stamp_fields_and_job_ids_from_every_scheduler() -> None:
    assert parse_stamp("") == ("time", "host", "job", "task")
    assert parse_stamp("job,task") == ("job", "task")
    with pytest.raises(UsageError, match="unknown --stamp field 'node'"):
        parse_stamp("job,node")
    cases = [
        ({"SLURM_ARRAY_JOB_ID": "777", "SLURM_ARRAY_TASK_ID": "5", "SLURM_JOB_ID": "780"}, "777"),
        ({"SLURM_JOB_ID": "780"}, "780"),
        ({"JOB_ID": "12", "SGE_TASK_ID": "3"}, "12"),
        ({"PBS_JOBID": "99[4].server", "PBS_ARRAY_INDEX": "4"}, "99"),
        ({"LSB_JOBID": "55", "LSB_JOBINDEX": "2"}, "55"),
    ]
    for env, job in cases:
        assert stamp_values(["job"], env) == [job]
    assert stamp_values(["task"], cases[0][0]) == ["5"]
    assert stamp_values(["task"], {"SGE_TASK_ID": "undefined"}) == [""]
    assert stamp_values(["task"], {"PBS_ARRAYID": "8"}) == ["8"]
    assert stamp_values(["task"], {"LSB_JOBINDEX": "2"}) == ["2"]
    assert stamp_values(["job", "task"], {}) == ["", ""]
    (t,) = stamp_values(["time"], {})
    assert len(t) == 27 and t.endswith("Z") and t[10] == "T"


def test_encoder_mapping_fixes_columns_and_refuses_unknown_keys() -> None:
    enc = Encoder("tsv", stamp=("job",), env={"SLURM_JOB_ID": "9"})
    assert enc.encode({"a": 1, "b": None}) == b"9\t1\t\n"
    assert enc.header_line() == b"job\ta\tb\n"
    with pytest.raises(RecordError, match="unknown column 'c'"):
        enc.encode({"a": 1, "c": 2})
    with pytest.raises(RecordError, match="2 values where the header has"):
        Encoder("tsv", ["x"]).encode([1, 2])


def test_encoder_refuses_nul_newline_and_overlong() -> None:
    enc = Encoder("lines")
    assert enc.encode("ok\n") == b"ok\n"
    assert enc.encode(b"\xff\rraw") == b"\xff\rraw\n"  # bytes pass through unchanged
    with pytest.raises(RecordError, match="NUL byte"):
        enc.encode("a\0b")
    with pytest.raises(RecordError, match="newline inside"):
        enc.encode("a\nb")
    with pytest.raises(RecordError, match="over the"):
        enc.encode(b"x" * (MAX_LINE + 1))


@pytest.mark.parametrize(
    ("columns", "message"),
    [(["a", "a"], "column 'a' is named twice"), (["a", ""], "must not be empty")],
)
def test_bad_columns_are_usage_errors(columns: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Encoder("tsv", columns)


# Lone surrogates are not text a file can hold; they are refused (see below).
text = st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)))
values = st.lists(text.filter(lambda s: len(s) <= 20))


def test_lone_surrogate_is_a_record_error_not_a_crash(tmp_path) -> None:
    with pytest.raises(RecordError, match="not valid Unicode"):
        append_record(tmp_path / "o.tsv", ["\ud800"])
    with pytest.raises(RecordError, match="not valid Unicode"):
        append_record(tmp_path / "o.txt", "\ud800")
    assert not (tmp_path / "o.tsv").exists() or (tmp_path / "o.tsv").read_bytes() == b""


def test_csv_quotes_bare_carriage_returns() -> None:
    assert encode_row(["\r", "a\nb"], "csv") == '"\r","a\nb"'


@given(rows=st.lists(values.filter(bool), min_size=1, max_size=5))
def test_any_strings_round_trip_through_tsv_append_and_read(tmp_path_factory, rows) -> None:
    out = tmp_path_factory.mktemp("rt") / "out.tsv"
    for row in rows:
        append_record(out, row)
    assert list(read_records(out)) == rows


@given(row=values.filter(bool))
def test_any_strings_round_trip_through_csv(tmp_path_factory, row) -> None:
    out = tmp_path_factory.mktemp("rt") / "out.csv"
    append_record(out, row)
    assert list(read_records(out)) == [row]


def test_a_space_after_the_separator_is_no_part_of_the_value() -> None:
    assert parse_kv("filename: a.png min: 1") == {"filename": "a.png", "min": "1"}
    assert parse_kv("note: two words") == {"note": "two words"}
