"""``zotsink add``: task lines appended whole under the task list's lock, numbered exactly.

Producers add at once, through the command and through ``add_tasks``; the task list then
holds every line once and whole, and the numbers each producer was given are the numbers
of its lines, as ``zotsink run`` numbers them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zotsink import RecordError, ZotsinkWarning, add_tasks
from zotsink._core.records import MAX_LINE
from zotsink._run.tasks import task_lines

#: A producer in Python: adds ``rounds`` batches of its lines, prints "first last" each.
_PRODUCER = r"""
import sys
from zotsink import add_tasks
tasks, name, rounds, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for r in range(rounds):
    got = add_tasks(tasks, [f"{name} {r} {i} " + "x" * (i * 97 % 300) for i in range(per)])
    print(got[0], got[-1], flush=True)
"""


def _parse(text: str) -> list[int]:
    """The numbers ``zotsink add`` printed: ``12`` or ``12-40`` per call."""
    nums: list[int] = []
    for word in text.split():
        first, _, last = word.partition("-")
        nums += list(range(int(first), int(last or first) + 1))
    return nums


def test_eight_producers_at_once_every_line_whole_once_numbers_exact(
    tmp_path: Path,
    zotsink_cmd: list[str],
    child_env: Callable[..., dict[str, str]],
    hold: Callable[[Path], subprocess.Popen[bytes]],
    reap: Callable[[subprocess.Popen[Any]], subprocess.Popen[Any]],
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes(b"first\nsecond")  # a torn tail: ended before the first addition
    holder = hold(tasks)  # every producer starts waiting for the lock
    procs: dict[str, subprocess.Popen[bytes]] = {}
    expect: dict[str, list[str]] = {}
    for p in range(4):  # the command, lines on stdin, three calls in a shell loop
        name = f"cli{p}"
        batches = [[f"{name} {r} {i} " + "y" * (i * 131 % 500) for i in range(7)] for r in range(3)]
        expect[name] = [line for b in batches for line in b]
        script = " ; ".join(
            f"printf '%s\\n' {' '.join(repr(x) for x in b)} | \"$@\" add {tasks}" for b in batches
        )
        procs[name] = reap(
            subprocess.Popen(
                ["sh", "-c", script, "sh", *zotsink_cmd],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=child_env(),
            )
        )
    for p in range(4):  # the API, in loops
        name = f"api{p}"
        expect[name] = [
            f"{name} {r} {i} " + "x" * (i * 97 % 300) for r in range(5) for i in range(9)
        ]
        procs[name] = reap(
            subprocess.Popen(
                [sys.executable, "-c", _PRODUCER, str(tasks), name, "5", "9"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=child_env(),
            )
        )
    holder.communicate(b"", timeout=30)
    given: dict[str, list[int]] = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        if name.startswith("api"):
            given[name] = _parse(" ".join(w.replace(" ", "-") for w in out.decode().splitlines()))
        else:
            given[name] = _parse(out.decode())
    lines, count = task_lines(tasks)
    total = 2 + sum(len(v) for v in expect.values())
    assert count == total and sorted(lines) == list(range(1, total + 1))
    assert tasks.read_bytes().startswith(b"first\nsecond\n")
    for name, nums in given.items():
        assert [lines[n] for n in nums] == expect[name], name  # whole, in order, its own
    every = sorted(n for nums in given.values() for n in nums)
    assert every == list(range(3, total + 1))  # each number given once


def test_add_prints_one_number_or_a_range(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    r = zotsink("add", "tasks.txt", "a b")  # a missing list is begun
    assert (r.returncode, r.stdout) == (0, b"1\n"), r.stderr
    r = zotsink("add", "tasks.txt", "c", "d", "e")
    assert (r.returncode, r.stdout) == (0, b"2-4\n")
    r = zotsink("add", "tasks.txt", input=b"f\ng\n")
    assert (r.returncode, r.stdout) == (0, b"5-6\n")
    r = zotsink("add", "tasks.txt", input=b"")
    assert (r.returncode, r.stdout) == (0, b"")  # nothing given, nothing added
    r = zotsink("add", "tasks.txt", input=b"h")  # no final newline: the line all the same
    assert (r.returncode, r.stdout) == (0, b"7\n")
    assert (tmp_path / "tasks.txt").read_bytes() == b"a b\nc\nd\ne\nf\ng\nh\n"


@pytest.mark.parametrize(
    ("given", "why"),
    [
        (
            b"ok\nnu\0l\n",
            b"zotsink: error: task line 2 of the input: record refused (NUL byte): b'nu\\x00l'; "
            b"nothing was added\n",
        ),
        (
            b"  # a note\n",
            b"zotsink: error: no task line to add to tasks.txt: the line given is blank or a # "
            b"comment, which a task list never runs (nothing was added)\n",
        ),
        (
            b"\n   \n#\n",
            b"zotsink: error: no task line to add to tasks.txt: all 3 lines given are blank or # "
            b"comments, which a task list never runs (nothing was added)\n",
        ),
    ],
)
def test_a_line_that_is_no_task_is_refused_and_nothing_added(
    tmp_path: Path,
    zotsink: Callable[..., subprocess.CompletedProcess[bytes]],
    given: bytes,
    why: bytes,
) -> None:
    (tmp_path / "tasks.txt").write_bytes(b"one\n")
    r = zotsink("add", "tasks.txt", input=given)
    assert (r.returncode, r.stdout, r.stderr) == (1, b"", why)
    assert (tmp_path / "tasks.txt").read_bytes() == b"one\n"


#: Lines that hold nothing but Unicode whitespace, or a comment behind it: a task list
#: numbers them and never runs them.
UNICODE_BLANKS = {
    "no-break space": ("\u00a0", "blank"),
    "ideographic space": ("\u3000", "blank"),
    "file separator": ("\u001c", "blank"),
    "no-break space and a comment": ("\u00a0# note", "a comment"),
}


@pytest.mark.parametrize("name", sorted(UNICODE_BLANKS))
def test_a_line_of_unicode_whitespace_is_left_out_as_run_would_skip_it(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]], name: str
) -> None:
    line, _why = UNICODE_BLANKS[name]
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes(b"one\n")
    r = zotsink("add", "tasks.txt", input=f"two\n{line}\n".encode())
    assert (r.returncode, r.stdout) == (0, b"2\n"), r.stderr
    assert b"left out 1 blank or # line, which a task list never runs" in r.stderr, r.stderr
    assert tasks.read_bytes() == b"one\ntwo\n"
    with pytest.raises(RecordError, match=r"no task line to add .*: the line given is blank"):
        add_tasks(tasks, [line])
    # the same line in a list: numbered, never run, never counted as a task
    tasks.write_bytes(f"one\n{line}\nthree\n".encode())
    r = zotsink("run", "tasks.txt", "out.txt", "--", "echo")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_bytes() == b"one\nthree\n"
    assert b"2 tasks: 2 ok" in zotsink("status", "tasks.txt", "out.txt").stderr
    assert zotsink("add", "tasks.txt", "four").stdout == b"4\n"  # the line still counts


def test_blank_and_comment_lines_are_left_out_and_counted(
    tmp_path: Path, zotsink: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    (tmp_path / "tasks.txt").write_bytes(b"one\n")
    r = zotsink("add", "tasks.txt", input=b"a\n\n   \n# a note\nb\n")
    assert (r.returncode, r.stdout) == (0, b"2-3\n"), r.stderr
    assert r.stderr == (
        b"zotsink: warning: left out 3 blank or # lines, which a task list never runs; added "
        b"the other 2 to tasks.txt\n"
    )
    r = zotsink("add", "tasks.txt", "c", "")
    assert (r.returncode, r.stdout) == (0, b"4\n"), r.stderr
    assert b"left out 1 blank or # line, which" in r.stderr
    assert (tmp_path / "tasks.txt").read_bytes() == b"one\na\nb\nc\n"
    with pytest.warns(ZotsinkWarning, match="left out 1 blank or # line"):
        assert add_tasks(tmp_path / "tasks.txt", ["d", "  "]) == range(5, 6)


def test_api_refuses_a_newline_inside_and_a_line_over_the_limit(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.txt"
    with pytest.raises(RecordError, match="newline inside"):
        add_tasks(tasks, ["a\nb"])
    with pytest.raises(RecordError, match="over the"):
        add_tasks(tasks, ["x" * (MAX_LINE + 1)])
    assert not tasks.exists()
    assert add_tasks(tasks, []) == range(1, 1)
    assert add_tasks(tasks, [b"bytes \xff line", "x"]) == range(1, 3)
    tasks.write_bytes(tasks.read_bytes() + b"\n\n# a comment\n")  # numbered, never run
    assert add_tasks(tasks, ["y"]) == range(6, 7)
    lines, count = task_lines(tasks)
    assert count == 6 and lines[6] == "y" and sorted(lines) == [1, 2, 6]


def test_a_lock_timeout_adds_nothing_and_exits_75(
    tmp_path: Path,
    zotsink: Callable[..., subprocess.CompletedProcess[bytes]],
    hold: Callable[[Path], subprocess.Popen[bytes]],
) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes(b"one\n")
    hold(tasks)
    r = zotsink("add", "tasks.txt", "two", "--timeout", "0.2")
    assert r.returncode == 75 and r.stdout == b""
    assert tasks.read_bytes() == b"one\n"
    assert sorted(os.listdir(tmp_path)) == ["tasks.txt"]  # nothing spilled
