"""The stream engine (zotsink._stream) and its parts: the line reader (_core.pump), block
encoding (_core.blocks), the last resort. The option checks are in test_options.py."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zotsink import UsageError, WriteError
from zotsink._core.blocks import UNCOUNTED, BlockEncoder
from zotsink._core.outcheck import check_input_not_out
from zotsink._core.pump import MIN_READ, START_SIZE, LineReader, enlarge_pipe
from zotsink._core.records import Encoder
from zotsink._stream import append_stream


def _pipe(data: bytes = b"", *, close: bool = True) -> tuple[int, int]:
    r, w = os.pipe()
    os.write(w, data)
    if close:
        os.close(w)
        w = -1
    return r, w


def _max_pipe() -> int:
    with open("/proc/sys/fs/pipe-max-size") as f:
        return int(f.read())


# -- enlarge_pipe ----------------------------------------------------------------------------
def test_enlarge_pipe_grows_a_pipe_up_to_the_system_limit() -> None:
    r, _ = _pipe()
    try:
        limit = _max_pipe()
        assert enlarge_pipe(r, 1 << 20) == min(1 << 20, limit)
        # Asking for more than the limit gets the limit, not an error.
        assert enlarge_pipe(r, 4 * limit) == limit
    finally:
        os.close(r)


def test_enlarge_pipe_leaves_anything_but_a_pipe_alone(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x\n")
    fd = os.open(f, os.O_RDONLY)
    try:
        assert enlarge_pipe(fd) == 0
    finally:
        os.close(fd)
    assert enlarge_pipe(987654) == 0  # not even open


# -- LineReader ------------------------------------------------------------------------------
def test_reader_hands_out_whole_lines_and_keeps_the_tail() -> None:
    r, _ = _pipe(b"a\nbb\nccc")
    rd = LineReader(r, 100)
    try:
        assert rd.fill() == 8
        assert (rd.ready(), rd.tail_size()) == (5, 3)
        with rd.view(rd.start, rd.cut) as v:
            assert bytes(v) == b"a\nbb\n"
        rd.release(rd.cut)
        assert rd.ready() == 0
        assert rd.fill() == 0 and rd.eof
        assert rd.take_tail() == b"ccc"
        assert rd.tail_size() == 0
    finally:
        os.close(r)


def test_a_line_at_the_limit_is_whole_and_one_byte_more_is_over_it() -> None:
    r, _ = _pipe(b"y" * 10 + b"\n")
    rd = LineReader(r, 10)
    assert rd.fill() == 11 and not rd.overlong and rd.ready() == 11
    os.close(r)
    r, _ = _pipe(b"y" * 11 + b"\n")
    rd = LineReader(r, 10)
    # It reads no further than the limit plus one byte: no whole line over it is ever held.
    assert rd.fill() == 11 and rd.overlong and rd.ready() == 0
    os.close(r)


def test_an_over_long_line_is_drained_piece_by_piece_then_reading_goes_on() -> None:
    r, w = _pipe(b"ok\n" + b"x" * 15, close=False)
    rd = LineReader(r, 10)
    try:
        rd.fill()
        assert rd.ready() == 3
        rd.release(rd.cut)
        rd.fill()
        assert rd.overlong
        with rd.drain_tail() as head:
            got = bytes(head)
        assert got == b"x" * 11 and rd.draining
        rd.fill()  # the rest of what was written: still no newline
        assert (rd.piece, rd.drained) == (b"xxxx", False)
        os.write(w, b"zz\nnext\nta")
        os.close(w)
        w = -1
        rd.fill()
        assert (rd.piece, rd.drained, rd.draining) == (b"zz", True, False)
        with rd.view(rd.start, rd.cut) as v:
            assert bytes(v) == b"next\n"
        assert rd.take_tail() == b"ta"
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_reader_reuses_one_buffer_for_a_long_stream() -> None:
    line = b"%09d\t" + b"z" * 78 + b"\n"
    data = b"".join(line % i for i in range(120_000))  # about 10 MB
    r, w = os.pipe()
    t = threading.Thread(target=_write_all, args=(w, data))
    t.start()
    rd = LineReader(r, 1 << 24)
    got = []
    while rd.fill():
        with rd.view(rd.start, rd.cut) as v:
            got.append(bytes(v))
        rd.release(rd.cut)
    t.join()
    os.close(r)
    assert b"".join(got) == data
    assert len(rd.buf) == START_SIZE  # compacted in place, never grown
    assert MIN_READ < START_SIZE


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.close(fd)


def test_check_not_out_compares_inodes(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"r\n")
    other = tmp_path / "p.txt"
    other.write_bytes(b"r\n")
    with open(out, "rb") as same, open(other, "rb") as diff:
        with pytest.raises(UsageError, match=r"standard input is .* itself"):
            check_input_not_out(same.fileno(), str(out))
        check_input_not_out(diff.fileno(), str(out))
        check_input_not_out(same.fileno(), str(tmp_path / "new.txt"))  # no OUT yet


# -- block encoding: the fast checks agree with the line-by-line ones --------------------
LINE = st.lists(
    st.sampled_from([b"a", b"7", b"\t", b",", b'"', b"\0", b"\r", b" ", b"\xff"]), max_size=8
).map(b"".join)


def _blocks(
    fmt: str, columns: list[str] | None, stamp: tuple[str, ...], count: bool = True
) -> BlockEncoder:
    return BlockEncoder(Encoder(fmt, columns, stamp), None, count)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(LINE, min_size=1, max_size=12),
    fmt=st.sampled_from(["tsv", "csv", "lines"]),
    ncols=st.integers(min_value=0, max_value=3),
    stamp=st.sampled_from([(), ("host", "pid")]),
    count=st.booleans(),
)
def test_fast_block_checks_agree_with_line_by_line(
    lines: list[bytes], fmt: str, ncols: int, stamp: tuple[str, ...], count: bool
) -> None:
    columns = [f"c{i}" for i in range(ncols)] or None
    block = b"".join(ln + b"\n" for ln in lines if b"\n" not in ln)
    fast, slow = _blocks(fmt, columns, stamp, count), _blocks(fmt, columns, stamp, count)
    data, n = fast.encode(block)
    want, m = slow._encode_lines(block, 0)
    assert bytes(data) == want
    if n == UNCOUNTED:  # plain lines passed through: only where no line was refused
        assert not fast.numbered and not slow.rejects and m == len(lines)
    else:
        assert n == m
    assert fast.rejects == slow.rejects
    assert fast.offset == len(block)
    if fast.numbered:
        assert fast.line_no == slow.line_no == len(lines)


def test_refused_lines_are_named_by_input_byte_where_lines_are_not_counted() -> None:
    plain, counted = _blocks("lines", None, (), False), _blocks("lines", None, (), True)
    for enc in (plain, counted):
        assert enc.encode(b"ab\ncd\n") == (b"ab\ncd\n", UNCOUNTED if enc is plain else 2)
        data, n = enc.encode(b"ok\nn\0l\nend\n")
        assert (bytes(data), n) == (b"ok\nend\n", 2)
    assert plain.rejects == [("byte 10: NUL byte", b"n\0l")]  # `tail -c +10` starts there
    assert counted.rejects == [("line 4: NUL byte", b"n\0l")]
    assert plain.offset == counted.offset == 17


def test_a_block_read_from_the_buffer_passes_through_as_a_view() -> None:
    eng = _blocks("tsv", ["a", "b"], ())
    buf = bytearray(b"xx1\t2\n3\t4\nyy")
    with memoryview(buf)[2:10] as v:
        data, n = eng.encode(v, buf, 2)
        assert data is v and n == 2  # checked in place: nothing copied
    data, n = eng.encode(b"1\t2\n3\n")
    assert (data, n) == (b"1\t2\n", 1)
    assert eng.rejects == [("line 4: 1 fields where the header has 2", b"3")]


# -- the API end to end, in this process -----------------------------------------------
def test_append_stream_reports_records_and_an_unterminated_last_line(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    r, _ = _pipe(b"one\ntwo\nthree")
    try:
        rep = append_stream(out, r)
    finally:
        os.close(r)
    assert out.read_bytes() == b"one\ntwo\nthree\n"
    # plain lines pass through uncounted: the report gives bytes, not records
    assert (rep.records, rep.appended, rep.rejected, rep.spilled) == (None, 14, 0, 0)
    assert rep.unterminated
    r, _ = _pipe(b"four\nfive")
    try:
        rep = append_stream(out, r, count=True)
    finally:
        os.close(r)
    assert (rep.records, rep.appended, rep.unterminated) == (2, 10, True)


def test_an_error_after_reading_saves_what_was_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last resort: an unexpected error in the loop spills every line held."""
    real = LineReader.fill
    calls = []

    def fill(self: LineReader) -> int:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a bug")
        return real(self)

    monkeypatch.setattr(LineReader, "fill", fill)
    out = tmp_path / "o.txt"
    r, _ = _pipe(b"one\ntwo\npart")
    try:
        with pytest.raises(
            WriteError, match=r"unexpected error \(RuntimeError: a bug\); the 3 records read"
        ) as ei:
            append_stream(out, r, flush_interval=3600)
    finally:
        os.close(r)
    spill = ei.value.spill_path
    assert spill is not None and Path(spill).read_bytes() == b"one\ntwo\npart\n"
    assert stat.S_IMODE(os.stat(spill).st_mode) == 0o600
    assert not out.exists()


