"""Task lists, chunks and array specs (zotsink._run.tasks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zotsink import InputError, RecordError, UsageError, add_tasks
from zotsink._arrays import chunk_of, chunk_range, scheduler_index, split_spec
from zotsink._core.backoff import Policy
from zotsink._run import tasks as tasks_mod
from zotsink._run.tasks import (
    Cursor,
    Task,
    read_ahead,
    read_tasks,
    runs,
    skipped,
    task_lines,
    task_of,
)


def expand(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def test_read_tasks_numbers_every_line_and_runs_only_real_ones(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_bytes(b"a\n\n  # c\nb\r\n\xff name\n \nlast")
    tasks, n = read_tasks(p)
    assert n == 7
    assert [(t.num, t.line) for t in tasks] == [(1, "a"), (4, "b"), (5, "\udcff name"), (7, "last")]


def test_read_tasks_refuses_binary_and_missing(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_bytes(b"a\nb\0c\n")
    with pytest.raises(InputError, match="line 2 holds a NUL byte"):
        read_tasks(p)
    with pytest.raises(InputError, match="does not exist"):
        read_tasks(tmp_path / "nope")


@pytest.mark.parametrize(
    ("env", "index"),
    [
        ({}, None),
        ({"SLURM_ARRAY_TASK_ID": "7"}, 7),
        ({"SGE_TASK_ID": "undefined"}, None),
        ({"SGE_TASK_ID": "3"}, 3),
        ({"PBS_ARRAY_INDEX": "0"}, 0),
        ({"PBS_ARRAYID": "12"}, 12),
        ({"LSB_JOBINDEX": "0"}, None),
        ({"LSB_JOBINDEX": "4"}, 4),
    ],
)
def test_scheduler_index(env: dict[str, str], index: int | None) -> None:
    assert scheduler_index(env) == index


def test_scheduler_index_that_is_no_number_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="SLURM_ARRAY_TASK_ID='x'"):
        scheduler_index({"SLURM_ARRAY_TASK_ID": "x"})


def test_chunk_range() -> None:
    assert list(chunk_range(3, 10, 1)) == list(range(21, 31))
    assert list(chunk_range(0, 10, 0)) == list(range(1, 11))
    assert list(chunk_range(5, 1, -995)) == [1001]
    with pytest.raises(UsageError, match="below --base"):
        chunk_range(0, 10, 1)


def test_split_spec_fits_in_one_line() -> None:
    assert split_spec([1, 2, 3, 7], 1, 1001) == [("1-3,7", 1)]
    assert split_spec([1, 2, 3, 7], 0, None) == [("0-2,6", 0)]
    assert split_spec([], 1, 1001) == []


def test_split_spec_splits_under_max_array() -> None:
    assert split_spec([5, 1000, 1001, 2500], 1, 1001) == [
        ("5,1000", 1),
        ("1", -999),
        ("500", -1999),
    ]


@settings(deadline=None)  # a busy machine must not fail it: nothing here is timed
@given(
    chunks=st.sets(st.integers(1, 30000), min_size=1, max_size=200),
    base=st.integers(0, 1),
    max_array=st.integers(2, 5000),
)
def test_split_spec_round_trips(chunks: set[int], base: int, max_array: int) -> None:
    got: list[int] = []
    for spec, b in split_spec(sorted(chunks), base, max_array):
        for index in expand(spec):
            assert base <= index < max_array
            assert list(chunk_range(index, 1, b)) == [index - b + 1]
            got.append(index - b + 1)
    assert sorted(got) == sorted(chunks)


def test_chunk_of_inverts_chunk_range() -> None:
    for index in range(1, 20):
        for t in chunk_range(index, 7, 1):
            assert chunk_of(t, 7, 1) == index


def test_only_makes_tasks_of_the_numbers_asked_for(tmp_path: Path) -> None:
    p = tmp_path / "t"
    p.write_bytes(b"a\n\n# c\nd\r\ne\nf")
    full, count = read_tasks(p)
    assert count == 6
    part, count = read_tasks(p, only=chunk_range(2, 2, 1))  # lines 3 and 4
    assert (part, count) == ([Task(4, "d")], 6)
    assert read_tasks(p, only=range(1, 100))[0] == full
    # a few numbers of a longer list (a look's free tasks) are read by their index
    few = {1: 2, 3: 1, 4: 1, 0: 1, 99: 1}
    assert tasks_mod.lines_of(p, few) == {1: "a", 4: "d"}
    assert tasks_mod.lines_of(p, {2, 5}) == {5: "e"}


#: Characters that make lines blank or not: Unicode whitespace of every kind, ``#``, a CR,
#: letters, and bytes that are not UTF-8.
_PIECES = st.sampled_from(
    [" ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u1680", "\u2000",
     "\u2028", "\u3000", "\ufeff", "#", "a", "\xe9", "\udcff"]
)  # fmt: skip


@settings(max_examples=300)
@given(st.lists(st.lists(_PIECES, max_size=4).map("".join), min_size=1, max_size=6))
def test_one_rule_says_which_lines_run_for_every_reader_and_for_add(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str]
) -> None:
    """``task_lines`` (run, status), ``task_of`` (a followed list) and ``add`` agree, line
    by line, on which lines ever run: the one rule of ``skipped``."""
    raw = [line.encode("utf-8", "surrogateescape") for line in lines]
    d = tmp_path_factory.mktemp("rule")
    (d / "t.txt").write_bytes(b"".join(r + b"\n" for r in raw))
    found, count = task_lines(d / "t.txt")
    assert count == len(raw)
    for num, r in enumerate(raw, 1):
        ran = runs(r)
        assert (num in found) == ran == (task_of(num, r) is not None)
        assert skipped(r) == (None if ran else skipped(r.decode("utf-8", "surrogateescape")))
        try:
            add_tasks(d / "added.txt", [r])
        except RecordError as e:
            assert not ran, e
        else:
            assert ran, r


def test_unicode_whitespace_is_blank() -> None:
    for blank in ("", " \t", "\xa0", "\u3000", "\x1c\x1d\x1e\x1f", "\r", "\u2028"):
        assert skipped(blank) == "blank" and skipped(blank.encode()) == "blank"
    for comment in ("#", " # x", "\xa0# note", "\u3000#"):
        assert skipped(comment.encode()) == "a comment"
    for task in ("a", "\xa0a", "a # b", "\udcff"):
        assert runs(task) and runs(task.encode("utf-8", "surrogateescape"))


def _claimed_two(path: Path) -> Cursor:
    got, cursor, _bad = read_ahead(path, Cursor(1, 0, 0, 0), 2, skip=lambda n: False,
                                   closed_lines=None)  # fmt: skip
    assert [t.line for t in got] == ["a", "b"]
    return cursor


def test_a_network_client_behind_the_list_reads_it_again_before_calling_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another node's claim went over lines this client has not seen yet (added through
    # another mount): its first reads come back short, then as the server has them
    path = tmp_path / "tasks.txt"
    path.write_text("a\nb\nc\nd\n")
    cursor = _claimed_two(path)
    real, reads = os.pread, []

    def behind(fd: int, n: int, at: int) -> bytes:
        reads.append(at)
        return b"" if len(reads) <= 2 else real(fd, n, at)

    monkeypatch.setattr(os, "pread", behind)
    got, after, _bad = read_ahead(path, cursor, 2, skip=lambda n: False, closed_lines=None,
                                  coherent=True)  # fmt: skip
    assert [(t.num, t.line) for t in got] == [(3, "c"), (4, "d")]
    assert (after.next, after.at, len(reads)) == (5, 8, 3)
    # on a local disk the first read judges
    reads.clear()
    with pytest.raises(InputError, match="changed under the runs: its bytes before byte 4 "):
        read_ahead(path, cursor, 2, skip=lambda n: False, closed_lines=None)
    assert len(reads) == 1


def test_a_list_still_rewritten_once_the_network_client_settled_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tasks.txt"
    path.write_text("a\nb\nc\n")
    cursor = _claimed_two(path)
    path.write_text("x\ny\nc\n")  # rewritten: no client's cache makes this right
    monkeypatch.setattr(tasks_mod, "HEADER_SETTLE", Policy(1e-3, 4e-3, jitter=False, budget=0.05))
    with pytest.raises(InputError, match="changed under the runs"):
        read_ahead(path, cursor, 2, skip=lambda n: False, closed_lines=None, coherent=True)
