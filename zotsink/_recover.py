"""``zotsink recover``: spill files folded back into OUT, exactly once.

A spill file holds a batch that could not be appended (lock timeout, ENOSPC, ...). Recover
appends it under OUT's lock, fsyncs, and only then removes it. A journal beside the spill
file (``SPILL.recovering``) makes a recover that was killed in between safe to repeat.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterable
from typing import Any, NamedTuple

from ._core.fileio import fsync_dir, write_all
from ._core.records import format_for
from ._core.sidefiles import JOURNAL_SUFFIX, find_spills, host_name
from ._core.writer import Writer, first_line

__all__ = ["RecoverReport", "recover"]


def _sha256(data: bytes = b"") -> Any:
    # imported here, not at the top: hashlib costs ~2.5 ms of every CLI start, and only
    # recover needs it
    import hashlib

    return hashlib.sha256(data)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


class RecoverReport(NamedTuple):
    """What :func:`recover` moved into OUT, and the spill files it left to a live writer."""

    files: list[str]
    records: int
    bytes: int
    busy: list[str]


def _owner_alive(path: str) -> bool:
    """Whether the spill file's writer still runs on this host (it may append more)."""
    tail = os.path.basename(path).split(".spill.", 1)[-1]  # <host>.<pid>[.<n>]
    mine = host_name() + "."
    if not tail.startswith(mine):
        return False  # another host's writer: this host cannot tell, and it has ended its job
    pid_text = tail[len(mine) :].split(".", 1)[0]
    if not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Skip(Exception):
    """Raised under OUT's lock: this spill file is not to be appended."""

    def __init__(self, done: bool) -> None:
        super().__init__()
        self.done = done  # True: its records are in OUT already; False: another recover has it


class _Claim:
    """The writer's ``prepare`` hook for one spill file: runs under OUT's lock.

    A recover killed after OUT's fsync but before it removed the spill file would append
    the same records again on the next run. So a journal beside the spill file first notes
    where they go (OUT's device, inode, offset, length and digest) and which spill content
    they are; a later recover that finds the journal, and those bytes in OUT, only removes
    the spill file. Holding the lock also keeps two recovers from taking one spill file.
    A tsv/csv spill file whose first line is OUT's header gives that line up when OUT
    already starts with it.
    """

    def __init__(self, spill: str, data: bytes, headed: bool) -> None:
        self.spill = spill
        self.digest = _sha256(data).hexdigest()
        nl = data.find(b"\n")
        self.first = data[: nl + 1] if headed and nl >= 0 else None
        self.skipped_header = False

    def __call__(self, fd: int, st: os.stat_result, data: bytes) -> bytes:
        journal = self.spill + JOURNAL_SUFFIX
        if _already_in(journal, self.digest, fd, st):
            raise _Skip(done=True)
        if not os.path.exists(self.spill):
            raise _Skip(done=False)  # another recover appended it meanwhile
        if self.first is not None and st.st_size and first_line(fd) == self.first:
            data = data[len(self.first) :]
            self.skipped_header = True
        # The writer may put one newline before ``data`` (a torn tail): the journal names
        # the offset without it, and _already_in looks at both places.
        note = f"{self.digest} {st.st_dev} {st.st_ino} {st.st_size} {len(data)} "
        note += _sha256(data).hexdigest() + "\n"
        jfd = os.open(
            journal, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            write_all(jfd, note.encode())
            os.fsync(jfd)
        finally:
            os.close(jfd)
        fsync_dir(os.path.dirname(journal) or ".")
        return data


def _already_in(journal: str, digest: str, fd: int, st: os.stat_result) -> bool:
    """Whether ``journal`` proves that this spill content was appended to OUT (open as fd)."""
    try:
        with open(journal, "rb") as f:
            fields = f.read(4096).decode("ascii").split()
        data_digest, dev, ino, offset, length, payload_digest = fields
        if data_digest != digest or (int(dev), int(ino)) != (st.st_dev, st.st_ino):
            return False
        return any(
            _digest_at(fd, st.st_size, at, int(length)) == payload_digest
            for at in (int(offset), int(offset) + 1)
        )
    except (OSError, ValueError):  # none, unreadable or damaged: proves nothing
        return False


def _digest_at(fd: int, size: int, pos: int, length: int) -> str | None:
    end = pos + length
    if size < end:
        return None
    h = _sha256()
    while pos < end:
        chunk = os.pread(fd, min(1 << 20, end - pos), pos)
        if not chunk:
            return None
        h.update(chunk)
        pos += len(chunk)
    return h.hexdigest()


def recover(
    out: str,
    spills: Iterable[str] | None = None,
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    force: bool = False,
) -> RecoverReport:
    """Append spill files to OUT under the lock, fsync, then remove each one.

    ``spills`` defaults to the spill files beside OUT. For a tsv or csv OUT, a spill file
    whose first line is OUT's header gives up that line when OUT already has it. A spill file
    is removed only after its records were written and fsynced, and a journal beside it
    (``SPILL.recovering``) lets a recover that was interrupted in between be repeated
    without appending them twice.
    """
    out = os.fspath(out)
    # Only a tsv or csv OUT starts with a header (verify and read_records read it so). In
    # lines format a spill file's first line is a record, and one equal to OUT's first line
    # must not be taken for a repeated header and dropped; a lines OUT written with
    # --columns may then show its header line once more, which is visible, not lost.
    headed = format_for(out) != "lines"
    paths = list(spills) if spills is not None else find_spills(out)
    done: list[str] = []
    busy = [p for p in paths if not force and _owner_alive(p)]
    records = size = 0
    for p in paths:
        if p in busy:
            continue
        try:
            with open(p, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue  # another recover took it
        if data and not data.endswith(b"\n"):
            data += b"\n"
        claim = _Claim(p, data, headed)
        try:
            with Writer(out, lock=lock, sync="fsync", prepare=claim) as w:
                size += w.append(data, timeout=timeout)
            records += data.count(b"\n") - (1 if claim.skipped_header else 0)
        except _Skip as e:
            if not e.done:
                continue
        # Only now, with the records fsynced in OUT: the spill file, then its journal.
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)
        _remove_quietly(p + JOURNAL_SUFFIX)
        done.append(p)
    if spills is None:
        for j in glob.glob(glob.escape(out) + ".spill.*" + JOURNAL_SUFFIX):
            if not os.path.lexists(j[: -len(JOURNAL_SUFFIX)]):
                _remove_quietly(j)  # its spill file is gone: a recover died before this
    return RecoverReport(done, records, size, busy)
