"""missing and backslashes: a raw row and a TSV-escaped row are never confused.

A tsv OUT holds rows from two kinds of writers. ``producer | zotsink out.tsv`` passes its
lines through as they are (``data\\new\\file.txt`` stays as typed), while ``append_record``
escapes each value (``\\`` -> ``\\\\``, TAB -> ``\\t``). ``missing`` accepts either spelling
of a task's line, and when one cell could be the record of two different task lines
(``a\\\\b`` is ``a\\\\b`` written raw, or ``a\\b`` written escaped) it counts neither as
done and says why: it never marks a task done that may not have run.

Also here: ``--key`` naming a column OUT does not have (a name, or a number beyond OUT's
width) is a usage error, exit 2, never "every task is missing".
"""

from __future__ import annotations

import subprocess
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from zotsink import UsageError, missing

Run = Callable[..., subprocess.CompletedProcess]

API_WRITER = r"""
import sys
from zotsink import append_record
out = sys.argv[1]
for item in sys.stdin.buffer.read().decode("utf-8", "surrogateescape").split("\n")[:-1]:
    append_record(out, {"item": item, "v": "ok"})
"""

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")
TASKS = [
    "data\\new\\file.txt",  # 1 the README's raw-row pattern: written raw
    "tab\\tlook",  # 2 a tab-escape look-alike: written by the API
    "dbl\\\\n",  # 3 backslash, backslash, n: written raw
    NFC,  # 4 written raw
    NFD,  # 5 looks the same, other bytes: not written
    "real\ttab",  # 6 a real TAB: only the API can put it in one tsv cell
    "plain",  # 7 not written
    "trail\\",  # 8 not written
    "\\t",  # 9 written by the API
]
RAW = [1, 3, 4]
API = [2, 6, 9]


def write_raw(zotsink: Run, out: Path, items: list[str]) -> None:
    rows = "".join(f"{item}\tok\n" for item in items).encode()
    r = zotsink("--columns", "item,v", out, input=rows)
    assert r.returncode == 0, r.stderr


def write_api(out: Path, items: list[str], child_env: Callable[..., dict]) -> None:
    data = "".join(f"{item}\n" for item in items).encode()
    r = subprocess.run(
        [sys.executable, "-c", API_WRITER, str(out)],
        input=data,
        capture_output=True,
        env=child_env(),
    )
    assert r.returncode == 0, r.stderr


def test_raw_and_escaped_writers_both_count_and_hostile_values_are_kept_apart(
    tmp_path: Path, zotsink: Run, child_env: Callable[..., dict]
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes("".join(t + "\n" for t in TASKS).encode())
    out = tmp_path / "out.tsv"
    write_raw(zotsink, out, [TASKS[n - 1] for n in RAW])
    write_api(out, [TASKS[n - 1] for n in API], child_env)
    r = zotsink("missing", tasks, out, "--key", "item", "--array")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"5,7-8\n", b"")
    r = zotsink("missing", tasks, out, "--key", "item")
    assert r.stdout.decode().splitlines() == [NFD, "plain", "trail\\"]
    # after the resubmitted tasks write their records (raw), nothing is missing
    write_raw(zotsink, out, [NFD, "plain", "trail\\"])
    r = zotsink("missing", tasks, out, "--key", "item", "--array")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")


@pytest.mark.parametrize("writer", ["raw", "api"])
def test_a_cell_two_task_lines_could_have_written_proves_neither(
    tmp_path: Path, zotsink: Run, child_env: Callable[..., dict], writer: str
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes(b"a\\\\b\na\\b\nother\n")  # a\\b (two backslashes), a\b, other
    out = tmp_path / "out.tsv"
    if writer == "raw":
        write_raw(zotsink, out, ["a\\\\b", "other"])  # the cell a\\b, as typed
    else:
        write_api(out, ["a\\b", "other"], child_env)  # the cell a\\b, escaped from a\b
    r = zotsink("missing", tasks, out, "--key", "item", "--array")
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert r.stdout == b"1-2\n"  # both: the cell does not tell which of them ran
    assert "warning" in err and "line 1" in err and "line 2" in err and "a\\\\b" in err


@pytest.mark.parametrize(
    ("content", "key", "words"),
    [
        (b"item\tv\nx\tok\n", "99", ["99", "2 columns"]),
        (b"item\tv\nx\tok\n", "3", ["3", "2 columns"]),
        (b"x\tok\n", "3", ["3", "2 columns"]),  # no header: the first record's width
        (b"item\tv\nx\tok\n", "nosuch", ["nosuch", "item, v"]),
    ],
    ids=["99", "one-beyond", "headerless", "unknown-name"],
)
def test_a_key_out_has_no_column_for_is_a_usage_error(
    tmp_path: Path, zotsink: Run, content: bytes, key: str, words: list[str]
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes(b"x\ny\n")
    out = tmp_path / "out.tsv"
    out.write_bytes(content)
    for extra in ([], ["--array"]):
        r = zotsink("missing", tasks, out, "--key", key, *extra)
        err = r.stderr.decode()
        assert (r.returncode, r.stdout) == (2, b""), err
        assert err.startswith("zotsink: error: ") and "Traceback" not in err
        for w in words:
            assert w in err, (w, err)
    with pytest.raises(UsageError):
        list(missing(tasks, out, key))


def test_an_empty_out_has_every_task_missing_whatever_the_key(tmp_path: Path, zotsink: Run) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes(b"x\ny\n")
    out = tmp_path / "out.tsv"
    out.write_bytes(b"")  # no task has written yet: its width is unknown
    r = zotsink("missing", tasks, out, "--key", "99", "--array")
    assert (r.returncode, r.stdout) == (0, b"1-2\n"), r.stderr
