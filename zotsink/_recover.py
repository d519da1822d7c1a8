"""``zotsink recover``: spill files folded back into OUT, exactly once, and only them.

A spill file (``OUT.spill.<host>.<pid>[.<n>]``) holds batches that could not be appended
(lock timeout, ENOSPC, ...). For each one, recover:

1. opens it without following a link or blocking on a FIFO, and trusts it only as a
   regular file of the user's own (see :func:`side_file_problem`);
2. takes the spill file's own lock, the one its writer holds while it adds a batch, and
   keeps it to the end: its writer may still be alive (on another host, recover cannot
   tell), but it cannot add a byte meanwhile, and once the lock is free again it finds the
   file gone and starts a new one. So what recover removes is exactly what it read;
3. under OUT's lock writes a journal beside it (``SPILL.recovering``: where in OUT the
   bytes go, and their digest), appends them and fsyncs;
4. removes the spill file, then the journal.

A recover killed between 3 and 4 is repeated safely: the next one finds the journal, sees
those bytes in OUT, and only removes the spill file. A journal is trusted only when it is a
regular file of the user's own, and is checked against OUT's bytes; one planted
by someone else (a forged note, a FIFO) leaves its spill file alone, with the reason.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterable
from typing import Any, Final, NamedTuple

from ._core.fileio import fsync_dir, pread_chunks, side_file_problem, write_all
from ._core.header import first_is_header
from ._core.records import format_for
from ._core.sidefiles import JOURNAL_SUFFIX, find_spills, host_name
from ._core.spilltake import Refused, check_spill_names, locked_spill, open_side
from ._core.writer import Writer, seen_first_line
from ._ledger.format import header_format
from ._ledger.read import restamp
from ._ledger.v1 import COLUMNS as V1_COLUMNS

__all__ = ["RecoverReport", "recover"]

#: Longest journal recover writes; anything longer was not written by recover.
_JOURNAL_MAX: Final = 4096

#: Headers known by their content, whatever the file's name: a first line equal to one of
#: these is a header in OUT and in a spill file (the ledger of ``zotsink run``, as older and
#: newer releases write it).
_KNOWN_HEADERS: Final = (
    "\t".join(V1_COLUMNS[:16]).encode() + b"\n",
    "\t".join(V1_COLUMNS).encode() + b"\n",
)


def _known_header(line: bytes) -> bool:
    """Whether ``line`` is a header known by its content: a ledger's, of any format."""
    found = header_format(line)
    return line in _KNOWN_HEADERS or (found is not None and found[0] >= 2)


def _sha256(data: bytes = b"") -> Any:
    # imported here, not at the top: hashlib's import is a cost of every CLI start that
    # only recover needs
    import hashlib

    return hashlib.sha256(data)


class RecoverReport(NamedTuple):
    """What :func:`recover` moved into OUT, and the spill files it left, with why."""

    files: list[str]
    records: int
    bytes: int
    busy: list[str]  # a writer on this host still runs: it may add more
    refused: tuple[tuple[str, str], ...] = ()  # (spill file, why it was not trusted)

    @property
    def ok(self) -> bool:
        """Every spill file was folded in: none is left busy or refused."""
        return not self.busy and not self.refused

    def to_dict(self) -> dict[str, object]:
        return {
            **self._asdict(),
            "refused": [{"path": p, "why": why} for p, why in self.refused],
            "ok": self.ok,
        }


class _Skip(Exception):
    """Raised under OUT's lock: this spill file's records are in OUT already."""


def _owner_alive(path: str) -> bool:
    """Whether the spill file's writer still runs on this host (it may append more)."""
    tail = os.path.basename(path).split(".spill.", 1)[-1]  # <host>.<pid>[.<n>]
    mine = host_name() + "."
    if not tail.startswith(mine):
        return False  # another host's writer: this host cannot tell; the lock keeps it safe
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


