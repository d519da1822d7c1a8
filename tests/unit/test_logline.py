"""The log's line format, written and read in one place (zotsink._run.logline)."""

from __future__ import annotations

from zotsink._run.logline import LogLine, log_line, parse_log_line


def test_a_line_carries_task_and_attempt_and_reads_back() -> None:
    line = log_line(17, 3, b"bad\tinput\0here")
    assert line == b"17.3\tbad\tinput\\0here\n"
    assert parse_log_line(line[:-1]) == LogLine(17, 3, b"bad\tinput\\0here")


def test_lines_of_an_older_log_have_no_attempt_and_are_never_misread() -> None:
    assert parse_log_line(b"17\tbad input") == LogLine(17, None, b"bad input")
    # an old line whose stderr text starts with a number and a tab stays text
    assert parse_log_line(b"17\t3\tbad input") == LogLine(17, None, b"3\tbad input")
    assert parse_log_line(b"17\t") == LogLine(17, None, b"")


def test_what_is_no_log_line() -> None:
    for bad in (b"", b"no tab", b"x\tline", b"17.\tline", b"17.x\tline", b"-1\tline"):
        assert parse_log_line(bad) is None, bad
