"""The log's line format, written and read in one place (zotsink._run.logline)."""

from __future__ import annotations

from zotsink._run.logline import LogLine, log_line, log_lines, parse_log_line


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


def test_lines_read_in_chunks_are_cut_to_their_head_and_a_torn_end_is_left_out() -> None:
    data = b"1.1\tshort\n2.1\t" + b"x" * 300 + b"\n" + b"\0" * 1000 + b"\n3.1\tlast\n4.1\ttorn"
    for size in (1, 7, 64, len(data)):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        got = list(log_lines(chunks, keep=100))
        assert got == [LogLine(1, 1, b"short"), LogLine(2, 1, b"x" * 100), LogLine(3, 1, b"last")]
