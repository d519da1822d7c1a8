"""The recorded settings and their comparison (zotsink._run.settings); how a run records
them in the ledger is tests/unit/test_run_ledger.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zotsink import UsageError, ZotsinkWarning
from zotsink._run.settings import (
    check_news_settings,
    run_settings,
    settings_conflict,
    settings_note,
)

A = {"chunk": "10", "base": "1", "format": "tsv", "command": "echo", "tasks": "t.txt"}


def test_settings_conflict_names_the_first_differing_setting() -> None:
    assert settings_conflict(A, dict(A)) is None
    assert settings_conflict(A, {**A, "tasks": "/abs/t.txt", "max_attempts": "3"}) is None
    assert settings_conflict(A, {**A, "chunk": "5"}) == ("chunk", "10", "5")
    assert settings_conflict(A, {**A, "call": "f.py:main"}) == ("call", "", "f.py:main")
    # a run without an array index has no chunk: not compared
    no_index = {k: v for k, v in A.items() if k not in ("chunk", "base")}
    assert settings_conflict(A, no_index) is None


def test_reconcile_is_what_a_run_goes_on_with() -> None:
    """The settings policy of a resubmission, without a ledger: kept chunk and base, the
    recorded limit, the refusal and --new-settings."""
    from zotsink._run.settings import reconcile

    recorded = {**A, "max_attempts": "3"}
    mine = {**A, "base": "7", "max_attempts": ""}
    # a part of a split resubmission runs under a base of its own: the first stays on record
    got = reconcile(recorded, mine, path="L", array=True, new_settings=False)
    assert (got["base"], got["max_attempts"]) == ("1", "3")
    # a run of every task keeps the array's chunk and base on record
    no_index = {k: v for k, v in mine.items() if k not in ("chunk", "base")}
    got = reconcile(recorded, no_index, path="L", array=False, new_settings=False)
    assert (got["chunk"], got["base"]) == ("10", "1")
    # a limit given is this run's; none recorded and none given: none
    given = reconcile(
        recorded, {**mine, "max_attempts": "5"}, path="L", array=True, new_settings=False
    )
    assert given["max_attempts"] == "5"
    assert reconcile(None, mine, path="L", array=True, new_settings=False) == mine
    other = {**mine, "chunk": "5"}
    with pytest.raises(UsageError) as refused:
        reconcile(recorded, other, path="L", array=True, new_settings=False)
    assert str(refused.value) == (
        "L: tasks ended ok under --chunk 10, and this run has --chunk 5: run as recorded, or "
        "add --new-settings"
    )
    got = reconcile(recorded, other, path="L", array=True, new_settings=True)
    assert (got["chunk"], got["base"]) == ("5", "7")  # recorded anew, as this run was called
    # settings under which no task ended ok bind nobody: the run goes on with its own, and
    # a warning says so; the ledger is read only when a setting differs
    asked: list[str] = []

    def ended_ok() -> bool:
        asked.append("asked")
        return False

    assert reconcile(recorded, mine, path="L", array=True, new_settings=False, ended_ok=ended_ok)
    assert asked == []
    with pytest.warns(ZotsinkWarning) as said:
        got = reconcile(
            recorded, other, path="L", array=True, new_settings=False, ended_ok=ended_ok
        )
    assert got["chunk"] == "5" and asked == ["asked"]
    assert [str(w.message) for w in said] == [
        "L records --chunk 10, under which no task ended ok: this run records its own (--chunk 5)"
    ]


def test_a_relative_call_recorded_by_an_older_release_resolves_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f.py").write_text("def main(line): pass\n")
    monkeypatch.chdir(tmp_path)
    here = run_settings(
        "t",
        (),
        shell=False,
        array=False,
        chunk=1,
        base=1,
        format="tsv",
        columns=None,
        kv=None,
        stamp=(),
        max_attempts=None,
        call="f.py:main",
    )
    assert here["call"] == f"{os.path.realpath(tmp_path / 'f.py')}:main"
    assert settings_conflict({**here, "call": "f.py:main"}, here) is None
    assert settings_conflict({**here, "call": "./f.py:main"}, here) is None
    old = {**here, "call": "../f.py:main"}  # another file, from here
    assert settings_conflict(old, here) == ("call", "../f.py:main", here["call"])


def test_a_run_row_of_another_element_of_the_same_array_job_stops_nothing() -> None:
    mine = {**A, "array_job": "77", "command": "echo --seed 2"}
    theirs = settings_note({**A, "array_job": "77", "command": "echo --seed 1"})
    assert check_news_settings("L", theirs, mine) == (None, False)
    other_job = settings_note({**A, "array_job": "78", "command": "echo --seed 1"})
    why, _ = check_news_settings("L", other_job, mine)
    assert why == (
        "L: another run recorded -- echo --seed 1 as this run, with -- echo --seed 2, began: "
        "run again as recorded, or with --new-settings"
    )
    # the same array job but another format: refused
    why, _ = check_news_settings("L", settings_note({**mine, "format": "csv"}), mine)
    assert why is not None and "another run recorded --format csv as this run" in why