def test_a_failed_write_from_the_read_buffer_leaves_it_resizable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches are written from a view of the read buffer; an error after a short write
    (ENOSPC) must not leave a view alive in its traceback, or the buffer cannot grow."""
    from zotsink._core import fileio

    calls: list[int] = []

    def short_then_full(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return 2
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.os, "write", short_then_full)
    buf = bytearray(b"abcdef\n")
    with memoryview(buf)[0:7] as view, pytest.raises(OSError) as caught:
        fileio.write_all(99, view)
    assert calls == [7, 5]
    assert caught.value.__traceback__ is not None  # kept, as the engine keeps its error
    buf += b"more\n"  # BufferError if a view of buf were still exported
    assert bytes(buf) == b"abcdef\nmore\n"


def test_key_value_lines_keep_their_order_when_one_read_holds_many_batches(
    tmp_path: Path,
) -> None:
    out = tmp_path / "o.tsv"
    data = b"".join(b"n:%d v:x\n" % i for i in range(50))
    r, _ = _pipe(data)
    try:
        rep = append_stream(out, r, kv=":", batch_bytes=60)
    finally:
        os.close(r)
    assert rep.records == 50
    assert out.read_bytes() == b"n\tv\n" + b"".join(b"%d\tx\n" % i for i in range(50))
