"""The ledger's format 2: rows that are whole or no rows, compact task lists and ends, the
state every row carries, the header that names the format."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zotsink._ledger.format import (
    FIELDS,
    FORMAT,
    INITIAL,
    EndItem,
    State,
    advance,
    crc_cut,
    end_items_text,
    header_format,
    header_line,
    make_row,
    ok_spans,
    parse_end_items,
    parse_row,
    parse_settings,
    parse_tasks,
    row_state,
    tasks_text,
)

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@given(settings=st.dictionaries(TEXT, TEXT, max_size=5), t=st.floats(0, 4e9))
def test_a_run_row_round_trips_whatever_its_settings_hold(settings: dict, t: float) -> None:
    """Settings are JSON: tabs, newlines, backslashes and any character stay in one field."""
    note = json.dumps(settings, ensure_ascii=True)
    fields = ["node1", "b00.4026531836", "123", "456", "c:77", "3", note]
    state = State(5, 60, 7, 0xDEADBEEF, 1, 2)
    line = make_row("run", t, "0a1b2c3d", fields, state)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    row = parse_row(line[:-1])
    assert row is not None
    assert row.kind == "run" and row.run == "0a1b2c3d" and row.state == state
    assert [row.fields[n] for n in FIELDS["run"]] == fields
    assert parse_settings(row.fields["settings"]) == settings
    assert abs(row.time - t) < 1e-5


def test_a_torn_or_changed_row_is_no_row() -> None:
    line = make_row("claim", 1.5, "0a1b2c3d", ["1-64", "abc"], INITIAL)[:-1]
    assert parse_row(line) is not None and crc_cut(line) > 0
    for cut in (1, 10, len(line) - 9, len(line) - 1):
        assert parse_row(line[:cut]) is None and row_state(line[:cut]) is None
    changed = line.replace(b"1-64", b"1-65")
    assert parse_row(changed) is None  # its CRC says so: a hand edit is no row either
    assert parse_row(b"\0" * 200) is None
    assert parse_row(b"end\tx\ty\tz") is None


def test_a_row_of_a_kind_this_release_does_not_know_is_passed_over() -> None:
    line = make_row("claim", 1.0, "r", ["1", "0"], INITIAL)[:-1]
    newer = line.replace(b"claim", b"claim2", 1)
    assert parse_row(newer) is None  # unknown kind (and its CRC no longer holds)


def test_the_state_is_read_from_the_last_row_alone() -> None:
    state = State(1001, 9876, 120, 0x1234, 7, 3)
    line = make_row("end", 2.0, "r", [":0", "", "", ""], state)[:-1]
    assert row_state(line) == state


@given(
    st.lists(
        st.tuples(st.integers(1, 10**7), st.integers(1, 9), st.booleans()),
        max_size=60,
    )
)
def test_task_lists_round_trip_in_order(items: list[tuple[int, int, bool]]) -> None:
    text = tasks_text(items)
    got = [
        (n, att, fresh)
        for first, last, att, fresh in parse_tasks(text)
        for n in range(first, last + 1)
    ]
    assert got == items


def test_consecutive_tasks_of_one_attempt_are_one_range() -> None:
    items = [(n, 1) for n in range(5, 69)] + [(70, 2), (80, 3), (81, 3), (82, 1, True)]
    assert tasks_text(items) == "5-68,70.2,80-81.3,82.1!"


ITEMS = st.builds(
    EndItem,
    st.integers(1, 10**6),
    st.integers(1, 5),
    st.sampled_from(["ok", "failed", "killed", "timeout", "oom", "interrupted"]),
    st.sampled_from(["0", "3", "SIGKILL", "SIGTERM"]),
    st.integers(0, 10**9),
    st.one_of(st.none(), st.integers(0, 10**6)),
    st.integers(0, 1000),
    st.integers(0, 10**9),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 10**8)),
    st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 10**6))),
)


@given(st.lists(ITEMS, max_size=40))
def test_end_items_round_trip(items: list[EndItem]) -> None:
    # an ok item's code is 0 (the row leaves both out); any other is as given
    items = [it._replace(code="0") if it.status == "ok" else it for it in items]
    assert parse_end_items(end_items_text(items)) == items


def test_a_group_of_quick_tasks_costs_a_dozen_bytes_a_task() -> None:
    items = [
        EndItem(n, 1, "ok", "0", 18 + n % 7, 41 + n % 3, 1, 6 + n % 2, True, 14832, (0, 0))
        for n in range(54321, 54385)
    ]
    text = end_items_text(items)
    assert parse_end_items(text) == items
    assert len(text) / len(items) < 13, text[:200]


def test_the_header_names_the_format_and_a_newer_one_is_known_as_newer() -> None:
    assert header_format(header_line()) == (FORMAT, f"zotsink>={'0.2'}")
    assert header_format(b"event\ttime\ttasknum\tkey\n") == (1, "")
    assert header_format(b"zotsink-ledger\t3\tzotsink>=0.3\n") == (3, "zotsink>=0.3")
    assert header_format(b"name\tvalue\n") is None


@pytest.mark.parametrize(
    ("kind", "fields", "moved"),
    [
        ("claim", ["3", "0"], "xgen"),
        ("release", ["3"], "xgen"),
        ("close", ["7"], "ctl"),
        ("stop", [""], "ctl"),
        ("run", ["h", "i", "1", "2", "", "", '{"a": "b"}'], "ctl"),
        ("run", ["h", "i", "1", "2", "", "", ""], None),
        ("end", [":0", "", "", ""], None),
        ("begin", ["1.1:2:3"], None),
    ],
)
def test_what_each_kind_of_row_moves_in_the_state(
    kind: str, fields: list[str], moved: str | None
) -> None:
    after = advance(INITIAL, kind, fields)
    assert after.xgen == INITIAL.xgen + (moved == "xgen")
    assert after.ctl == INITIAL.ctl + (moved == "ctl")
    assert after[:4] == INITIAL[:4]  # the cursor moves only with a cursor's claim


@given(st.lists(ITEMS, max_size=40), st.booleans(), st.integers(1, 10**6))
def test_the_ok_items_of_an_end_row_are_read_as_runs_of_numbers(
    items: list[EndItem], consecutive: bool, first: int
) -> None:
    # a worker's group ends tasks it claimed in a row: consecutive numbers, left out
    if consecutive:
        items = [it._replace(num=first + i) for i, it in enumerate(items)]
    items = [it._replace(code="0") if it.status == "ok" else it for it in items]
    spans = ok_spans(end_items_text(items))
    if any(it.status != "ok" for it in items):
        assert spans is None
        return
    assert spans is not None
    assert [n for a, count in spans for n in range(a, a + count)] == [it.num for it in items]
    if consecutive and items:
        assert spans == [(first, len(items))] or any(it.attempt != 1 for it in items)