class _Journal:
    """``SPILL.recovering``: which bytes of OUT hold this spill file's records."""

    def __init__(self, spill: str) -> None:
        self.path = spill + JOURNAL_SUFFIX
        self.fields: list[str] | None = None
        self.exists = False
        try:
            fd = open_side(self.path)
        except Refused as e:
            raise Refused(
                f"its journal {self.path}: {e}; it may have been put there to make recover "
                "drop this spill file unread, or hang: move the spill file to a directory "
                "of your own and name it (`zotsink recover OUT NEWPATH`)"
            ) from None
        if fd < 0:
            return
        self.exists = True
        try:
            data = os.read(fd, _JOURNAL_MAX + 1)
        finally:
            os.close(fd)
        fields = data.decode("ascii", "replace").split()
        if len(data) <= _JOURNAL_MAX and len(fields) == 6:
            self.fields = fields  # else damaged: it proves nothing, and is replaced

    def proves(self, digest: str, fd: int, st: os.stat_result) -> bool:
        """Whether OUT (open as ``fd``) already holds the spill content ``digest``."""
        if self.fields is None:
            return False
        data_digest, dev, ino, offset, length, payload_digest = self.fields
        try:
            if data_digest != digest or (int(dev), int(ino)) != (st.st_dev, st.st_ino):
                return False
            # The writer may have put one newline before the payload (a torn tail).
            return any(
                _digest_at(fd, st.st_size, at, int(length)) == payload_digest
                for at in (int(offset), int(offset) + 1)
            )
        except (OSError, ValueError):
            return False

    def write(self, note: str) -> None:
        """Write the journal afresh (under OUT's lock); created exclusively, so nothing
        planted at its name meanwhile is written through."""
        if self.exists:
            try:
                os.remove(self.path)  # checked when it was read: a journal recover wrote
            except FileNotFoundError:
                pass
            except OSError as e:  # the directory no longer lets us
                raise Refused(f"its journal {self.path} cannot be replaced: {e.strerror}") from None
        try:
            fd = os.open(
                self.path,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o600,
            )
        except FileExistsError:
            raise Refused(
                f"someone created {self.path} while recover ran; the spill file is left alone"
            ) from None
        except OSError as e:
            # Without its journal a recover killed after the append would append it again.
            raise Refused(
                f"cannot write its journal {self.path} ({e.strerror}): move the spill file to "
                "a directory you may write to and name it (`zotsink recover OUT NEWPATH`)"
            ) from None
        self.exists = True
        try:
            write_all(fd, note.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(os.path.dirname(self.path) or ".")

    def remove(self) -> None:
        if self.exists:
            # Its spill file is gone: a journal left behind proves nothing any more, and
            # the next recover clears it.
            with contextlib.suppress(OSError):
                os.remove(self.path)


def _digest_at(fd: int, size: int, pos: int, length: int) -> str | None:
    if size < pos + length:
        return None
    h = _sha256()
    got = 0
    for chunk in pread_chunks(fd, pos + length, start=pos):
        h.update(chunk)
        got += len(chunk)
    return h.hexdigest() if got == length else None


class _Claim:
    """The writer's ``prepare`` hook for one spill file: runs under OUT's lock.

    A spill file whose first line is OUT's header gives that line up (see
    :meth:`repeats_header`).
    """

    def __init__(self, journal: _Journal, data: bytes, table: bool) -> None:
        self.journal = journal
        self.digest = _sha256(data).hexdigest()
        nl = data.find(b"\n")
        self.first = data[: nl + 1] if nl >= 0 else b""
        self.table = table
        self.skipped_header = False
        self.ledger: str | None = None  # OUT, when it is a ledger of format 2 (rows stamped)
        self.coherent = False

    def repeats_header(self, fd: int, st: os.stat_result) -> bool:
        """Whether the spill file's first line is a header OUT already starts with, from
        what the two files hold (a name says what a file should be, not what it is).

        A header is only ever written by a writer that had one: first into an empty OUT,
        always together with a batch of records, and first into each of its spill files.
        So OUT's first line is a header when it is one known by its content (the ledger's),
        or, in a table (tsv, csv), when records follow it in OUT: an OUT that is its first
        line alone holds a record, never a header, and a spilled record equal to it is
        kept. A ``lines`` OUT has no header unless its content says so.
        """
        if not self.first or not st.st_size:
            return False
        if seen_first_line(fd, st.st_size) != self.first:
            return False
        if _known_header(self.first):
            return True
        return self.table and first_is_header(self.first, st.st_size)

    def __call__(self, fd: int, st: os.stat_result, data: bytes) -> bytes:
        if self.journal.proves(self.digest, fd, st):
            raise _Skip
        if self.repeats_header(fd, st):
            data = data[len(self.first) :]
            self.skipped_header = True
        if self.ledger is not None:
            # a ledger's rows carry the state after them: stamped here, under its lock
            data = restamp(self.ledger, fd, st.st_size, data, coherent=self.coherent)
        # The writer may put one newline before ``data`` (a torn tail): the journal names
        # the offset without it, and _Journal.proves looks at both places.
        note = f"{self.digest} {st.st_dev} {st.st_ino} {st.st_size} {len(data)} "
        self.journal.write(note + _sha256(data).hexdigest() + "\n")
        return data


def _recover_one(
    out: str, path: str, table: bool, lock: str, timeout: float
) -> tuple[int, int] | None:
    """Append one spill file to OUT and remove it: ``(records, bytes)``; None if gone."""

    advice = (
        f"it may have been put there to slip records into {out}: check it, and if its "
        f"records belong there, append them with `zotsink {out} < FILE`"
    )
    # The spill file's own lock, held to the end (see the module's docstring).
    with locked_spill(path, lock, timeout, advice) as taken:
        if taken is None:
            return None  # another recover took it
        fd, st = taken
        journal = _Journal(path)  # checked before OUT's lock is taken
        data = b"".join(pread_chunks(fd, st.st_size))
        records = written = 0
        if data:
            if not data.endswith(b"\n"):
                data += b"\n"
            claim = _Claim(journal, data, table)
            found = header_format(claim.first) if claim.first else None
            if found is not None and found[0] >= 2:
                claim.ledger = out
            try:
                with Writer(out, lock=lock, sync="fsync", prepare=claim) as w:
                    claim.coherent = w.coherent
                    written = w.append(data, timeout=timeout)
                records = data.count(b"\n") - (1 if claim.skipped_header else 0)
            except _Skip:
                pass  # a recover before this one appended them and died before the removal
        # Only now, with the records fsynced in OUT and this file still locked: nobody has
        # added to it since it was read.
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            # The journal stays, so a later recover only tries the removal again.
            raise Refused(
                f"its records are in {out} now, but it cannot be removed ({e.strerror}): "
                "remove it yourself"
            ) from None
        fsync_dir(os.path.dirname(path) or ".")
        journal.remove()
        return records, written


def recover(
    out: str | os.PathLike[str],
    spills: Iterable[str | os.PathLike[str]] | None = None,
    *,
    lock: str = "auto",
    timeout: float = 600.0,
    force: bool = False,
) -> RecoverReport:
    """Append spill files to OUT under the lock, fsync, then remove each one.

    ``spills`` defaults to the spill files beside OUT; named ones must be spill files of
    OUT by name (``OUT.spill.<host>.<pid>[.<n>]``, in any directory), else
    :class:`UsageError` is raised before anything is done. A spill file whose writer still
    runs on this host is left (``busy``) unless ``force``; one that cannot be trusted (not
    a regular file, planted by another user, a journal planted beside it) is left
    (``refused``, with the reason). A spill file whose first line is OUT's header gives up
    that line when OUT already starts with it: whether OUT has a header is decided from
    what OUT and the spill file hold (see :meth:`_Claim.repeats_header`).
    """
    out = os.fspath(out)
    # A table (tsv, csv) may start with a header; in lines format a first line is a record
    # unless its content is a header zotsink knows. A lines OUT written with --columns may
    # then show its header line once more, which is visible, not lost.
    table = format_for(out) != "lines"
    if spills is None:
        paths = find_spills(out)
    else:
        paths = [os.fspath(p) for p in spills]
        check_spill_names(out, paths)
    done: list[str] = []
    busy: list[str] = []
    refused: list[tuple[str, str]] = []
    records = size = 0
    for p in paths:
        if not force and _owner_alive(p):
            busy.append(p)
            continue
        try:
            got = _recover_one(out, p, table, lock, timeout)
        except Refused as e:
            refused.append((p, str(e)))
            continue
        if got is not None:
            records += got[0]
            size += got[1]
            done.append(p)
    if spills is None:
        _clear_orphan_journals(out)
    return RecoverReport(done, records, size, busy, tuple(refused))


def _clear_orphan_journals(out: str) -> None:
    """Remove this user's journals whose spill file is gone (a recover died in between)."""
    for j in glob.glob(glob.escape(out) + ".spill.*" + JOURNAL_SUFFIX):
        if os.path.lexists(j[: -len(JOURNAL_SUFFIX)]):
            continue
        with contextlib.suppress(OSError):
            st = os.lstat(j)
            if side_file_problem(st) is None:
                os.remove(j)
