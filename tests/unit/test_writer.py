"""The locked append path: header, torn tail, replaced OUT, failed writes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from zotsink._core import writer as writer_module
from zotsink._core.outlet import Outlet
from zotsink._core.writer import Writer
from zotsink.cli._common import exit_code
from zotsink.errors import HeaderMismatch, WriteError

T = 600.0  # lock timeout of one append


def outlet_write(w: Writer, data: bytes, timeout: float) -> int:
    """One block through the outlet, its error raised as append_record raises it; the bytes
    appended."""
    o = Outlet(w, timeout=timeout)
    err = o.write(data, data.count(b"\n"))
    if err is not None:
        raise err
    return o.appended


def test_header_only_into_an_empty_file(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    with Writer(out, header=b"a\tb\n") as w:
        w.append(b"1\t2\n", timeout=T)
    with Writer(out, header=b"a\tb\n") as w:
        w.append(b"3\t4\n", timeout=T)
    assert out.read_bytes() == b"a\tb\n1\t2\n3\t4\n"


def test_different_header_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\tb\n1\t2\n")
    with Writer(out, header=b"a\tc\n") as w, pytest.raises(HeaderMismatch) as e:
        w.append(b"3\t4\n", timeout=T)
    assert str(e.value) == (
        f"{out} starts with the header 'a\\tb', not 'a\\tc'; nothing was written: "
        "choose another OUT or the same columns"
    )
    assert out.read_bytes() == b"a\tb\n1\t2\n"
    assert not list(tmp_path.glob("o.tsv.spill.*"))


def test_torn_tail_gets_a_newline_and_is_never_truncated(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"whole\nfragm")
    with Writer(out) as w:
        w.append(b"next\n", timeout=T)
        w.append(b"again\n", timeout=T)  # our own end: no extra newline
    assert out.read_bytes() == b"whole\nfragm\nnext\nagain\n"


def test_foreign_writer_without_newline_between_our_batches(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    with Writer(out) as w:
        w.append(b"a\n", timeout=T)
        with open(out, "ab") as f:
            f.write(b"foreign")
        w.append(b"b\n", timeout=T)
    assert out.read_bytes() == b"a\nforeign\nb\n"


def test_follows_a_replaced_file(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    with Writer(out) as w:
        w.append(b"1\n", timeout=T)
        os.rename(out, tmp_path / "old.txt")
        w.append(b"2\n", timeout=T)  # OUT is gone: the writer creates it anew
        os.rename(out, tmp_path / "old2.txt")
        out.write_bytes(b"new\n")
        w.append(b"3\n", timeout=T)
    assert (tmp_path / "old.txt").read_bytes() == b"1\n"
    assert (tmp_path / "old2.txt").read_bytes() == b"2\n"
    assert out.read_bytes() == b"new\n3\n"


class FailingWrites:
    """os.write that writes part of the data to OUT, then fails like a full disk."""

    def __init__(self, real, err: int, after: int, target: Path) -> None:
        self.real, self.err, self.after = real, err, after
        self.ino = target.stat().st_ino

    def __call__(self, fd: int, data) -> int:
        if os.fstat(fd).st_ino != self.ino:
            return self.real(fd, data)  # side files write normally
        if self.after <= 0:
            raise OSError(self.err, os.strerror(self.err))
        n = self.real(fd, bytes(data)[: self.after])
        self.after -= n
        return n


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EDQUOT, errno.EIO])
def test_failed_write_is_cut_back_and_spilled(tmp_path: Path, monkeypatch, err: int) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"before\n")
    w = Writer(out)
    monkeypatch.setattr(os, "write", FailingWrites(os.write, err, after=5, target=out))
    with pytest.raises(WriteError) as e:
        outlet_write(w, b"record-1\nrecord-2\n", T)
    monkeypatch.undo()
    w.close()
    assert out.read_bytes() == b"before\n"  # no partial record remains
    assert e.value.errno == err and exit_code(e.value) == 74
    spill = Path(e.value.spill_path)
    assert spill.parent == tmp_path and spill.name.startswith("o.txt.spill.")
    assert spill.read_bytes() == b"record-1\nrecord-2\n"
    assert str(e.value).endswith(f"the records were saved to {spill}")


def test_fsync_policy(tmp_path: Path, monkeypatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    with Writer(tmp_path / "a", sync="fsync") as w:
        w.append(b"x\n", timeout=T)
    # (fsync also asks a network client for the server's size before the write: >= 1)
    assert calls
    calls.clear()
    with Writer(tmp_path / "b", sync="none") as w:
        w.append(b"x\n", timeout=T)
    assert not calls


def test_open_errors_say_what_to_do(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ZOTSINK_SPILL_DIR", str(tmp_path))  # not /tmp: leave nothing behind
    with pytest.raises(WriteError, match="it is a directory; name a file inside it") as e:
        outlet_write(Writer(tmp_path), b"x\n", T)
    assert Path(e.value.spill_path).read_bytes() == b"x\n"  # still saved somewhere
    with pytest.raises(WriteError, match="its directory does not exist; create it first"):
        outlet_write(Writer(tmp_path / "no" / "o.txt"), b"x\n", T)


def test_saved_nowhere_is_a_loud_error(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "o.txt"
    out.write_bytes(b"")
    monkeypatch.setenv("ZOTSINK_SPILL_DIR", str(tmp_path / "missing"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "missing"))

    def broken(fd: int, data) -> int:
        raise OSError(errno.EIO, "Input/output error")

    w = Writer(out)
    monkeypatch.setattr(os, "write", broken)
    with pytest.raises(WriteError, match=r"could not save 1 record meant for .* anywhere") as e:
        outlet_write(w, b"x\n", T)
    assert "they are lost unless the producer can send them again" in str(e.value)


def stale_once(out: Path, calls: list[str]):
    """os.stat that says ESTALE for ``out`` once (noting it in ``calls``): OUT replaced
    through another client of a network filesystem."""
    real_stat = os.stat

    def stat(path, *a, **k):
        if os.fspath(path) == str(out) and not calls:
            calls.append(os.fspath(path))
            raise OSError(errno.ESTALE, "Stale file handle")
        return real_stat(path, *a, **k)

    return stat


def test_a_stale_handle_reopens_instead_of_spilling(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "o.txt"
    calls: list[str] = []
    with Writer(out) as w:
        monkeypatch.setattr(os, "stat", stale_once(out, calls))
        w.append(b"rec\n", timeout=T)
    assert calls and out.read_bytes() == b"rec\n"
    assert not list(tmp_path.glob("o.txt.spill.*"))


@pytest.mark.parametrize("where", ["fstat", "fresh_stat"])
@pytest.mark.parametrize("code", [errno.ENOENT, errno.ESTALE])
def test_a_descriptor_the_server_lost_before_the_write_is_opened_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, code: int
) -> None:
    """Eight writers on two GlusterFS mounts creating the same new OUT together: one got
    ENOENT from its new descriptor before writing (the name raced another client's
    create). Nothing was written, so the writer opens OUT again by name: the record lands
    in OUT, not in a spill file; a descriptor that keeps failing is still an error."""
    from zotsink._core import locking

    out = tmp_path / "o.txt"
    left = [1]
    monkeypatch.setattr(writer_module, "STALE_HANDLE", writer_module.STALE_HANDLE.replace(tries=3))

    def failing(real):
        def call(fd, *a):
            if left[0] > 0:
                left[0] -= 1
                raise OSError(code, os.strerror(code))
            return real(fd, *a)

        return call

    monkeypatch.setattr(writer_module, "wants_fsync", lambda path: True)  # as on GlusterFS
    if where == "fstat":  # the fstat of the lock loop, right after the open

        class OsOfLocking:
            fstat = staticmethod(failing(os.fstat))

            def __getattr__(self, name: str) -> object:
                return getattr(os, name)

        monkeypatch.setattr(locking, "os", OsOfLocking())
    else:
        monkeypatch.setattr(writer_module, "fresh_stat", failing(writer_module.fresh_stat))
    with Writer(out, sync="fsync") as w:
        w.append(b"rec\n", timeout=T)
        assert left == [0]
        left[0] = 10**6  # from now on it always fails: an error, and OUT unchanged
        w._forget()
        with pytest.raises(OSError) as err:
            w.append(b"two\n", timeout=T)
        assert err.value.errno == code
    assert out.read_bytes() == b"rec\n"
    assert not list(tmp_path.glob("o.txt.spill.*"))


@pytest.mark.parametrize("races", [1, 7, 8])
def test_a_create_answered_eexist_opens_the_file_now_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, races: int
) -> None:
    """A GlusterFS client can answer EEXIST to O_CREAT without O_EXCL when another client
    created the file between its lookup and its create: the writer opens it again (up to
    8 tries), and only a filesystem that keeps saying so is an error."""
    from zotsink._core import fileio

    out = tmp_path / "out.txt"
    real_open = os.open
    left = [races]

    def racing_open(path, flags, mode=0o777, **kw):
        if path == str(out) and left[0] > 0:
            left[0] -= 1
            real_open(path, os.O_WRONLY | os.O_CREAT, 0o644)  # another client created it
            raise FileExistsError(errno.EEXIST, "File exists")
        return real_open(path, flags, mode, **kw)

    monkeypatch.setattr(fileio.os, "open", racing_open)
    w = Writer(str(out), lock="flock", sync="none")
    try:
        if races < 8:
            w.append(b"r\n", timeout=5)
            assert out.read_bytes() == b"r\n"
        else:
            with pytest.raises(WriteError, match="File exists"):
                w.append(b"r\n", timeout=5)
            assert out.read_bytes() == b""
    finally:
        w.close()


def test_the_prepare_hook_sees_a_block_given_as_a_view(tmp_path: Path) -> None:
    """The stream hands batches as views of its read buffer: a prepare hook must still see
    each one (as bytes), not be skipped."""
    out = tmp_path / "out.txt"
    seen: list[object] = []

    def upper(fd: int, st: os.stat_result, data: bytes) -> bytes:
        seen.append(type(data))
        return data.upper()

    buf = bytearray(b"xxab\ncd\nyy")
    with Writer(str(out), lock="flock", sync="none", prepare=upper) as w, memoryview(buf) as v:
        assert w.append(v[2:8], timeout=5) == 6
    assert seen == [bytes]
    assert out.read_bytes() == b"AB\nCD\n"


def test_a_writer_that_keeps_out_open_locks_it_without_the_whole_way(
    tmp_path: Path, monkeypatch
) -> None:
    # The steady state (OUT open, lock free, the name still holding the inode) takes one
    # lock attempt and one stat; open_locked() is for the first append and for changes.
    out = tmp_path / "o.txt"
    calls: list[str] = []
    real = writer_module.open_locked

    def counted(path, *a, **k):
        calls.append(path)
        return real(path, *a, **k)

    monkeypatch.setattr(writer_module, "open_locked", counted)
    with Writer(out) as w:
        for i in range(5):
            w.append(b"%d\n" % i, timeout=T)
        assert len(calls) == 1
        os.rename(out, tmp_path / "old.txt")  # replaced: the whole way again, once
        w.append(b"5\n", timeout=T)
        w.append(b"6\n", timeout=T)
    assert len(calls) == 2
    assert (tmp_path / "old.txt").read_bytes() == b"0\n1\n2\n3\n4\n"
    assert out.read_bytes() == b"5\n6\n"


def test_a_stale_handle_after_the_first_append_reopens_too(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "o.txt"
    calls: list[str] = []
    with Writer(out) as w:
        w.append(b"one\n", timeout=T)
        monkeypatch.setattr(os, "stat", stale_once(out, calls))
        w.append(b"two\n", timeout=T)
    assert calls and out.read_bytes() == b"one\ntwo\n"
    assert not list(tmp_path.glob("o.txt.spill.*"))


def test_an_interrupt_in_the_short_way_does_not_keep_the_lock(tmp_path: Path, monkeypatch) -> None:
    import fcntl

    out = tmp_path / "o.txt"
    real_stat = os.stat

    def interrupted(path, *a, **k):
        if os.fspath(path) == str(out):
            raise KeyboardInterrupt
        return real_stat(path, *a, **k)

    with Writer(out) as w:
        w.append(b"one\n", timeout=T)
        monkeypatch.setattr(os, "stat", interrupted)
        with pytest.raises(KeyboardInterrupt):
            w.append(b"two\n", timeout=T)
        monkeypatch.setattr(os, "stat", real_stat)
        # another open file description (another writer) gets the lock at once
        fd = os.open(out, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        w.append(b"three\n", timeout=T)
    assert out.read_bytes() == b"one\nthree\n"


def test_an_unlock_that_fails_after_the_write_is_no_error_and_spills_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    # A stale handle can refuse the unlock after the records are in OUT. Reporting it as
    # a failed append would save them to a spill file too, and recover would add them twice.
    from zotsink._core import locking

    out = tmp_path / "o.txt"
    real_release, refused = locking.FlockLock.release, []

    def release_fails_once(self) -> None:
        if not refused:
            refused.append(self.fd)
            raise OSError(errno.ESTALE, "Stale file handle")
        real_release(self)

    w = Writer(out)
    outlet_write(w, b"one\n", T)
    monkeypatch.setattr(locking.FlockLock, "release", release_fails_once)
    assert outlet_write(w, b"two\n", T) == 4
    assert refused
    outlet_write(w, b"three\n", T)  # OUT opened anew: the lock was dropped with the fd
    w.close()
    assert out.read_bytes() == b"one\ntwo\nthree\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.txt"]


def test_a_header_the_client_cannot_see_yet_is_read_again_not_refused(
    tmp_path: Path, monkeypatch
) -> None:
    # A GlusterFS client that cached OUT before another node wrote its header answers the
    # first reads short for about a second: that is no mismatch.
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\tb\n1\t2\n")
    real_pread, short = os.pread, []

    def stale(fd: int, n: int, offset: int) -> bytes:
        if len(short) < 3:
            short.append(offset)
            return b""
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", stale)
    with Writer(out, header=b"a\tb\n") as w:
        w.append(b"3\t4\n", timeout=T)
    assert len(short) == 3
    assert out.read_bytes() == b"a\tb\n1\t2\n3\t4\n"


def test_a_header_still_unseen_after_the_wait_is_refused(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "o.tsv"
    out.write_bytes(b"a\tb\n1\t2\n")
    short = writer_module.HEADER_SETTLE.replace(budget=0.05)
    monkeypatch.setattr(writer_module, "HEADER_SETTLE", short)
    monkeypatch.setattr(os, "pread", lambda fd, n, offset: b"" if offset else b"a\t")
    with Writer(out, header=b"a\tb\n") as w, pytest.raises(HeaderMismatch):
        w.append(b"3\t4\n", timeout=T)
    assert out.read_bytes() == b"a\tb\n1\t2\n"


def test_a_local_disk_s_size_is_not_asked_of_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's size (an fsync, dropping the file's cached pages, a synced stat) is
    asked only where a client may cache a stale one: a ledger on a local disk, fsynced at
    every append, keeps its pages for the runs that read it next."""
    asked: list[bool] = []
    real = writer_module.fresh_stat
    monkeypatch.setattr(
        writer_module,
        "fresh_stat",
        lambda fd, coherent: asked.append(coherent) or real(fd, coherent),
    )
    monkeypatch.setattr(writer_module, "wants_fsync", lambda path: False)  # a local disk
    with Writer(tmp_path / "l", sync="fsync") as w:
        w.append(b"a\n", timeout=T)
    monkeypatch.setattr(writer_module, "wants_fsync", lambda path: True)  # GlusterFS
    with Writer(tmp_path / "l", sync="fsync") as w:
        w.append(b"b\n", timeout=T)
    assert asked == [True]
    assert (tmp_path / "l").read_bytes() == b"a\nb\n"
