"""Failed tasks grouped, and the tail of a traceback (zotsink._run.failures)."""

from __future__ import annotations

from zotsink import FailedTask, failure_tail, group_failures

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/x/zotsink/_run/worker.py", line 80, in serve',
    "    out = func(line)",
    "          ^^^^^^^^^^",
    '  File "/work/measure.py", line 6, in measure',
    "    image = Image.open(path).convert(",
    "            ^^^^^^^^^^^^^^^^",
    '  File "/usr/lib/PIL/Image.py", line 3243, in open',
    '    fp = builtins.open(filename, "rb")',
    "         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    "FileNotFoundError: [Errno 2] No such file or directory:",
    "'img/0001.jpg'",
]


def test_the_last_frame_and_the_exception_are_never_cut() -> None:
    # five lines would begin inside the last frame's ^^^^ marks
    assert failure_tail(TRACEBACK, 5) == [
        "Traceback (most recent call last):",
        "  ...",
        *TRACEBACK[7:],
    ]
    # room for more: whole frames before it, from a frame's first line
    assert failure_tail(TRACEBACK, 9) == [
        "Traceback (most recent call last):",
        "  ...",
        *TRACEBACK[4:],
    ]
    assert failure_tail(TRACEBACK, 50) == TRACEBACK
    # a chained traceback: the last one's frame
    chained = [*TRACEBACK, "", "During handling of the above exception:", "", *TRACEBACK]
    assert failure_tail(chained, 3)[-5:] == TRACEBACK[7:]
    # no traceback: the last lines
    assert failure_tail(["a", "b", "c"], 2) == ["b", "c"]
    assert failure_tail(TRACEBACK, 0) == []


def task(num: int, line: str, stderr: list[str], state: str = "failed") -> FailedTask:
    return FailedTask(num, line, state, state, 1, "1", "", 0.5, stderr)


def test_tasks_that_ended_alike_are_one_group() -> None:
    found = [
        task(n, f"img/{n:04d}.jpg", [f"FileNotFoundError: [Errno 2] no file: 'img/{n:04d}.jpg'"])
        for n in (5, 1, 2, 3)
    ]
    found.append(task(4, "img/0004.jpg", ["ValueError: image too small: 3 pixels"]))
    found.append(task(7, "img/0007.jpg", ["ValueError: image too small: 12 pixels"]))
    found.append(task(6, "img/0006.jpg", [], state="killed"))
    groups = group_failures(found)
    assert [(g.state, g.tasknums) for g in groups] == [
        ("failed", [1, 2, 3, 5]),
        ("failed", [4, 7]),
        ("killed", [6]),
    ]
    assert groups[0].last_line == "FileNotFoundError: [Errno 2] no file: 'img/0001.jpg'"
    assert groups[0].to_dict()["count"] == 4
